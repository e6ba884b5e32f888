"""What the corpus-scale commands take, one field per flag: ``dense-encoders encode`` (:class:`EncodingSettings`; the
model and the texts are its positional arguments), ``index`` (:class:`IndexSettings`; the shards) and ``search``
(:class:`SearchSettings`; the corpus and the queries)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..vectors import POOLING_MODES, SIMILARITIES
from .datasets import dataset_revision_field
from .models import runtime_field, trust_remote_code_field
from .values import check_fields, positive_integer_problem

EMBEDDING_DTYPES = ("float16", "float32")


@dataclass(kw_only=True)
class EncodingSettings:
    """How ``encode`` writes a corpus's (or a query set's) embedding shards
    (:func:`dense_encoders.evaluation.corpus_encoding.encode_corpus`)."""

    output: str = field(metadata={"help": "Folder of the shards: new, or an unfinished run to continue."})
    queries: bool = field(default=False, metadata={
        "help": "Encode queries: the model's query prompt and length instead of the document ones."})
    shard_size: int = field(default=100_000, metadata={
        "help": "Texts per shard (default: %(default)s); memory holds one shard."})
    dtype: str = field(default="float16", metadata={
        "choices": list(EMBEDDING_DTYPES), "help": "Stored precision (default: %(default)s)."})
    batch_size: int = field(default=32, metadata={"help": "Texts per forward (default: %(default)s)."})
    prompt: str | None = field(default=None, metadata={
        "help": "Prefix of every text (default: the model's query / document prompt)."})
    max_length: int | None = field(default=None, metadata={
        "help": "Token limit (default: the model's for the side)."})
    pooling: str | None = field(default=None, metadata={
        "choices": list(POOLING_MODES), "help": "Pooling of a plain transformers checkpoint."})
    normalize: bool = field(default=False, metadata={"help": "L2-normalise the stored embeddings."})
    device: str | None = field(default=None, metadata={
        "help": "Device of a single process (default: sentence-transformers' choice; under torchrun cuda:LOCAL_RANK "
        "or the CPU)."})
    devices: list[str] | None = field(default=None, metadata={
        "metavar": "DEVICE",
        "help": "Several devices of one machine through sentence-transformers' multi-process pool."})
    allow_empty_documents: bool = field(default=False, metadata={
        "help": "Encode blank texts instead of refusing."})
    allow_missing_weights: bool = field(default=False, metadata={
        "help": "Encode with a checkpoint whose weights miss (or add) tensors of its model."})
    dataset_revision: str | None = dataset_revision_field()
    trust_remote_code: bool = trust_remote_code_field()
    runtime: str = runtime_field()
    no_progress: bool = field(default=False, metadata={"help": "Hide the progress bar."})

    def __post_init__(self):
        check_fields(self, positive_integer_problem, ("shard_size", "batch_size", "max_length"))
        if self.device and self.devices:
            raise ValueError("give either --device or --devices, not both")


@dataclass(kw_only=True)
class IndexSettings:
    """The FAISS index ``index`` builds from embedding shards (:func:`dense_encoders.evaluation.shard_search.
    build_faiss_index`)."""

    faiss: str = field(metadata={
        "metavar": "FACTORY", "help": "faiss.index_factory string: Flat, HNSW32, IVF{n},PQ{m}, ..."})
    output: str | None = field(default=None, metadata={"help": "Index file (default: SHARDS/index-<factory>.faiss)."})
    train_size: int = field(default=100_000, metadata={
        "help": "Vectors sampled for training IVF / PQ (default: %(default)s)."})
    seed: int = field(default=0, metadata={"help": "Seed of the training sample (default: %(default)s)."})
    similarity: str | None = field(default=None, metadata={
        "choices": list(SIMILARITIES), "help": "Default: what the model declares."})
    cpu: bool = field(default=False, metadata={"help": "Build on the CPU even when faiss sees GPUs."})

    def __post_init__(self):
        check_fields(self, positive_integer_problem, ("train_size",))


@dataclass(kw_only=True)
class SearchSettings:
    """How ``search`` ranks a corpus's shards or FAISS index for queries, and where the TREC run goes."""

    output: str = field(metadata={"help": "TREC run file to write."})
    k: int = field(default=1000, metadata={"help": "Documents per query (default: %(default)s)."})
    similarity: str | None = field(default=None, metadata={
        "choices": list(SIMILARITIES), "help": "Default: what the model declares."})
    nprobe: int | None = field(default=None, metadata={"help": "IVF cells visited per query."})
    ef_search: int | None = field(default=None, metadata={"help": "HNSW search breadth (default: 2 x --k)."})
    batch_size: int = field(default=32, metadata={
        "help": "Batch size when the queries are encoded here (default: %(default)s)."})
    device: str | None = field(default=None, metadata={
        "help": "Device for encoding queries and for exact search (default: cpu)."})
    tag: str = field(default="dense-encoders", metadata={"help": "Run tag (default: %(default)s)."})
    trust_remote_code: bool = trust_remote_code_field()
    runtime: str = runtime_field()
    no_progress: bool = field(default=False, metadata={"help": "Hide the progress bars."})

    def __post_init__(self):
        check_fields(self, positive_integer_problem, ("k", "nprobe", "ef_search", "batch_size"))


__all__ = ["EMBEDDING_DTYPES", "EncodingSettings", "IndexSettings", "SearchSettings"]
