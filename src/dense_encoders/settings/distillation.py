"""What ``dense-encoders distill`` takes: :class:`DistillationSetup` (student, data, losses and their options,
sampling, lengths) and :class:`DistillationTrainerFields`, the fields :class:`~dense_encoders.trainer.
DistillationArguments` adds to transformers' ``TrainingArguments`` or gives other defaults (TITE fine-tuning,
Sec. 4.1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..recipes import RECIPE_HELP
from ..vectors import POOLING_MODES, SIMILARITIES
from .datasets import dataset_revision_field
from .losses import LossSettings
from .models import trust_remote_code_field
from .training import overwrite_output_dir_field, resume_from_checkpoint_field

if TYPE_CHECKING:
    from ..trainer.losses import DistillationObjective

POOLINGS = (*POOLING_MODES, "pooler")  # "pooler": the model's own pooler_output


@dataclass
class DistillationTrainerFields:
    """The fields :class:`~dense_encoders.trainer.DistillationArguments` adds to ``TrainingArguments`` or gives
    other defaults: distillation's (TITE fine-tuning, Sec. 4.1), and checkpoints off unless asked for."""

    output_dir: str = field(default="runs/distill", metadata={"help": "Where checkpoints and the student go."})
    learning_rate: float = field(default=2e-5, metadata={"help": "AdamW learning rate."})
    warmup_steps: float = field(default=0.1, metadata={"help": "Warm-up (a fraction of the steps, or a count)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Queries per device and step."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep the collator's columns."})
    logging_steps: float = field(default=10, metadata={"help": "Log every N steps."})
    save_strategy: str | None = field(default=None, metadata={
        "help": "Checkpoints during training: no / steps / epoch / best. Default: steps when --save_steps is given, "
        "else no."})
    save_steps: float | None = field(default=None, metadata={
        "help": "Save a checkpoint every N steps (< 1: a fraction of the run); giving it turns --save_strategy steps "
        "on unless --save_strategy is given too (default with --save_strategy steps: 500)."})
    report_to: str = field(default="none", metadata={"help": "Loggers (tensorboard, wandb, ...)."})
    overwrite_output_dir: bool = overwrite_output_dir_field()
    resume_from_checkpoint: str | None = resume_from_checkpoint_field()


@dataclass
class _DistillationData:
    """The student, its training data and its losses: the first fields of :class:`DistillationSetup`."""

    student: str = field(default=None, metadata={"help": "Student checkpoint: folder or Hub id (any encoder)."})
    train_file: str = field(default=None,
                            metadata={"help": "Training jsonl (query, documents or ids, teacher scores)."})
    corpus: str | None = field(default=None, metadata={
        "help": "corpus.jsonl (also .gz), a BEIR folder, or a Hub dataset id (BeIR/scifact, mteb/scifact) resolving "
        "document_ids."})
    queries: str | None = field(default=None, metadata={
        "help": "queries.jsonl (also .gz), a BEIR folder, or a Hub dataset id resolving query_ids."})
    dataset_revision: str | None = dataset_revision_field()
    recipe: str | None = field(default=None, metadata={"help": RECIPE_HELP})
    losses: str = field(default="margin_mse+kl+infonce", metadata={"help": "Losses, '+'-joined, optional ':weight'."})


@dataclass
class DistillationSetup(LossSettings, _DistillationData):
    """What is distilled into what (everything that is not a Trainer setting). The losses' options
    (``sce_temperature``, ``infonce_theta``, ...) are the fields the registered losses declare
    (:class:`~dense_encoders.settings.losses.LossSettings`)."""

    pooling: str | None = field(default=None, metadata={"help": "cls / mean / pooler; default: the student's own."})
    similarity: str | None = field(default=None, metadata={"help": "dot / cosine; default: the student's own."})
    student_num_layers: int | None = field(default=None,
                                           metadata={"help": "Keep only the first N layers (BERT family)."})
    documents_per_query: int = field(default=8, metadata={"help": "Documents sampled per query and step."})
    sampling: str = field(default="random",
                          metadata={"help": "random / top / log-random (teacher's best always kept)."})
    query_max_length: int = field(default=32, metadata={"help": "Query token limit."})
    document_max_length: int = field(default=512, metadata={"help": "Document token limit."})
    qrels: str | None = field(default=None, metadata={
        "help": "Relevance judgements (BEIR qrels .tsv 'query-id corpus-id score' with a header, or TREC qrels "
        "'qid 0 docid grade') grading each line's documents by its query_id and document_ids: the judged positives "
        "are P of m3se / rankdistil_b. They replace a 'relevance' field of the training file (with a warning)."})
    relevance_level: int = field(default=1, metadata={
        "help": "Grade from which a judged document counts as a positive of m3se / rankdistil_b (TREC DL: 2); "
        "lower grades are negatives; queries without such a positive and a negative keep the teacher's best as P."})
    allow_missing_weights: bool = field(
        default=False,
        metadata={"help": "Train a student whose weights miss (or add) tensors of its model (refused by default)."}
    )
    trust_remote_code: bool = trust_remote_code_field()

    def __post_init__(self):
        # what the checks read: loaded when a setup is made, not when --help reads the fields
        from ..data.distillation import SAMPLING_STRATEGIES
        from ..data.retrieval import check_relevance_level

        if not self.student:
            raise ValueError("--student is required: a folder or Hub id of the encoder to train")
        if not self.train_file:
            raise ValueError("--train_file is required: a jsonl of queries with teacher-scored documents")
        if self.sampling not in SAMPLING_STRATEGIES:
            raise ValueError(f"--sampling {self.sampling!r}: choose one of {SAMPLING_STRATEGIES}")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise ValueError(f"--pooling {self.pooling!r}: choose one of {POOLINGS}")
        if self.similarity is not None and self.similarity not in SIMILARITIES:
            raise ValueError(f"--similarity {self.similarity!r}: choose one of {SIMILARITIES}")
        check_relevance_level(self.relevance_level, "--relevance-level ")
        self.build_objective()  # unknown losses and options fail here, before any model is loaded

    def build_objective(self) -> DistillationObjective:
        """The :class:`~dense_encoders.trainer.losses.DistillationObjective` of ``losses`` with this setup's loss
        options."""
        from ..trainer.losses import DistillationObjective  # torch: only once a setup is made

        return DistillationObjective(self.losses, settings=self)


__all__ = ["POOLINGS", "DistillationSetup", "DistillationTrainerFields"]
