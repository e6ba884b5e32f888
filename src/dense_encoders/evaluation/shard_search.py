"""Search over embedding shards in bounded memory: exact (streamed, a running top-k per query) or through a
FAISS index built shard by shard (``index_factory`` strings such as ``Flat``, ``HNSW32``, ``IVF1024,PQ64``).

Only the queries, one shard and the top-k lists are in memory at a time; the ids of the results are looked
up in one pass over the shards' ids files at the end. Both searches return a run ``{query id: {doc id:
score}}`` that :func:`dense_encoders.data.runs.write_trec_run` writes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..data.embedding_shards import EmbeddingShards, differing_settings, file_sha256, read_record
from ..data.files import write_json
from ..vectors import SIMILARITIES
from .search import NORMALIZE_EPS, RunningTopK, score_block, scores_are_bounded, validate_k

logger = logging.getLogger(__name__)

# what queries and documents must share to be searched together
COMPATIBLE = ("fingerprint", "pooling_modules", "normalize")


def check_compatible(queries: EmbeddingShards, documents: EmbeddingShards) -> None:
    """Query and document shards from the same model (weights and pipeline); else a one-line error."""
    if queries.side != "query":
        raise ValueError(f"{queries.folder} holds {queries.side} embeddings: encode the queries with "
                         "`dense-encoders encode MODEL QUERIES --queries`")
    if documents.side != "document":
        raise ValueError(f"{documents.folder} holds {documents.side} embeddings, not a corpus")
    differences = differing_settings({key: queries.settings.get(key) for key in COMPATIBLE},
                                     {key: documents.settings.get(key) for key in COMPATIBLE})
    if differences:
        raise ValueError(f"{queries.folder} and {documents.folder} were encoded differently ({'; '.join(differences)})"
                         ": encode both with the same model and --normalize setting")


def load_query_embeddings(folder: str | Path) -> tuple[list[str], np.ndarray, EmbeddingShards]:
    """All query ids and embeddings of a query-shards folder (queries fit in memory)."""
    shards = EmbeddingShards.open(folder)
    ids, parts = [], []
    for _, embeddings, shard_ids in shards.shards():
        ids += shard_ids
        parts.append(embeddings)
    return ids, np.concatenate(parts), shards


def _similarity(documents: EmbeddingShards, similarity: str | None) -> str:
    similarity = similarity or documents.settings.get("similarity") or "cosine"
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r}: choose cosine or dot")
    return similarity


def search_shards(
    query_embeddings: np.ndarray,
    documents: EmbeddingShards,
    k: int,
    *,
    similarity: str | None = None,
    query_chunk_size: int = 1024,
    document_chunk_size: int = 16384,
    device: str | torch.device = "cpu",
    show_progress_bar: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k over the shards, one shard at a time: ``(scores, global row indices)`` ``[Q, min(k, D)]``,
    the same as :func:`dense_encoders.evaluation.search.exact_search` over the concatenated embeddings."""
    k = min(validate_k(k), documents.count)
    similarity = _similarity(documents, similarity)
    queries = torch.as_tensor(np.asarray(query_embeddings, dtype=np.float32), device=device)
    if queries.dim() != 2 or queries.shape[1] != documents.dimension:
        raise ValueError(f"queries of shape {tuple(queries.shape)} for documents of dimension {documents.dimension}")
    if similarity == "cosine":
        queries = F.normalize(queries, p=2.0, dim=1, eps=NORMALIZE_EPS)
    best = RunningTopK(k)
    bar = tqdm(total=documents.count, unit="doc", desc="Exact search", disable=not show_progress_bar)
    for offset, embeddings, _ in documents.shards():
        shard = torch.as_tensor(embeddings, device=device)
        if similarity == "cosine":
            shard = F.normalize(shard, p=2.0, dim=1, eps=NORMALIZE_EPS)
        for start in range(0, len(shard), document_chunk_size):
            block = shard[start : start + document_chunk_size]
            for q_start in range(0, len(queries), query_chunk_size):
                query_block = queries[q_start : q_start + query_chunk_size]
                best.add(q_start, score_block(query_block, block), offset + start,
                         bounded=scores_are_bounded(query_block, block))
        bar.update(len(shard))
    bar.close()
    return best.result()


def run_from_topk(query_ids: list[str], documents: EmbeddingShards, scores, indices) -> dict[str, dict[str, float]]:
    """``{query id: {doc id: score}}`` from global row indices (``-1``, FAISS's padding, skipped)."""
    return {query_id: dict(zip(doc_ids, row_scores))
            for query_id, doc_ids, row_scores in ranked_from_topk(query_ids, documents, scores, indices)}


def ranked_from_topk(query_ids: list[str], documents: EmbeddingShards, scores, indices
                     ) -> list[tuple[str, list[str], list[float]]]:
    """``(query id, doc ids, scores)`` per query from global row indices (``-1``, FAISS's padding, skipped), in the
    order of every run we write (descending score, ties by doc id), for
    :func:`dense_encoders.data.runs.write_ranked_trec_run`. A top-k comes best first with ties by row; only rows
    where two neighbours tie are sorted again."""
    scores, indices = np.asarray(scores), np.asarray(indices)
    found = indices >= 0
    positions = np.unique(indices[found])
    lookup = documents.ids_at(positions)
    ids = np.empty(len(positions), dtype=object)
    ids[:] = [lookup[int(position)] for position in positions]
    # each row's ids through its place among the positions found
    row_ids = np.full(indices.shape, None, dtype=object)
    row_ids[found] = ids[np.searchsorted(positions, indices[found])]
    tied = (scores[:, 1:] == scores[:, :-1]).any(axis=1) if scores.shape[1] > 1 else np.zeros(len(scores), bool)
    ranked = []
    for query_id, row_scores, row_doc_ids, row_found, row_tied in zip(query_ids, scores, row_ids, found, tied):
        pairs = list(zip(row_doc_ids[row_found].tolist(), row_scores[row_found].tolist()))
        if row_tied:
            pairs.sort(key=lambda pair: (-pair[1], pair[0]))
        ranked.append((query_id, [doc_id for doc_id, _ in pairs], [score for _, score in pairs]))
    return ranked


# ------------------------------------------------------------------------------------------------ FAISS


def _faiss():
    try:
        import faiss  # optional: the faiss extra
    except ImportError:
        raise ImportError("FAISS indexes need faiss: pip install 'dense-encoders[faiss]' (or faiss-gpu), or search "
                          "the shards exactly") from None
    return faiss


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
    (``.faiss``) with ``output.json`` recording the shards it indexes. On a GPU build when faiss has one."""
    faiss = _faiss()
    similarity = _similarity(documents, similarity)
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
    record = {"factory": factory, "similarity": similarity, "shards": str(documents.folder.resolve()),
              "count": documents.count, "manifest_sha256": file_sha256(documents.folder / "manifest.json"),
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
    documents = EmbeddingShards.open(record["shards"])
    if file_sha256(documents.folder / "manifest.json") != record["manifest_sha256"]:
        raise ValueError(f"{path} was built from other shards than {documents.folder} holds now: build it again")
    return faiss.read_index(str(path)), record, documents


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


__all__ = [
    "build_faiss_index",
    "check_compatible",
    "load_query_embeddings",
    "open_faiss_index",
    "ranked_from_topk",
    "run_from_topk",
    "search_faiss_index",
    "search_shards",
    "training_sample",
]
