"""What ``dense-encoders score-teacher`` (:func:`dense_encoders.trainer.teacher.score_teacher`) takes:
:class:`TeacherScoringSettings`, one field per flag (the teacher is its positional argument)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..vectors import POOLING_MODES
from .datasets import dataset_revision_field
from .models import trust_remote_code_field
from .values import check_fields, positive_integer_problem


@dataclass(kw_only=True)
class TeacherScoringSettings:
    """Which candidates of which queries the teacher scores, and where the training file goes."""

    run: str = field(metadata={"help": "TREC run file (qid Q0 docid rank score tag) with the candidates."})
    data: str | None = field(default=None, metadata={
        "metavar": "BEIR_FOLDER", "help": "BEIR folder (corpus.jsonl, queries.jsonl, qrels/; each also .gz), or a Hub "
        "dataset id in BEIR's or MTEB's layout (BeIR/scifact; --dataset-revision)."})
    split: str = field(default="train", metadata={
        "help": "Qrels split whose queries are used with --data (default: %(default)s)."})
    queries: str | None = field(default=None, metadata={
        "help": "queries.jsonl ({'_id', 'text'} per line; also .gz), with --corpus instead of --data."})
    corpus: str | None = field(default=None, metadata={
        "help": "corpus.jsonl ({'_id', 'title', 'text'} per line; also .gz), with --queries."})
    dataset_revision: str | None = dataset_revision_field()
    output: str = field(metadata={"help": "Output jsonl; an existing one with the same settings is resumed."})
    top_k: int = field(default=100, metadata={"help": "Documents per query scored (default: %(default)s)."})
    batch_size: int = field(default=32, metadata={"help": "Pairs per cross-encoder batch (default: %(default)s)."})
    include_texts: bool = field(default=False, metadata={"help": "Also write the document texts into each line."})
    device: str | None = field(default=None, metadata={
        "help": "Device for the cross-encoder, e.g. cuda:0 (default: the best available)."})
    no_progress: bool = field(default=False, metadata={"help": "Hide the progress bar."})
    pooling: str | None = field(default=None, metadata={
        "choices": list(POOLING_MODES), "help": "Pooling of a plain transformers checkpoint used as a bi-encoder "
        "teacher."})
    allow_missing_weights: bool = field(default=False, metadata={
        "help": "Score with a teacher whose weights miss (or add) tensors of its model; refused by default."})
    trust_remote_code: bool = trust_remote_code_field()

    def __post_init__(self):
        if self.data is not None and (self.queries is not None or self.corpus is not None):
            raise ValueError("give either --data or --queries with --corpus, not both")
        if self.data is None and (self.queries is None or self.corpus is None):
            raise ValueError("give --data BEIR_FOLDER, or both --queries and --corpus")
        if self.dataset_revision is not None and self.data is None:
            raise ValueError("--dataset-revision is the revision of --data, a Hub dataset; --queries and --corpus are "
                             "local files")
        check_fields(self, positive_integer_problem, ("top_k", "batch_size"), optional=False)


__all__ = ["TeacherScoringSettings"]
