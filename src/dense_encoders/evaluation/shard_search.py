"""Search over embedding shards in bounded memory: exact (streamed, a running top-k per query: the ``exact``
backend, :mod:`dense_encoders.evaluation.backends.exact`) or through a FAISS index built shard by shard
(``index_factory`` strings such as ``Flat``, ``HNSW32``, ``IVF1024,PQ64``: the ``faiss`` backend,
:mod:`dense_encoders.evaluation.backends.faiss`); what both share lives here: which query and document shards
go together, and the run made of a top-k.

Only the queries, one shard and the top-k lists are in memory at a time; the ids of the results are looked
up in one pass over the shards' ids files at the end, as a :class:`~dense_encoders.data.runs.RankedRun`
(:func:`ranked_from_topk`) that :func:`dense_encoders.data.runs.write_ranked_trec_run` writes, or a run
``{query id: {doc id: score}}`` (:func:`run_from_topk`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data.embedding_shards import EmbeddingShards, differing_settings
from ..data.runs import RankedRun
from .backends.exact import ExactSearch
from .backends.faiss import build_faiss_index, open_faiss_index, search_faiss_index, training_sample

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
    the same as :func:`dense_encoders.evaluation.search.exact_search` over the concatenated embeddings (the
    ``exact`` backend's :meth:`~dense_encoders.evaluation.backends.exact.ExactSearch.search_shards`)."""
    backend = ExactSearch(query_chunk_size=query_chunk_size, document_chunk_size=document_chunk_size, device=device,
                          show_progress_bar=show_progress_bar)
    return backend.search_shards(query_embeddings, documents, k, similarity=similarity)


def run_from_topk(query_ids: list[str], documents: EmbeddingShards, scores, indices) -> dict[str, dict[str, float]]:
    """``{query id: {doc id: score}}`` from global row indices (``-1``, FAISS's padding, skipped)."""
    return ranked_from_topk(query_ids, documents, scores, indices).to_run()


def ranked_from_topk(query_ids: list[str], documents: EmbeddingShards, scores, indices) -> RankedRun:
    """The run of a top-k of global row indices (``-1``, FAISS's padding, skipped) as a
    :class:`~dense_encoders.data.runs.RankedRun`, in the order of every run we write (descending score, ties by doc
    id), for :func:`dense_encoders.data.runs.write_ranked_trec_run`. The ids are looked up once per document found
    (:meth:`~dense_encoders.data.embedding_shards.EmbeddingShards.ids_at`), not once per result."""
    scores, indices = np.asarray(scores), np.asarray(indices)
    found = indices >= 0
    positions, places = np.unique(indices[found], return_inverse=True)
    rows = np.full(indices.shape, -1, dtype=np.int64)
    rows[found] = places.reshape(-1)
    return RankedRun.from_rows(query_ids, documents.ids_at(positions), rows, scores)


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
