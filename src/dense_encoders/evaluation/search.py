"""Top-k retrieval over dense embeddings: the public entry points, above the search backends
(:mod:`dense_encoders.evaluation.backends`: ``exact`` and ``faiss``, one file each) and the search core they share
(:mod:`dense_encoders.evaluation.backends.core`: the running top-k, the scored blocks, the prepared inputs).

Every backend returns ``(scores, indices)`` of shape ``[Q, min(k, D)]`` (float32 / int64), best
first, with a deterministic tie-break: among equal scores the lower document index comes first.

:func:`exact_search` never materialises the full ``Q x D`` score matrix; it scores one
``query_chunk_size x document_chunk_size`` block at a time and keeps a running top-k per query.
:func:`topk_to_run` turns the result into a run dict ``{query_id: {doc_id: score}}``.

The core's public names (:class:`RunningTopK`, :func:`score_block`, :func:`scores_are_bounded`, ...) are
re-exported here: importing them from this module keeps working.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .backends import get_backend
from .backends.core import (
    NORMALIZE_EPS,
    SEED_STRIDE,
    ArrayLike,
    RunningTopK,
    SearchResult,
    numpy_product,
    score_block,
    score_threads,
    scores_are_bounded,
    validate_k,
)
from .backends.exact import ExactSearch
from .backends.faiss import FaissSearch

__all__ = ["NORMALIZE_EPS", "SEED_STRIDE", "ArrayLike", "RunningTopK", "SearchResult", "exact_search", "faiss_search",
           "numpy_product", "score_block", "score_threads", "scores_are_bounded", "search", "topk_to_run",
           "validate_k"]


def exact_search(
    queries: ArrayLike,
    documents: ArrayLike,
    k: int,
    *,
    similarity: str = "cosine",
    query_chunk_size: int = 1024,
    document_chunk_size: int = 16384,
    show_progress_bar: bool = False,
) -> SearchResult:
    """Exact top-k search in torch, block by block, without building the full score matrix: the ``exact``
    backend (:class:`~dense_encoders.evaluation.backends.exact.ExactSearch`).

    Args:
        queries: ``[Q, dim]`` tensor or array.
        documents: ``[D, dim]`` tensor or array.
        k: results per query; clamped to ``D``.
        similarity: ``"cosine"`` (L2-normalised dot product) or ``"dot"``.
        query_chunk_size / document_chunk_size: block size; peak score memory is their product.
        show_progress_bar: show a tqdm bar over query chunks.

    Returns:
        ``(scores, indices)`` of shape ``[Q, min(k, D)]`` (float32, int64), best first; among
        equal scores the lower document index comes first. Empty queries give ``[0, 0]`` tensors.
        Computation (and the result) lives on the queries' device.
    """
    backend = ExactSearch(query_chunk_size=query_chunk_size, document_chunk_size=document_chunk_size,
                          show_progress_bar=show_progress_bar)
    return backend.search(queries, documents, k, similarity=similarity)


def faiss_search(
    queries: ArrayLike,
    documents: ArrayLike,
    k: int,
    *,
    similarity: str = "cosine",
) -> SearchResult:
    """Top-k search with a faiss ``IndexFlatIP`` (exact inner product, CPU): the ``faiss`` backend
    (:class:`~dense_encoders.evaluation.backends.faiss.FaissSearch`).

    Same arguments and return value as :func:`exact_search` (results on CPU). Rows are re-sorted
    by (-score, index) so equal scores list the lower index first; which of several documents
    tied at the k-th place is kept is faiss's choice.
    """
    return FaissSearch().search(queries, documents, k, similarity=similarity)


def search(
    queries: ArrayLike,
    documents: ArrayLike,
    k: int,
    *,
    similarity: str = "cosine",
    backend: str = "exact",
    **kwargs: Any,
) -> SearchResult:
    """Top-k search with the backend registered as ``backend`` (:mod:`dense_encoders.evaluation.backends`:
    ``"exact"``, ``"faiss"``).

    Extra keyword arguments configure the chosen backend (e.g. ``query_chunk_size`` for "exact").
    """
    return get_backend(backend, **kwargs).search(queries, documents, k, similarity=similarity)


def topk_to_run(
    query_ids: list[str],
    document_ids: list[str],
    scores: ArrayLike,
    indices: ArrayLike,
) -> dict[str, dict[str, float]]:
    """Convert ``(scores, indices)`` from a search into a run ``{query_id: {doc_id: score}}``.

    Row ``i`` belongs to ``query_ids[i]``; ``indices`` point into ``document_ids``. Negative
    indices (faiss's padding ``-1``) are skipped. Scores become python floats.
    """
    scores_t = scores.detach().cpu() if isinstance(scores, torch.Tensor) else torch.as_tensor(np.asarray(scores))
    indices_t = indices.detach().cpu() if isinstance(indices, torch.Tensor) else torch.as_tensor(np.asarray(indices))
    if scores_t.dim() != 2 or indices_t.dim() != 2:
        raise ValueError(
            f"scores and indices must be 2-D [num_queries, k], got shapes {tuple(scores_t.shape)} "
            f"and {tuple(indices_t.shape)}"
        )
    if scores_t.shape != indices_t.shape:
        raise ValueError(
            f"scores and indices must have the same shape, got {tuple(scores_t.shape)} and "
            f"{tuple(indices_t.shape)}; pass both outputs of the same search call"
        )
    if len(query_ids) != scores_t.shape[0]:
        raise ValueError(
            f"got {len(query_ids)} query_ids for {scores_t.shape[0]} result rows; "
            "pass one id per query, in the order the queries were searched"
        )
    if len(set(query_ids)) != len(query_ids):
        raise ValueError("query_ids contain duplicates; each query needs a unique id")
    if len(set(document_ids)) != len(document_ids):
        raise ValueError("document_ids contain duplicates; each document needs a unique id")
    if indices_t.is_floating_point():
        raise ValueError(f"indices must be integers, got dtype {indices_t.dtype}")
    if indices_t.numel() and int(indices_t.max()) >= len(document_ids):
        raise ValueError(
            f"index {int(indices_t.max())} is out of range for {len(document_ids)} document_ids; "
            "pass the ids of the documents that were searched, in the same order"
        )

    run: dict[str, dict[str, float]] = {}
    for qid, row_scores, row_indices in zip(query_ids, scores_t.tolist(), indices_t.tolist()):
        run[qid] = {
            document_ids[idx]: float(score) for score, idx in zip(row_scores, row_indices) if idx >= 0
        }
    return run
