"""The search core every backend builds on (:mod:`dense_encoders.evaluation.backends`): the queries and documents
checked and prepared, the scored blocks (:func:`score_block`, :func:`score_threads`, :class:`ScoreScratch`), the
running top-k selection (:class:`RunningTopK`), the result's order (:func:`stable_sort_rows`) and the empty result.

It imports no backend and nothing of :mod:`dense_encoders.evaluation.search`, the entry points above the backends
(which re-export the public names here): the backends import it, it imports none of them.

A result is ``(scores, indices)`` of shape ``[Q, min(k, D)]`` (float32 / int64, :data:`SearchResult`), best
first, with a deterministic tie-break: among equal scores the lower document index comes first.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import platform
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Union

import numpy as np
import torch

from ...vectors import SIMILARITIES

ArrayLike = Union[torch.Tensor, np.ndarray]
#: ``(scores, indices)``: ``[Q, min(k, D)]`` float32 and int64, best first
SearchResult = tuple[torch.Tensor, torch.Tensor]

NORMALIZE_EPS = 1e-12  # the eps of the L2 normalisation of cosine similarity
# past this many candidates per k in one query of one block, RunningTopK takes the block's own top-k first
CANDIDATES_PER_K = 4
# faiss's heaps are seeded from every SEED_STRIDE-th score of a query range's first block (_HeapTopK._seed)
SEED_STRIDE = 8
# scores bounded by this (Cauchy-Schwarz, with a margin of 2 for rounding) are numbers above float32's lowest value
_BOUNDED_SCORE = torch.finfo(torch.float32).max / 2


def _to_float_matrix(x: Any, name: str) -> torch.Tensor:
    """Convert a tensor / array to a float32 torch matrix, checking it is 2-D."""
    if isinstance(x, torch.Tensor):
        tensor = x.detach()
    else:
        tensor = torch.as_tensor(np.asarray(x))
    if tensor.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D matrix of shape [num_{name}, dim], got shape {tuple(tensor.shape)}; "
            f"reshape it (e.g. {name}.reshape(-1, dim)) or stack the vectors"
        )
    return tensor.to(torch.float32)


def validate_k(k: Any) -> int:
    """``k`` as an int when it is a positive integer (not a bool), else a ValueError."""
    if isinstance(k, bool):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    try:
        k = operator.index(k)
    except TypeError:
        raise ValueError(f"k must be a positive integer, got {k!r}") from None
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}; ask for at least one result per query")
    return k


def _validate_similarity(similarity: str) -> str:
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; use one of {SIMILARITIES}")
    return similarity


def prepare(queries: Any, documents: Any, k: Any, similarity: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """What every backend checks first: ``k`` a positive integer, ``similarity`` known, queries and documents 2-D
    matrices of one dimension, at least one document. Returns float32 queries, documents (on the queries' device)
    and ``k`` clamped to the documents."""
    k = validate_k(k)
    _validate_similarity(similarity)
    q = _to_float_matrix(queries, "queries")
    d = _to_float_matrix(documents, "documents")
    if q.shape[1] != d.shape[1]:
        raise ValueError(
            f"dimension mismatch: queries have dim {q.shape[1]} but documents have dim {d.shape[1]}; "
            "encode both with the same model"
        )
    if d.shape[0] == 0:
        raise ValueError("no documents to search: documents has 0 rows; pass at least one document embedding")
    return q, d.to(q.device), min(k, d.shape[0])


def empty_result(device: torch.device) -> SearchResult:
    """The result of a search of no queries: ``[0, 0]`` scores and indices on ``device``."""
    return (
        torch.empty((0, 0), dtype=torch.float32, device=device),
        torch.empty((0, 0), dtype=torch.int64, device=device),
    )


def score_block(query_block: torch.Tensor, document_block: torch.Tensor, *, out: torch.Tensor | None = None
                ) -> torch.Tensor:
    """Scores of one block: ``[q, d] @ [c, d].T -> [q, c]``, written into ``out`` when given. All scoring goes
    through here.

    ``out`` is a buffer the search reuses from block to block: a fresh block of 1,000 x 16,384 scores costs its
    64 MB of page faults (``Q[1000x384] @ D[100000x384]^T`` into a fresh matrix took 1.45x the CPU time of the
    same product into a reused one, two threads, docs/benchmarks.md). The product is the faster BLAS's
    (:func:`numpy_product`): torch's (MKL on an Intel CPU, cuBLAS on a GPU) or numpy's OpenBLAS, at the thread
    count :func:`score_threads` fixes. Its bits depend on the thread count only: a search gives the same scores
    from one run to the next at the same ``torch.get_num_threads()``."""
    if (query_block.device.type == "cpu" and query_block.dtype == document_block.dtype == torch.float32
            and numpy_product() is not None):
        scores = np.matmul(query_block.numpy(), document_block.numpy().T, out=None if out is None else out.numpy())
        return torch.from_numpy(scores) if out is None else out
    return torch.mm(query_block, document_block.T, out=out)


@functools.cache
def numpy_product():
    """threadpoolctl's ``threadpool_limits`` when numpy's BLAS multiplies the score blocks on the CPU, else None
    (torch's product). Numpy's when torch's BLAS is MKL on a CPU that is not Intel's and numpy's is OpenBLAS (as in
    numpy's wheels): MKL takes slower paths there (AMD EPYC, Zen 4: ``Q[1000x384] @ D[100000x384]^T`` in 1.28 CPU s
    against OpenBLAS's 1.0, issue 45), while on Intel's it is the faster one (a 2.5 GHz Xeon with AVX-512, blocks
    of 1,000 x 16,384 into a reused buffer: 0.94 against 1.17 CPU s at two threads, 0.90 against 1.15 at one).
    threadpoolctl (scikit-learn's dependency, which sentence-transformers brings) fixes numpy's threads; without
    it, torch's product."""
    if not torch.backends.mkl.is_available() or "GenuineIntel" in _cpu_vendor():
        return None
    try:
        from threadpoolctl import threadpool_limits

        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except (ImportError, KeyError, TypeError):
        return None
    return threadpool_limits if "openblas" in str(blas).lower() else None


def _cpu_vendor() -> str:
    """The CPU's vendor (``vendor_id`` of /proc/cpuinfo on Linux, else :func:`platform.processor`)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


@contextlib.contextmanager
def score_threads():
    """While a search runs, numpy's BLAS (when :func:`score_block` multiplies with it) at torch's thread count,
    restored afterwards: the product's last bits may depend on how its work is split between threads, and a
    search gives the same bits from one run to the next."""
    limits = numpy_product()
    if limits is None:
        yield
        return
    with limits(limits=torch.get_num_threads(), user_api="blas"):
        yield


class ScoreScratch:
    """One buffer for the score blocks of a search, handed out as each block's contiguous ``[rows, columns]``:
    :func:`score_block` writes into it instead of allocating a block per product (:class:`RunningTopK` keeps
    nothing of a block it was given; :class:`BlockSelection` alternates two)."""

    def __init__(self, rows: int, columns: int, device: torch.device):
        self._buffer = torch.empty(rows * columns, dtype=torch.float32, device=device)

    def block(self, rows: int, columns: int) -> torch.Tensor:
        return self._buffer[: rows * columns].view(rows, columns)


def stable_sort_rows(scores: torch.Tensor, indices: torch.Tensor) -> SearchResult:
    """Reorder each row by (-score, index): sort by index, then a stable descending sort by score (the order every
    backend answers in)."""
    by_index = torch.argsort(indices, dim=1, stable=True)
    scores = torch.gather(scores, 1, by_index)
    indices = torch.gather(indices, 1, by_index)
    scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
    return scores, torch.gather(indices, 1, order)


def _stable_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of each row (column positions), ordered by (-score, position).

    The k-th score of each row comes from an unsorted ``torch.topk``; every score at or above it is a candidate
    (:func:`_candidates_in_order`, in position order, then a stable sort by score), so that a tie across the k-th
    place keeps the lower positions. Rows with a NaN go :func:`_stable_topk_with_nan`.
    """
    num_cols = scores.shape[1]
    if k >= num_cols:
        return torch.sort(scores, dim=1, descending=True, stable=True)
    kth = torch.topk(scores, k, dim=1, largest=True, sorted=False).values.min(dim=1, keepdim=True).values
    # "not below the k-th score": a NaN is a candidate here, and sends the block the NaN way
    candidates = _candidates_in_order(scores, torch.logical_not(scores < kth))
    if candidates is None:
        return _stable_topk_with_nan(scores, k)
    values, positions, _ = candidates
    return values[:, :k].contiguous(), positions[:, :k].contiguous()


def _candidates_in_order(scores: torch.Tensor, chosen: torch.Tensor, *, most_allowed: int | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The ``chosen`` entries of each row of ``scores``, ordered by (-score, position): ``(values, positions,
    counts)``, rows padded with ``-inf`` (position ``-1``) to the largest count. None when a chosen score is NaN, or
    when a row has more than ``most_allowed`` of them."""
    num_rows, num_columns = scores.shape
    flat = chosen.reshape(-1).nonzero().squeeze(1)  # row-major: each row's entries in position order
    values = scores.reshape(-1).index_select(0, flat)
    rows = torch.div(flat, num_columns, rounding_mode="floor")
    counts = torch.bincount(rows, minlength=num_rows)
    most = int(counts.max()) if num_rows else 0
    if (most_allowed is not None and most > most_allowed) or bool(torch.isnan(values).any()):
        return None
    slots = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(counts, dim=0) - counts)[rows]
    padded = rows * most + slots
    padded_values = scores.new_full((num_rows * most,), float("-inf"))
    padded_values.index_copy_(0, padded, values)
    positions = torch.full((num_rows * most,), -1, dtype=torch.int64, device=scores.device)
    positions.index_copy_(0, padded, flat - rows * num_columns)
    # a stable sort keeps position order among equal scores; the padding sorts after every entry
    padded_values, order = torch.sort(padded_values.view(num_rows, most), dim=1, descending=True, stable=True)
    return padded_values, torch.gather(positions.view(num_rows, most), 1, order), counts


def _stable_topk_with_nan(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_stable_topk` for rows holding NaN scores, ranked as ``torch.topk`` and ``torch.sort`` rank them
    (above every number): ``torch.topk``, then a stable full sort of the rows where a tie straddles the k-th
    place."""
    values, positions = torch.topk(scores, k, dim=1, largest=True, sorted=True)
    values, positions = stable_sort_rows(values, positions)
    kth = values[:, -1:]
    straddling = (scores == kth).sum(dim=1) != (values == kth).sum(dim=1)
    if bool(straddling.any()):
        rows = straddling.nonzero().squeeze(1)
        sorted_values, sorted_positions = torch.sort(scores[rows], dim=1, descending=True, stable=True)
        values[rows] = sorted_values[:, :k]
        positions[rows] = sorted_positions[:, :k]
    return values, positions


def largest_row_norm(matrix: torch.Tensor) -> float:
    """The largest L2 norm among the rows of a CPU matrix, for :func:`norms_bound_scores`: NaN when a row holds a
    NaN, inf when one holds an infinity or its squared norm overflows float32 (then no bound is claimed). A
    matrix on another device answers inf unchecked, so that the search never waits for the device, and an empty
    one NaN. One pass over the matrix in numpy's ``einsum``, single-threaded (torch's ``vector_norm`` took 5-7 ms
    of two threads for a block of 16,384 x 384, ``einsum`` under 1 ms)."""
    if matrix.device.type != "cpu":
        return math.inf
    if matrix.numel() == 0:
        return math.nan
    rows = matrix.detach().numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        return math.sqrt(float(np.einsum("ij,ij->i", rows, rows).max()))


def norms_bound_scores(query_norm: float, document_norm: float) -> bool:
    """Whether every score between queries and documents whose rows' norms are at most ``query_norm`` and
    ``document_norm`` (:func:`largest_row_norm`) is a number above float32's lowest value (no NaN, no ``-inf``),
    by Cauchy-Schwarz: ``|q . d| <= ||q|| ||d||``, with a margin of 2 for the rounding of the sum. A NaN or
    infinite norm answers False."""
    return bool(query_norm * document_norm < _BOUNDED_SCORE)


def scores_are_bounded(query_block: torch.Tensor, document_block: torch.Tensor) -> bool:
    """Whether every score of ``score_block(query_block, document_block)`` is a number above float32's lowest value
    (:func:`norms_bound_scores` of the blocks' :func:`largest_row_norm`). This is what :class:`RunningTopK` needs
    to know to select a block in faiss's heaps, which select on the CPU only: blocks on another device answer False
    unchecked, so that the search never waits for the device. A search computes each norm once
    (:func:`largest_row_norm`) instead of once per pair of blocks."""
    return norms_bound_scores(largest_row_norm(query_block), largest_row_norm(document_block))


@functools.cache
def _faiss_heaps():
    """The faiss module when it is installed (the faiss extra), else None: :class:`RunningTopK` then selects in
    torch alone, with the same results."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


class _HeapTopK:
    """The best ``k`` scores of each query of a range so far, in faiss's compiled per-query heaps
    (``float_minheap_array_t``), fed block by block in increasing document order.

    A heap keeps a new score only when it beats the heap's worst, and among equal scores takes the lower id for the
    worse one. Storing a document's index ``i`` as the id ``-i - 2`` makes the higher index the worse among equal
    scores, so that the heap holds exactly the best ``k`` by (-score, index); ``-1`` stays faiss's empty slot.
    Scores must be numbers above float32's lowest value (:func:`scores_are_bounded`): a heap never takes a NaN or
    a score equal to its empty slots' value."""

    def __init__(self, faiss, num_queries: int, k: int):
        self._faiss = faiss
        self.k = k
        self.seen = 0
        self._values = np.empty((num_queries, k), dtype=np.float32)
        self._ids = np.empty((num_queries, k), dtype=np.int64)
        self._queries = np.arange(num_queries, dtype=np.int64)
        heaps = faiss.float_minheap_array_t()
        heaps.k, heaps.nh = k, num_queries
        heaps.val, heaps.ids = faiss.swig_ptr(self._values), faiss.swig_ptr(self._ids)
        heaps.heapify()
        self._heaps = heaps

    def add(self, block_scores: torch.Tensor, document_offset: int) -> None:
        faiss, block = self._faiss, np.ascontiguousarray(block_scores.numpy())
        if self.seen == 0:
            self._seed(block)
        ids = np.arange(-document_offset - 2, -document_offset - 2 - block.shape[1], -1, dtype=np.int64)
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(torch.get_num_threads())  # as many threads as the matrix product
        try:
            self._heaps.addn_query_subset_with_ids(len(self._queries), faiss.swig_ptr(self._queries), block.shape[1],
                                                   faiss.swig_ptr(block), faiss.swig_ptr(ids), 0)
        finally:
            faiss.omp_set_num_threads(threads)
        self.seen += block.shape[1]

    def _seed(self, block: np.ndarray) -> None:
        """Fill each query's empty heap with empty slots valued just below a score that at least ``k`` of the
        first block's scores reach, so that only those enter the heap: about ``k`` insertions instead of
        ``k (1 + ln(columns / k))`` into an empty heap (k = 1000, 16,384 columns: about 1,300 against 3,800, half
        of all the heap work of 100,000 documents). Each such score takes an empty slot until none is left, so the
        heap ends as it would have. The score is the ``j``-th largest of every ``SEED_STRIDE``-th column, ``j``
        three standard deviations past ``k / SEED_STRIDE``; a query whose block holds fewer than ``k`` scores at
        or above it keeps faiss's empty slots, as does a block too narrow to sample."""
        sample = block[:, ::SEED_STRIDE]
        place = math.ceil(self.k / SEED_STRIDE + 3 * math.sqrt(self.k / SEED_STRIDE))
        if block.shape[1] < self.k or sample.shape[1] < place:
            return
        threshold = np.partition(sample, sample.shape[1] - place, axis=1)[:, sample.shape[1] - place]
        reached = np.count_nonzero(block >= threshold[:, None], axis=1) >= self.k
        below = np.nextafter(threshold, np.float32(-np.inf))
        self._values[:] = np.where(reached, below, self._values[:, 0])[:, None]

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, indices)`` ``[queries, min(k, documents seen)]`` ordered by (-score, index); the heaps take no
        more blocks after this."""
        if self._heaps is not None:
            # faiss sorts each heap best first, and among equal scores the higher id (the lower index) first
            self._heaps.reorder()
            self._heaps = None
        count = min(self.k, self.seen)  # empty slots (-float32 max, index -1) sort last
        return (torch.from_numpy(self._values[:, :count].copy()),
                torch.from_numpy(-self._ids[:, :count] - 2))


class RunningTopK:
    """The best ``k`` documents of every query, updated one scored block at a time, so that among equal scores
    the lower document index stays first. The blocks of one query range must come in increasing document order
    (query ranges may interleave: the exact backend goes query range by query range, a search over stored
    shards shard by shard).

    Once a query range holds ``k`` documents, a block only matters where it beats the running ``k``-th score:
    a later document that ties with it ranks after it. Those candidates are taken with one comparison over the
    block (``score > threshold``), come out in document order per query, are ordered by a stable sort of the
    few of them, and are merged into the running list with :func:`torch.searchsorted`. This is the work of a
    reservoir (faiss's heaps) in tensor operations: past the first blocks, a block costs about one pass over its
    scores beside its matrix product. A block with more candidates than ``k`` in some query, a NaN score, or a
    range not yet full goes the general way: the block's own top-k (:func:`_stable_topk`) merged by a stable
    sort. Both give the same order: descending score, then ascending document index.

    On the CPU, with faiss installed, a query range whose blocks the caller declares ``bounded``
    (:func:`scores_are_bounded`) is selected in faiss's compiled heaps instead (:class:`_HeapTopK`), with the same
    result: a heap does in one pass what the tensor operations do in several. A range whose later block is not
    bounded moves to the tensor operations from there on."""

    def __init__(self, k: int):
        self.k = k
        self._best: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._heaps: dict[int, _HeapTopK] = {}

    def add(self, query_start: int, block_scores: torch.Tensor, document_offset: int, *, bounded: bool = False
            ) -> None:
        """Merge one block ``[queries of the range, documents]`` of scores, its first column the document at
        ``document_offset``. ``bounded``: the caller knows every score is a number above float32's lowest value
        (:func:`scores_are_bounded`), which lets faiss's heaps select. Nothing of ``block_scores`` is kept: the
        caller may write the next block into the same memory."""
        heap_ready = bounded and block_scores.device.type == "cpu" and block_scores.dtype == torch.float32
        heap = self._heaps.get(query_start)
        if heap is None and heap_ready and query_start not in self._best and (faiss := _faiss_heaps()) is not None:
            heap = self._heaps[query_start] = _HeapTopK(faiss, block_scores.shape[0], self.k)
        if heap is not None:
            if heap_ready:
                heap.add(block_scores, document_offset)
                return
            self._best[query_start] = self._heaps.pop(query_start).result()
        best = self._best.get(query_start)
        if best is not None and best[0].shape[1] == self.k:
            merged = self._merge_above_threshold(best, block_scores, document_offset)
            if merged is not None:
                self._best[query_start] = merged
                return
        scores, positions = _stable_topk(block_scores, self.k)
        indices = positions + document_offset
        if best is not None:
            best_scores, best_indices = best
            candidates, order = torch.sort(torch.cat([best_scores, scores], dim=1), dim=1, descending=True, stable=True)
            scores = candidates[:, : self.k]
            indices = torch.gather(torch.cat([best_indices, indices], dim=1), 1, order[:, : self.k])
        self._best[query_start] = (scores, indices)

    def _merge_above_threshold(self, best: tuple[torch.Tensor, torch.Tensor], block_scores: torch.Tensor,
                               document_offset: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The running ``(scores, indices)`` with the block's documents that beat each query's ``k``-th score
        merged in; ``best`` itself when none does; None when the block must go the general way (a NaN score, or
        a query with more than ``CANDIDATES_PER_K * k`` candidates in the block)."""
        best_scores, best_indices = best
        threshold = best_scores[:, -1:]
        if bool(torch.isnan(threshold).any()):
            return None
        # "not at most the threshold": a NaN score is a candidate here, and sends the block the general way
        candidates = _candidates_in_order(block_scores, torch.logical_not(block_scores <= threshold),
                                          most_allowed=CANDIDATES_PER_K * self.k)
        if candidates is None:
            return None
        candidate_scores, candidate_indices, counts = candidates
        most = candidate_scores.shape[1]
        if most == 0:
            return best
        candidate_indices = torch.where(candidate_indices >= 0, candidate_indices + document_offset, -1)
        num_rows, k = block_scores.shape[0], self.k
        # merge two lists sorted by (-score, index): candidate j goes after the running entries of its score or
        # more (lower document indices), i.e. to place (their number) + j; running entry i moves down by the
        # number of candidates placed before it. Places past k land in a spare column k and are dropped.
        before = torch.searchsorted(-best_scores.contiguous(), -candidate_scores, right=True)
        ranks = torch.arange(most, device=before.device)
        valid = ranks < counts[:, None]
        candidate_places = torch.where(valid, before + ranks, k).clamp_(max=k)
        inserted = torch.zeros((num_rows, k + 1), dtype=torch.int64, device=before.device)
        inserted.scatter_add_(1, torch.where(valid, before, k), valid.to(torch.int64))
        best_places = (torch.arange(k, device=before.device) + torch.cumsum(inserted, dim=1)[:, :k]).clamp_(max=k)
        merged_scores = best_scores.new_empty((num_rows, k + 1))
        merged_indices = best_indices.new_empty((num_rows, k + 1))
        merged_scores.scatter_(1, best_places, best_scores).scatter_(1, candidate_places, candidate_scores)
        merged_indices.scatter_(1, best_places, best_indices).scatter_(1, candidate_places, candidate_indices)
        return merged_scores[:, :k].contiguous(), merged_indices[:, :k].contiguous()

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, indices)`` ``[Q, min(k, documents seen)]``, query ranges in order."""
        ranges = {**self._best, **{start: heap.result() for start, heap in self._heaps.items()}}
        starts = sorted(ranges)
        return torch.cat([ranges[start][0] for start in starts]), torch.cat([ranges[start][1] for start in starts])



class BlockSelection:
    """The score blocks of a search and their selection into a :class:`RunningTopK`, the selection of a block
    overlapping the product of the next on the CPU. Each block is scored into :meth:`block` (one of two
    :class:`ScoreScratch` buffers, used in turn) and handed to :meth:`add`, which selects it in a helper thread
    while the caller multiplies the next block into the other buffer; :meth:`block` waits until the selection of
    the block that last used its buffer is done. Blocks are selected in the order they are added, so the result
    is :class:`RunningTopK`'s, bit for bit; use it as a context manager (the helper thread ends with it).

    Why: numpy's OpenBLAS (:func:`score_block` on an AMD CPU) keeps its worker thread spinning for about 0.1 s
    after each product before it sleeps. When the selection ran between two products, that worker spun through
    it, and took a core from faiss's heaps: 0.5 of the 1.85 CPU s of an exact search of 1,000 x 100,000 vectors
    (two threads, k = 1000) went to spinning. With the next product started at once, the BLAS threads work
    instead (1.84 -> 1.5 CPU s, 0.95 -> 0.8 s wall). On another device the selection is made in place, with one
    buffer: the device's queue already overlaps it."""

    def __init__(self, k: int, rows: int, columns: int, device: torch.device):
        self._best = RunningTopK(k)
        overlapped = device.type == "cpu"
        self._buffers = [ScoreScratch(rows, columns, device) for _ in range(2 if overlapped else 1)]
        self._pending: list[Future | None] = [None] * len(self._buffers)
        self._turn = 0
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="block-selection") if overlapped else None

    def __enter__(self) -> "BlockSelection":
        return self

    def __exit__(self, *exc) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True, cancel_futures=True)

    def block(self, rows: int, columns: int) -> torch.Tensor:
        """The buffer the next block of scores goes into, ``[rows, columns]``, once it is free."""
        pending = self._pending[self._turn]
        if pending is not None:
            pending.result()  # an error of the selection is raised here
        return self._buffers[self._turn].block(rows, columns)

    def add(self, query_start: int, block_scores: torch.Tensor, document_offset: int, *, bounded: bool = False
            ) -> None:
        """Select the block just scored into :meth:`block`'s buffer (:meth:`RunningTopK.add`)."""
        if self._helper is None:
            self._best.add(query_start, block_scores, document_offset, bounded=bounded)
            return
        self._pending[self._turn] = self._helper.submit(self._best.add, query_start, block_scores, document_offset,
                                                        bounded=bounded)
        self._turn = (self._turn + 1) % len(self._buffers)

    def result(self) -> SearchResult:
        """:meth:`RunningTopK.result` once every block added is selected."""
        for pending in self._pending:
            if pending is not None:
                pending.result()
        return self._best.result()

__all__ = ["CANDIDATES_PER_K", "NORMALIZE_EPS", "SEED_STRIDE", "ArrayLike", "BlockSelection", "RunningTopK",
           "ScoreScratch",
           "SearchResult", "empty_result", "numpy_product", "prepare", "score_block", "score_threads",
           "largest_row_norm", "norms_bound_scores", "scores_are_bounded", "stable_sort_rows", "validate_k"]
