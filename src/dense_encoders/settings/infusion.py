"""What ``dense-encoders infuse`` takes: :class:`InfusionArguments`, one field per flag."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..recipes import RECIPE_HELP
from .datasets import dataset_revision_field, pair_scale_field, pair_threshold_field, whole_scale
from .models import trust_remote_code_field
from .values import check_fields, pair_scale_problem, pair_threshold_problem, positive_integer_problem

METHODS = ("mnrl", "distill")
# fields of InfusionArguments that must be integers >= 1
POSITIVE_FIELDS = ("batch_size", "max_length")


@dataclass(kw_only=True)
class InfusionArguments:
    """What ``dense-encoders infuse`` trains how: each field is one of its flags. The ``eval_*``, ``baseline``
    and ``rerank_top_k`` fields set up the retrieve + rerank report run after training
    (:func:`dense_encoders.evaluation.infusion_report.retrieve_rerank_report`)."""

    recipe: str | None = field(default=None, metadata={"help": RECIPE_HELP + " The paper's: --recipe ce-infusion."})
    cross_encoder: str = field(metadata={"help": "Sequence-classification cross-encoder."})
    train_data: str = field(metadata={
        "help": "BEIR folder with qrels/<split>.tsv, a (query, positive) pairs file, a graded pairs file "
        "(sentence1, sentence2, score), or a Hub dataset id (BeIR/scifact, mteb/scifact) for training."})
    split: str = field(default="train", metadata={
        "help": "Qrels split of --train-data (a BEIR folder), or the rows of a graded pairs tsv with that split, to "
        "train on."})
    pair_threshold: float | None = pair_threshold_field()
    pair_scale: float | None = pair_scale_field()
    output_dir: str = field(metadata={
        "help": "A new or empty folder (models, initial/, teacher scores, report.json); a non-empty one is refused."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Delete the contents of --output-dir (an earlier run) before training."})
    method: str = field(default="mnrl", metadata={
        "choices": METHODS,
        "help": "mnrl: MultipleNegativesRankingLoss + BM25 negatives (as in the paper); distill: the CE's scores."})
    num_copied_layers: int = field(default=1, metadata={"help": "CE layers copied (default 1)."})
    num_new_layers: int = field(default=1, metadata={"help": "Freshly initialised layers (default 1)."})
    random_init: bool = field(default=False, metadata={"help": "DE-2-Rand: same shape, nothing copied."})
    also_random: bool = field(default=False, metadata={"help": "Also train the DE-Rand of the same shape."})
    epochs: float = field(default=1.0, metadata={
        "help": "Training epochs (default %(default)s; the paper's recipe: 10)."})
    batch_size: int = field(default=32, metadata={
        "help": "Queries per batch (default %(default)s; the paper's recipe: 64)."})
    learning_rate: float = field(default=5e-5, metadata={
        "help": "Peak learning rate (default %(default)s; the paper's recipe: 2e-5)."})
    warmup_steps: float = field(default=0.1, metadata={
        "help": "Warm-up: a fraction of training if < 1, else steps (default %(default)s; the paper's recipe: 1000)."})
    max_length: int = field(default=256, metadata={
        "help": "Token limit of queries and documents (default %(default)s; the paper's recipe: 300)."})
    losses: str = field(default="margin_mse+infonce", metadata={"help": "Losses of --method distill."})
    candidates: int = field(default=30, metadata={"help": "BM25 candidates per query (negatives / teacher)."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the new layers' initialisation, the BM25 negatives' sampling and the training order."})
    eval_data: str | None = field(default=None, metadata={
        "help": "BEIR folder, pairs or graded pairs file, or a Hub dataset id, for the retrieve + rerank report."})
    dataset_revision: str | None = dataset_revision_field()
    eval_split: str = field(default="test", metadata={
        "help": "Qrels split of --eval-data (or the rows of a graded pairs tsv with that split) the report uses."})
    baseline: str | None = field(default=None, metadata={
        "help": "A baseline dual encoder for the report (its speed is the 1.00x)."})
    rerank_top_k: int = field(default=50, metadata={
        "help": "Documents per query of each dual encoder's run the cross-encoder re-scores in the report."})
    trust_remote_code: bool = trust_remote_code_field()

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"--method {self.method!r}: choose one of {METHODS}")
        check_fields(self, positive_integer_problem, POSITIVE_FIELDS, optional=False)
        check_fields(self, pair_threshold_problem, ("pair_threshold",))
        check_fields(self, pair_scale_problem, ("pair_scale",))
        self.pair_scale = whole_scale(self.pair_scale)

    def graded_pair_options(self, data: str | None) -> dict:
        """``pair_threshold`` / ``pair_scale`` for ``data`` when it is a graded pairs file, else nothing: the two
        flags go to whichever of ``train_data`` and ``eval_data`` is one."""
        from ..data.retrieval import is_graded_pairs_file  # reads data files: not needed by --help

        if data is None or not is_graded_pairs_file(data):
            return {}
        return {"pair_threshold": self.pair_threshold, "pair_scale": self.pair_scale}

    def check_graded_pairs(self) -> None:
        """Refuse ``pair_threshold`` / ``pair_scale`` when neither the training nor the evaluation data is a graded
        pairs file (sentence1, sentence2, score)."""
        if (self.pair_threshold is not None or self.pair_scale is not None) and not (
                self.graded_pair_options(self.train_data) or self.graded_pair_options(self.eval_data)):
            raise ValueError("--pair-threshold / --pair-scale apply to graded pair files (sentence1, sentence2, "
                             "score); neither --train-data nor --eval-data is one: leave them out")

    def dataset_revisions(self) -> tuple[str | None, str | None]:
        """The revisions of ``train_data`` and ``eval_data``: ``dataset_revision`` for those given by Hub id."""
        from ..data.hub_datasets import revisions_for  # looks at paths: not needed by --help

        train, evaluation = revisions_for((self.train_data, self.eval_data), self.dataset_revision)
        return train, evaluation

    def models(self) -> dict[str, tuple[Path, bool]]:
        """The dual encoders to train: name -> (folder, random_init). DE-N-Rand goes to ``output_dir/random``
        when trained besides DE-N-CE."""
        output, layers = Path(self.output_dir), self.num_copied_layers + self.num_new_layers
        models = {}
        if self.random_init or self.also_random:
            models[f"DE-{layers}-Rand"] = (output / "random" if self.also_random else output, True)
        if not self.random_init:
            models[f"DE-{layers}-CE"] = (output, False)
        return models


__all__ = ["METHODS", "POSITIVE_FIELDS", "InfusionArguments"]
