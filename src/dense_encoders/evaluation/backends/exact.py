"""The ``exact`` backend: every query scored against every document, block by block.

Never more than two ``query_chunk_size x document_chunk_size`` blocks of scores exist at a time (on the CPU, one
is selected while the next is multiplied: :class:`~dense_encoders.evaluation.backends.core.BlockSelection`); a
:class:`~dense_encoders.evaluation.backends.core.RunningTopK` per query range keeps the best ``k`` so far. Over
embedding shards, one shard is in memory at a time, and the result is that of the concatenated matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ...data.embedding_shards import EmbeddingShards
from .base import SearchBackend, shards_similarity
from .core import (
    NORMALIZE_EPS,
    BlockSelection,
    SearchResult,
    empty_result,
    largest_row_norm,
    norms_bound_scores,
    prepare,
    score_block,
    score_threads,
    validate_k,
)


class ExactSearch(SearchBackend):
    """Exact top-k search without building the full score matrix, block by block through
    :func:`~dense_encoders.evaluation.backends.core.score_block`.

    Args:
        query_chunk_size / document_chunk_size: block size; peak score memory is twice their product on the CPU
            (:class:`~dense_encoders.evaluation.backends.core.BlockSelection`), their product on another device.
        device: where shards are searched (:meth:`search_shards`); a matrix in memory is searched on the
            queries' device.
        show_progress_bar: a tqdm bar over query chunks (in memory) or documents (shards).
    """

    name = "exact"
    label = "exact"

    def __init__(self, *, query_chunk_size: int = 1024, document_chunk_size: int = 16384,
                 device: str | torch.device = "cpu", show_progress_bar: bool = False):
        self.query_chunk_size = query_chunk_size
        self.document_chunk_size = document_chunk_size
        self.device = device
        self.show_progress_bar = show_progress_bar

    def _check_block_sizes(self) -> None:
        for name in ("query_chunk_size", "document_chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def search(self, queries: Any, documents: Any, k: Any, *, similarity: str = "cosine"
               ) -> SearchResult:
        """Query range by query range, each over all document blocks in order. Empty queries give ``[0, 0]``
        tensors; computation (and the result) lives on the queries' device."""
        q, d, k = prepare(queries, documents, k, similarity)
        self._check_block_sizes()
        if q.shape[0] == 0:
            return empty_result(q.device)
        if similarity == "cosine":
            q = F.normalize(q, p=2.0, dim=1, eps=NORMALIZE_EPS)
            d = F.normalize(d, p=2.0, dim=1, eps=NORMALIZE_EPS)

        query_chunk_size, document_chunk_size = self.query_chunk_size, self.document_chunk_size
        num_queries, num_documents = q.shape[0], d.shape[0]
        query_starts = range(0, num_queries, query_chunk_size)
        if self.show_progress_bar:
            query_starts = tqdm(query_starts, desc="Exact search", unit="chunk")

        # the norms that bound each block's scores (scores_are_bounded), each computed once
        d_norms = [largest_row_norm(d[d_start : d_start + document_chunk_size])
                   for d_start in range(0, num_documents, document_chunk_size)]
        with score_threads(), BlockSelection(k, min(query_chunk_size, num_queries),
                                             min(document_chunk_size, num_documents), q.device) as best:
            for q_start in query_starts:
                q_block = q[q_start : q_start + query_chunk_size]
                q_norm = largest_row_norm(q_block)
                for d_start, d_norm in zip(range(0, num_documents, document_chunk_size), d_norms):
                    d_block = d[d_start : d_start + document_chunk_size]
                    scores = score_block(q_block, d_block, out=best.block(len(q_block), len(d_block)))
                    best.add(q_start, scores, d_start, bounded=norms_bound_scores(q_norm, d_norm))
            return best.result()

    def search_shards(self, queries: np.ndarray, documents: EmbeddingShards, k: Any, *,
                      similarity: str | None = None) -> SearchResult:
        """Shard by shard, each block of a shard against every query range; float16 shards are read as the
        float32 rows they store. One shard is in memory at a time (the previous one is let go before the next is
        read), and for cosine similarity one normalized block of it."""
        k = min(validate_k(k), documents.count)
        similarity = shards_similarity(documents, similarity)
        self._check_block_sizes()
        device, query_chunk_size, document_chunk_size = self.device, self.query_chunk_size, self.document_chunk_size
        queries = torch.as_tensor(np.asarray(queries, dtype=np.float32), device=device)
        if queries.dim() != 2 or queries.shape[1] != documents.dimension:
            raise ValueError(f"queries of shape {tuple(queries.shape)} for documents of dimension "
                             f"{documents.dimension}")
        if similarity == "cosine":
            queries = F.normalize(queries, p=2.0, dim=1, eps=NORMALIZE_EPS)
        # the norms that bound each block's scores (scores_are_bounded), each computed once
        query_starts = range(0, len(queries), query_chunk_size)
        query_norms = [largest_row_norm(queries[q_start : q_start + query_chunk_size]) for q_start in query_starts]
        bar = tqdm(total=documents.count, unit="doc", desc="Exact search", disable=not self.show_progress_bar)
        with score_threads(), BlockSelection(k, min(query_chunk_size, len(queries)),
                                             min(document_chunk_size, documents.count), queries.device) as best:
            for offset, embeddings, ids in documents.shards():
                shard = torch.as_tensor(embeddings, device=device)
                for start in range(0, len(shard), document_chunk_size):
                    block = shard[start : start + document_chunk_size]
                    if similarity == "cosine":  # row by row: the bits of the whole shard's, a block's memory
                        block = F.normalize(block, p=2.0, dim=1, eps=NORMALIZE_EPS)
                    block_norm = largest_row_norm(block)
                    for q_start, query_norm in zip(query_starts, query_norms):
                        query_block = queries[q_start : q_start + query_chunk_size]
                        scores = score_block(query_block, block, out=best.block(len(query_block), len(block)))
                        best.add(q_start, scores, offset + start, bounded=norms_bound_scores(query_norm, block_norm))
                bar.update(len(shard))
                del embeddings, ids, shard  # one shard in memory: the generator reads the next one
                block = None
            result = best.result()
        bar.close()
        return result


__all__ = ["ExactSearch"]
