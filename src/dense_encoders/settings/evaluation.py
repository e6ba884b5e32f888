"""What ``dense-encoders evaluate`` takes: :class:`EvaluationArguments` (one field per flag; the model and the data
are its positional arguments), and the measures it computes (:data:`DEFAULT_MEASURES`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..vectors import POOLING_MODES, SEARCH_BACKEND_NAMES, SIMILARITIES
from .datasets import dataset_revision_field, pair_scale_field, pair_threshold_field, whole_scale
from .models import runtime_field, trust_remote_code_field
from .values import check_fields, pair_scale_problem, pair_threshold_problem, positive_integer_problem

#: Our result names -> ir-measures measure strings.  ``RR``, ``R`` and ``Success`` use
#: ir-measures' default ``rel=1`` (qrels grade >= 1 is relevant); ``nDCG`` uses the raw
#: qrels grade as gain (trec_eval convention, not ``2**grade - 1``) with log2 discounts.
#: ``hits@10`` (``Success@10``) is sentence-transformers' ``accuracy@10``: 1 if at least one
#: relevant document is in the top 10, else 0.
DEFAULT_MEASURES: dict[str, str] = {
    "ndcg@10": "nDCG@10",
    "mrr@10": "RR@10",
    "recall@100": "R@100",
    "recall@1000": "R@1000",
    "hits@10": "Success@10",
}

# fields of EvaluationArguments that must be integers >= 1 when given
POSITIVE_FIELDS = ("query_max_length", "document_max_length", "batch_size", "k", "rerank_top_k")
# fields of EvaluationArguments that configure the RetrievalEncoder (besides no_progress)
ENCODER_FIELDS = ("pooling", "device", "batch_size", "query_prompt", "document_prompt", "query_max_length",
                  "document_max_length", "cache_dir", "allow_missing_weights", "trust_remote_code", "runtime")


@dataclass
class EvaluationArguments:
    """The settings of one retrieval evaluation: each field is a flag of ``dense-encoders evaluate`` (whose
    positional arguments are the model and the data)."""

    split: str = field(default="test", metadata={
        "help": "qrels split of a BEIR folder or a Hub dataset, or the rows of a graded pairs tsv with a split "
        "column (default: %(default)s)."})
    dataset_revision: str | None = dataset_revision_field()
    pair_threshold: float | None = pair_threshold_field()
    pair_scale: float | None = pair_scale_field()
    pooling: str | None = field(default=None, metadata={
        "choices": list(POOLING_MODES), "help": "Pooling of a plain transformers checkpoint."})
    similarity: str | None = field(default=None, metadata={
        "choices": list(SIMILARITIES), "help": "Default: what the model declares."})
    query_prompt: str | None = field(default=None, metadata={
        "help": "Prefix of every query (default: the model's 'query' prompt)."})
    document_prompt: str | None = field(default=None, metadata={
        "help": "Prefix of every document (default: the model's 'document' prompt)."})
    query_max_length: int | None = field(default=None, metadata={
        "help": "Token limit of queries (default: the model's)."})
    document_max_length: int | None = field(default=None, metadata={
        "help": "Token limit of documents (default: the model's)."})
    batch_size: int = field(default=32, metadata={"help": "Encoding batch size (default: %(default)s)."})
    k: int = field(default=1000, metadata={"help": "Documents retrieved per query (default: %(default)s)."})
    backend: str = field(default="exact", metadata={
        "choices": list(SEARCH_BACKEND_NAMES), "help": "Search (default: %(default)s)."})
    cache_dir: str | None = field(default=None, metadata={
        "help": "Cache embeddings here (safetensors), keyed by model, settings and texts."})
    corpus_embeddings: str | None = field(default=None, metadata={
        "metavar": "DIR",
        "help": "Embedding shards of this corpus (`dense-encoders encode`), searched shard by shard instead of "
        "encoding the documents; refused when model, prompt, length or ids differ."})
    rerank: str | None = field(default=None, metadata={
        "metavar": "CROSS_ENCODER", "help": "Re-score the top of the run with this cross-encoder."})
    rerank_top_k: int = field(default=100, metadata={
        "help": "Documents re-scored per query (default: %(default)s)."})
    device: str | None = field(default=None, metadata={
        "help": "cpu, cuda, cuda:1, ... (default: sentence-transformers' choice)."})
    output: str | None = field(default=None, metadata={"help": "Write the results JSON here."})
    run_output: str | None = field(default=None, metadata={"help": "Write the first-stage run here (TREC format)."})
    no_progress: bool = field(default=False, metadata={"help": "No progress bars."})
    relevance_level: int = field(default=1, metadata={
        "metavar": "N",
        "help": "Grade from which RR, Recall and Hits count a document as relevant (TREC DL: 2); nDCG stays "
        "graded; evaluated queries have a document at or above it (default: %(default)s)."})
    allow_empty_documents: bool = field(default=False, metadata={
        "help": "Keep corpus documents without title or text (with a warning); refused by default."})
    allow_missing_weights: bool = field(default=False, metadata={
        "help": "Evaluate a checkpoint whose weights miss (or add) tensors of its model; refused by default."})
    trust_remote_code: bool = trust_remote_code_field()
    runtime: str = runtime_field()

    def __post_init__(self):
        from ..data.retrieval import check_relevance_level  # reads nothing, but imports data/: not for --help

        check_relevance_level(self.relevance_level, "--relevance-level ")
        check_fields(self, positive_integer_problem, POSITIVE_FIELDS)
        check_fields(self, pair_threshold_problem, ("pair_threshold",))
        check_fields(self, pair_scale_problem, ("pair_scale",))
        self.pair_scale = whole_scale(self.pair_scale)

    def encoder_options(self) -> dict:
        """The keyword arguments of :class:`RetrievalEncoder` these settings give."""
        return {**{name: getattr(self, name) for name in ENCODER_FIELDS}, "show_progress_bar": not self.no_progress}


__all__ = ["DEFAULT_MEASURES", "ENCODER_FIELDS", "POSITIVE_FIELDS", "EvaluationArguments"]
