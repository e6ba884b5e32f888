"""InfoNCE with in-batch and in-sample negatives: Sec. 3.4 of "TITE: Token-Independent Text Encoder for
Information Retrieval" (Schlatt, Hagen, Potthast, Hagen; SIGIR 2025), the contrastive loss of
"Representation Learning with Contrastive Predictive Coding" (van den Oord, Li, Vinyals; 2018).

In-sample negatives are a query's own documents at least ``theta`` below its positive's teacher score.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...settings.losses import LOSS_OPTIONS
from .base import (
    DistillationLoss,
    ScoreBatch,
    check_finite,
    check_float,
    check_temperature,
    compute_dtype,
    masked_log_softmax,
    neg_fill,
)


def infonce_loss(
    scores: Tensor,
    teacher: Tensor,
    mask: Tensor,
    query_offset: int = 0,
    theta: float = 3.0,
    temperature: float = 1.0,
    in_batch: bool = True,
    global_mask: Tensor | None = None,
) -> Tensor:
    """InfoNCE with in-batch and in-sample negatives (TITE, Schlatt et al. 2025, Sec. 3.4).

    ``scores`` ``[Q, G*K]``: student scores of each LOCAL query against every document of the
    GLOBAL batch, query-major (column ``j*K + k`` is document ``k`` of global query ``j``);
    ``teacher``/``mask`` ``[Q, K]`` are local; local query ``q`` is global query
    ``query_offset + q``; ``global_mask`` ``[G, K]`` (default ``mask``, only when ``G == Q``).

    For query q the candidates are: the positive, its own real document of highest teacher
    score (first on ties); the in-sample negatives, its own real documents with
    ``t_best - t_k >= theta`` ("at least theta below the best"); with ``in_batch`` every real document of
    the other global queries. Own documents within ``theta`` of the best are excluded. The loss is the
    cross-entropy of ``softmax(scores / temperature)`` over the candidates, positive as target.
    """
    tau = check_temperature(temperature)
    theta = float(theta)
    if math.isnan(theta):
        raise ValueError("infonce: theta must not be NaN")
    global_mask = _infonce_global_mask(scores, teacher, mask, global_mask)
    query_offset = _infonce_query_offset(mask, global_mask, query_offset)
    check_finite("teacher", teacher, mask)
    flat_global = global_mask.reshape(1, -1).to(scores.device).expand(mask.shape[0], -1)
    check_finite("scores", scores, flat_global)

    dtype = compute_dtype(scores, teacher)
    candidates, target_col = _infonce_candidates(
        teacher, mask, flat_global, global_mask.shape[0], query_offset, theta, in_batch, dtype
    )
    s = torch.where(flat_global, scores.to(dtype), 0.0)
    log_p = masked_log_softmax(s, candidates, tau)
    return -log_p.gather(1, target_col).squeeze(1)


def _infonce_global_mask(scores: Tensor, teacher: Tensor, mask: Tensor, global_mask: Tensor | None) -> Tensor:
    """Check the types and shapes of :func:`infonce_loss`'s inputs; returns the global mask ``[G, K]``
    (the local ``mask`` when none is given, then ``G == Q``)."""
    check_float("scores", scores)
    check_float("teacher", teacher)
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError("infonce: mask must be a bool tensor")
    if mask.shape != teacher.shape:
        raise ValueError(
            f"infonce: teacher and mask must have the same shape [Q, K], got "
            f"{tuple(teacher.shape)} and {tuple(mask.shape)}"
        )
    n_local, k = teacher.shape
    if scores.shape[0] != n_local:
        raise ValueError(
            f"infonce: scores must have one row per local query ({n_local}), got {scores.shape[0]}"
        )
    if global_mask is None:
        if scores.shape[1] != n_local * k:
            raise ValueError(
                f"infonce: scores.shape[1] must equal G*K; without global_mask G = Q = {n_local}, "
                f"so {n_local * k} columns are expected, got {scores.shape[1]} "
                f"(pass global_mask [G, K] for a gathered batch)"
            )
        return mask
    if not isinstance(global_mask, Tensor) or global_mask.dtype != torch.bool:
        raise ValueError("infonce: global_mask must be a bool tensor")
    if global_mask.dim() != 2 or global_mask.shape[1] != k:
        raise ValueError(
            f"infonce: global_mask must have shape [G, {k}], got {tuple(global_mask.shape)}"
        )
    n_global = global_mask.shape[0]
    if scores.shape[1] != n_global * k:
        raise ValueError(
            f"infonce: scores.shape[1] must equal G*K = {n_global}*{k} = {n_global * k}, "
            f"got {scores.shape[1]}"
        )
    return global_mask


def _infonce_query_offset(mask: Tensor, global_mask: Tensor, query_offset: int) -> int:
    """Check that the local queries are rows ``query_offset ..`` of the global batch and that each has a
    real document; returns ``query_offset`` as an int."""
    n_local, n_global = mask.shape[0], global_mask.shape[0]
    query_offset = int(query_offset)
    if query_offset < 0 or query_offset + n_local > n_global:
        raise ValueError(
            f"infonce: query_offset {query_offset} with {n_local} local queries does not fit in "
            f"{n_global} global queries"
        )
    rows = slice(query_offset, query_offset + n_local)
    if not torch.equal(global_mask[rows].to(mask.device), mask):
        raise ValueError(
            "infonce: global_mask rows query_offset .. query_offset+Q-1 must equal the local mask"
        )
    if n_local == 0:
        raise ValueError("infonce: the batch holds no query")
    empty = ~mask.any(dim=1)
    if bool(empty.any()):
        raise ValueError(
            f"infonce: every query needs at least one real document; "
            f"query {int(empty.nonzero()[0, 0])} has none"
        )
    return query_offset


def _infonce_candidates(
    teacher: Tensor,
    mask: Tensor,
    flat_global: Tensor,
    n_global: int,
    query_offset: int,
    theta: float,
    in_batch: bool,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor]:
    """The candidate columns ``[Q, G*K]`` of each local query (its positive, its in-sample negatives at
    least ``theta`` below the positive's teacher score, and with ``in_batch`` every real document of the
    other global queries) and the positive's column ``[Q, 1]``."""
    n_local, k = teacher.shape
    device = flat_global.device
    t = torch.where(mask, teacher.detach().to(dtype), neg_fill(dtype))
    best_val, best = t.max(dim=1, keepdim=True)  # first index on ties
    own = mask & ((best_val - t) >= theta)  # in-sample negatives
    own = own.scatter(1, best, True)  # plus the positive
    local_idx = torch.arange(n_local, device=device)
    own_query = (query_offset + local_idx).unsqueeze(1)  # [Q, 1]
    doc_query = torch.arange(n_global, device=device).repeat_interleave(k).unsqueeze(0)
    is_own_block = doc_query == own_query  # [Q, G*K]
    candidates = torch.zeros_like(is_own_block)
    if in_batch:
        candidates = flat_global & ~is_own_block
    own_cols = own_query * k + torch.arange(k, device=device).unsqueeze(0)  # [Q, K]
    candidates = candidates.scatter(1, own_cols, own.to(candidates.device))
    target_col = own_query * k + best  # [Q, 1]
    return candidates, target_col


class InfoNCELoss(DistillationLoss):
    """:func:`infonce_loss` as a loss of a :class:`DistillationObjective`: reads the batch's scores against the
    global batch (``ScoreBatch.batch_scores``)."""

    function = staticmethod(infonce_loss)
    name = "infonce"
    display_name = "InfoNCE"
    citation = ("TITE: Token-Independent Text Encoder for Information Retrieval (Schlatt et al., SIGIR 2025), "
                "Sec. 3.4; Representation Learning with Contrastive Predictive Coding (van den Oord et al., 2018)")
    equation = ("-log softmax(s / tau)_+ over the positive, in-sample negatives (t_+ - t_k >= theta) and in-batch "
                "negatives")
    needs_batch_scores = True
    settings = LOSS_OPTIONS["infonce"]  # the command-line options (dense_encoders.settings.losses)
    # in-batch negatives on (TITE's recipe) or off (in-sample negatives only): the Python API's choice
    extra_options = {"in_batch": True}

    def forward(self, batch: ScoreBatch) -> Tensor:
        return infonce_loss(batch.batch_scores, batch.teacher, batch.mask, query_offset=batch.query_offset,
                            global_mask=batch.global_mask, **self.options())
