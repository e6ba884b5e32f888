"""What ``dense-encoders layerwise`` (:func:`dense_encoders.evaluation.layerwise.layerwise_analysis`) takes:
:class:`LayerwiseSettings`, one field per flag."""

from __future__ import annotations

from dataclasses import dataclass, field

from .datasets import dataset_revision_field, pair_scale_field, pair_threshold_field, whole_scale
from .models import trust_remote_code_field
from .values import check_fields, pair_scale_problem, pair_threshold_problem, positive_integer_problem

COPIES = ("both", "first")


@dataclass(kw_only=True)
class LayerwiseSettings:
    """Which cross-encoder and dual encoder are compared layer by layer on which data, and how."""

    cross_encoder: str = field(metadata={"help": "Sequence-classification cross-encoder (folder or Hub id)."})
    dual_encoder: str = field(metadata={"help": "Dual encoder (folder or Hub id)."})
    data: list[str] = field(metadata={
        "help": "BEIR folder(s), pairs files, graded pairs files (e.g. STSB), or Hub dataset ids (BeIR/scifact; "
        "--dataset-revision applies to each of those)."})
    split: str = field(default="test", metadata={
        "help": "Qrels split of each BEIR folder, or the rows of a graded pairs tsv with that split."})
    pair_threshold: float | None = pair_threshold_field()
    pair_scale: float | None = pair_scale_field()
    layers: list[int] | None = field(default=None, metadata={"help": "Layers (0 = embeddings; default: all)."})
    copies: str = field(default="both", metadata={
        "choices": COPIES, "help": "Pool both copies of the (text, text) pair (default) or the first only."})
    batch_size: int = field(default=32, metadata={"help": "Texts (or pairs) per forward."})
    max_length: int | None = field(default=None, metadata={
        "help": "Token limit of a pair / a text (default: the tokenizer's)."})
    output_dir: str = field(default="layerwise", metadata={
        "help": "Where the CSV, JSON and PNG go: a new or empty folder (default: %(default)s)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Delete the contents of a non-empty --output-dir first (refused without it)."})
    no_progress: bool = field(default=False, metadata={"help": "Hide the progress bars."})
    dataset_revision: str | None = dataset_revision_field()
    trust_remote_code: bool = trust_remote_code_field()

    def __post_init__(self):
        if self.copies not in COPIES:
            raise ValueError(f"argument --copies: invalid choice: {self.copies!r} (choose from {', '.join(COPIES)})")
        check_fields(self, positive_integer_problem, ("batch_size", "max_length"))
        check_fields(self, pair_threshold_problem, ("pair_threshold",))
        check_fields(self, pair_scale_problem, ("pair_scale",))
        self.pair_scale = whole_scale(self.pair_scale)


__all__ = ["COPIES", "LayerwiseSettings"]
