"""The ``faiss`` backend: `FAISS <https://github.com/facebookresearch/faiss>`_ (the ``faiss`` extra).

In memory, :class:`FaissSearch` searches an exact inner-product index (``IndexFlatIP``) on the CPU. Over
embedding shards, FAISS searches an index built once, shard by shard (:func:`build_faiss_index`, any
``index_factory`` string such as ``Flat``, ``HNSW32``, ``IVF1024,PQ64``), and stored next to a record of the
shards it indexes (:func:`open_faiss_index`, :func:`search_faiss_index`): ``dense-encoders index`` and
``dense-encoders search``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...data.embedding_shards import EmbeddingShards, file_sha256, read_record
from ...data.files import write_json
from .base import SearchBackend, shards_similarity
from .core import SearchResult, empty_result, prepare, stable_sort_rows, validate_k

logger = logging.getLogger(__name__)


def _faiss(missing: str = "FAISS indexes need faiss: pip install 'dense-encoders[faiss]' (or faiss-gpu), or search "
                          "the shards exactly"):
    """The ``faiss`` module; an ImportError saying ``missing`` without it."""
    try:
        import faiss  # optional: the faiss extra
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(missing) from error
    return faiss


class FaissSearch(SearchBackend):
    """Top-k search with a faiss ``IndexFlatIP`` (exact inner product, CPU), results on the CPU. Rows are
    re-sorted by (-score, index) so equal scores list the lower index first; which of several documents tied at
    the k-th place is kept is faiss's choice."""

    name = "faiss"
    label = "FAISS IndexFlatIP"
    shards_refusal = ("corpus embeddings are searched exactly, shard by shard; for a FAISS index use "
                      "`dense-encoders index` and `dense-encoders search`")

    def search(self, queries: Any, documents: Any, k: Any, *, similarity: str = "cosine"
               ) -> SearchResult:
        faiss = _faiss("faiss_search needs faiss; install it with: pip install 'dense-encoders[faiss]' "
                       "(or use backend='exact')")
        q, d, k = prepare(queries, documents, k, similarity)
        if q.shape[0] == 0:
            return empty_result(torch.device("cpu"))
        q_np = np.array(q.cpu().numpy(), dtype=np.float32, order="C", copy=True)
        d_np = np.array(d.cpu().numpy(), dtype=np.float32, order="C", copy=True)
        if similarity == "cosine":
            faiss.normalize_L2(q_np)
            faiss.normalize_L2(d_np)
        index = faiss.IndexFlatIP(d_np.shape[1])
        index.add(d_np)
        scores_np, indices_np = index.search(q_np, k)
        scores = torch.from_numpy(np.ascontiguousarray(scores_np, dtype=np.float32))
        indices = torch.from_numpy(np.ascontiguousarray(indices_np, dtype=np.int64))
        return stable_sort_rows(scores, indices)

    def open_index(self, path: str | Path) -> tuple[object, dict, EmbeddingShards]:
        """A FAISS index of :func:`build_faiss_index` (:func:`open_faiss_index`)."""
        return open_faiss_index(path)

    def search_index(self, index, record: dict, queries: np.ndarray, k: int, *, nprobe: int | None = None,
                     ef_search: int | None = None, use_gpu: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:func:`search_faiss_index`: ``nprobe`` for IVF indexes, ``ef_search`` for HNSW ones."""
        return search_faiss_index(index, record, queries, k, nprobe=nprobe, ef_search=ef_search, use_gpu=use_gpu)


# ------------------------------------------------------------------------------------------------ stored indexes


def _gpu_count(faiss) -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _prepared(embeddings: np.ndarray, similarity: str) -> np.ndarray:
    faiss = _faiss()
    array = np.array(embeddings, dtype=np.float32, order="C", copy=True)
    if similarity == "cosine":
        faiss.normalize_L2(array)
    return array


def training_sample(documents: EmbeddingShards, size: int, seed: int = 0) -> np.ndarray:
    """``size`` rows drawn uniformly without replacement (all rows when there are fewer), shard by shard."""
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(documents.count, size=min(size, documents.count), replace=False))
    parts = []
    for offset, embeddings, _ in documents.shards():
        inside = chosen[(chosen >= offset) & (chosen < offset + len(embeddings))] - offset
        if len(inside):
            parts.append(embeddings[inside])
    return np.concatenate(parts)


def build_faiss_index(
    documents: EmbeddingShards,
    factory: str,
    output: str | Path,
    *,
    similarity: str | None = None,
    train_size: int = 100_000,
    seed: int = 0,
    use_gpu: bool | None = None,
) -> Path:
    """A FAISS index of the shards (``faiss.index_factory(dim, factory, inner product)``), trained on a sample
    of ``train_size`` rows when the index type needs training, filled shard by shard, written to ``output``
    (``.faiss``) with ``output.json`` recording the shards it indexes and the backend that searches it
    (``backend``: ``faiss``, which ``dense-encoders search`` reads). On a GPU build when faiss has one."""
    faiss = _faiss()
    similarity = shards_similarity(documents, similarity)
    try:
        index = faiss.index_factory(documents.dimension, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else "not understood"
        raise ValueError(f"--faiss {factory!r} is not a FAISS index_factory string ({reason}); e.g. Flat, HNSW32, "
                         "IVF1024,PQ64") from None
    gpus = _gpu_count(faiss) if use_gpu is not False else 0
    work = faiss.index_cpu_to_all_gpus(index) if gpus else index
    if not work.is_trained:
        sample = _prepared(training_sample(documents, train_size, seed), similarity)
        logger.info("training %s on %d of %d vectors", factory, len(sample), documents.count)
        work.train(sample)
    for _, embeddings, _ in documents.shards():
        work.add(_prepared(embeddings, similarity))
    index = faiss.index_gpu_to_cpu(work) if gpus else work
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(output))
    record = {"backend": FaissSearch.name, "factory": factory, "similarity": similarity,
              "shards": str(documents.folder.resolve()), "count": documents.count,
              "manifest_sha256": file_sha256(documents.folder / "manifest.json"),
              "train_size": min(train_size, documents.count), "seed": seed}
    write_json(output.with_suffix(".json"), record, sort_keys=False)
    return output


def open_faiss_index(path: str | Path) -> tuple[object, dict, EmbeddingShards]:
    """``(index, its record, the shards it indexes)``; a record that no longer matches its shards is refused."""
    faiss = _faiss()
    path = Path(path)
    record = read_record(path.with_suffix(".json"))
    if not path.is_file() or record is None:
        raise FileNotFoundError(f"{path} (with {path.with_suffix('.json').name}) does not exist: build it with "
                                "`dense-encoders index SHARDS --faiss ...`")
    _check_record(record, path.with_suffix(".json"))
    documents = EmbeddingShards.open(record["shards"])
    if file_sha256(documents.folder / "manifest.json") != record["manifest_sha256"]:
        raise ValueError(f"{path} was built from other shards than {documents.folder} holds now: build it again")
    return faiss.read_index(str(path)), record, documents


# what an index record holds, field by field (build_faiss_index writes it): its type, and what a value must be
_RECORD_FIELDS = {"factory": (str, "an index_factory string"), "similarity": (str, "cosine or dot"),
                  "shards": (str, "the path of the shards folder"), "count": (int, "a number of vectors"),
                  "manifest_sha256": (str, "a SHA-256 in hex")}


def _check_record(record: dict, path: Path) -> None:
    """A one-line ``ValueError`` naming the first field of an index record that is missing or of another type than
    ``build_faiss_index`` writes (a record edited or damaged by hand)."""
    for name, (kind, meaning) in _RECORD_FIELDS.items():
        value = record.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise ValueError(f"{path}: its field {name!r} is {value!r}, not {meaning}: build the index again with "
                             "`dense-encoders index SHARDS --faiss ...`")


def search_faiss_index(index, record: dict, query_embeddings: np.ndarray, k: int, *, nprobe: int | None = None,
                       ef_search: int | None = None, use_gpu: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of an index from :func:`build_faiss_index`: ``(scores, global row indices)``, -1 where missing."""
    faiss = _faiss()
    k = min(validate_k(k), record["count"])
    if nprobe is not None:
        if not _has_ivf(faiss, index):
            raise ValueError(f"--nprobe applies to IVF indexes, not {record['factory']}")
        faiss.extract_index_ivf(index).nprobe = nprobe
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = ef_search or max(index.hnsw.efSearch, 2 * k)  # breadth below k loses results
    elif ef_search is not None:
        raise ValueError(f"--ef-search applies to HNSW indexes, not {record['factory']}")
    gpus = _gpu_count(faiss) if use_gpu is not False else 0
    work = faiss.index_cpu_to_all_gpus(index) if gpus else index
    scores, indices = work.search(_prepared(query_embeddings, record["similarity"]), k)
    return scores, indices


def _has_ivf(faiss, index) -> bool:
    try:
        faiss.extract_index_ivf(index)
    except RuntimeError:
        return False
    return True


__all__ = ["FaissSearch", "build_faiss_index", "open_faiss_index", "search_faiss_index", "training_sample"]
