"""Distillation and contrastive losses for fine-tuning dual-encoders (re-rankers' scores as teacher).

Every loss works on a batch of ``Q`` queries, each with up to ``K`` candidate documents:

* ``student`` and ``teacher``: float tensors ``[Q, K]``, the scores of each query's candidates;
* ``mask``: bool ``[Q, K]``, True for a real document. A query may have fewer than ``K`` documents;
  padded entries never influence the value or the gradient (they may hold any value, NaN included,
  and get an exact zero gradient);
* ``positives`` (where accepted): optional bool ``[Q, K]``, the positive set P. When None, P is the
  teacher's highest-scoring real document (first index on ties) and N the other real documents.

Each function returns a PER-QUERY loss ``[Q]`` (float32 or wider), differentiable w.r.t. the student;
the teacher is always detached. The caller sums and normalises (e.g. by the number of queries over
all gradient-accumulation steps).

References:

* "In defense of dual-encoders for neural ranking" (Menon et al., 2022), abbreviated [DE] below:
  Eq. 1 softmax cross-entropy with temperature, Eq. 3 Margin-MSE, Eq. 4 multi-margin MSE (M3SE),
  Proposition 3 (softmax CE approaches Margin-MSE at high temperature), RankDistil-B in §4.3.
* Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with Cross-Architecture
  Knowledge Distillation" (Margin-MSE).
* TITE (§3.4): Margin-MSE over all pairs + KL divergence + InfoNCE with in-batch and in-sample
  negatives, in-sample negatives being at least ``theta`` below the positive's teacher score.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "LOSSES",
    "PAIRWISE_LOSSES",
    "DistillationObjective",
    "infonce_loss",
    "kl_divergence_loss",
    "m3se_loss",
    "margin_mse_loss",
    "mse_loss",
    "parse_loss_spec",
    "rankdistil_b_loss",
    "softmax_cross_entropy_loss",
]


# --------------------------------------------------------------------------------------------
# validation and masking helpers
# --------------------------------------------------------------------------------------------


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _neg_fill(dtype: torch.dtype) -> float:
    """A large but finite negative logit: exp() underflows to 0 while nothing becomes inf/NaN."""
    return torch.finfo(dtype).min / 4


def _first_bad_row(bad: Tensor) -> int:
    return int(bad.any(dim=1).nonzero()[0, 0])


def _check_float(name: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} scores must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} scores must be 2-D [queries, documents], got shape {tuple(x.shape)}")


def _check_finite(name: str, x: Tensor, mask: Tensor) -> None:
    bad = ~torch.isfinite(x.detach()) & mask
    if bool(bad.any()):
        raise ValueError(f"{name} scores contain NaN/inf at query index {_first_bad_row(bad)}")


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (0.0 < t < math.inf):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    return t


def _validate(
    loss: str,
    student: Tensor,
    teacher: Tensor,
    mask: Tensor | None,
    min_docs: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Check shapes/dtypes/values; return (student, teacher, mask) with padded entries zeroed.

    The returned student keeps its autograd graph (padded entries get an exact zero gradient);
    the teacher is detached. Both are cast to a common dtype of at least float32.
    """
    _check_float("student", student)
    _check_float("teacher", teacher)
    if student.shape != teacher.shape:
        raise ValueError(
            f"{loss}: student and teacher must have the same shape [Q, K], got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    if mask is None:
        mask = torch.ones(student.shape, dtype=torch.bool, device=student.device)
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{loss}: mask must be a bool tensor, got {got}")
    if mask.shape != student.shape:
        raise ValueError(
            f"{loss}: mask must have the same shape as the scores {tuple(student.shape)}, "
            f"got {tuple(mask.shape)}"
        )
    if student.shape[0] == 0:
        raise ValueError(f"{loss}: the batch holds no query")
    counts = mask.sum(dim=1)
    empty = counts == 0
    if bool(empty.any()):
        raise ValueError(
            f"{loss}: every query needs at least one real document; "
            f"query {int(empty.nonzero()[0, 0])} has none"
        )
    if min_docs > 1:
        few = counts < min_docs
        if bool(few.any()):
            i = int(few.nonzero()[0, 0])
            raise ValueError(
                f"{loss} needs at least {min_docs} documents per query; "
                f"query {i} has {int(counts[i])}"
            )
    _check_finite("teacher", teacher, mask)
    _check_finite("student", student, mask)
    dtype = _compute_dtype(student, teacher)
    s = torch.where(mask, student.to(dtype), 0.0)
    t = torch.where(mask, teacher.detach().to(dtype), 0.0)
    return s, t, mask


def _positive_sets(
    loss: str, teacher: Tensor, mask: Tensor, positives: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The (P, N) bool masks; P defaults to the teacher's top real document (first on ties)."""
    if positives is None:
        best = torch.where(mask, teacher, _neg_fill(teacher.dtype)).argmax(dim=1)
        pos = torch.zeros_like(mask)
        pos[torch.arange(mask.shape[0], device=mask.device), best] = True
    else:
        if not isinstance(positives, Tensor) or positives.dtype != torch.bool:
            raise ValueError(f"{loss}: positives must be a bool tensor")
        if positives.shape != mask.shape:
            raise ValueError(
                f"{loss}: positives must have shape {tuple(mask.shape)}, got {tuple(positives.shape)}"
            )
        stray = positives & ~mask
        if bool(stray.any()):
            raise ValueError(
                f"{loss}: positives marks a padded document at query index {_first_bad_row(stray)}"
            )
        pos = positives
    return pos, mask & ~pos


def _masked_log_softmax(x: Tensor, mask: Tensor, temperature: float) -> Tensor:
    """log softmax(x / temperature) over the real entries; padded entries are 0 (not -inf)."""
    logits = torch.where(mask, x / temperature, _neg_fill(x.dtype))
    return torch.where(mask, torch.log_softmax(logits, dim=1), 0.0)


# --------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------


def mse_loss(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Logit matching ([DE] §2/§4.1, Ba & Caruana 2014): mean over real docs of (s_k - t_k)^2."""
    s, t, mask = _validate("mse", student, teacher, mask)
    sq = (s - t) ** 2  # padded entries are 0 - 0
    return sq.sum(dim=1) / mask.sum(dim=1).to(sq.dtype)


def margin_mse_loss(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Margin-MSE ([DE] Eq. 3, Hofstätter et al.) over ALL pairs i < j of real documents.

    ``mean_{i<j} ((t_i - t_j) - (s_i - s_j))^2`` (the TITE §3.4 form; for two documents exactly
    Eq. 3). Needs at least 2 real documents per query.
    """
    s, t, mask = _validate("margin_mse", student, teacher, mask, min_docs=2)
    d = s - t  # ((t_i - t_j) - (s_i - s_j)) == d_j - d_i
    diff = d.unsqueeze(2) - d.unsqueeze(1)  # [Q, K, K]
    k = mask.shape[1]
    upper = torch.ones(k, k, dtype=torch.bool, device=mask.device).triu(diagonal=1)
    pairs = mask.unsqueeze(2) & mask.unsqueeze(1) & upper
    total = torch.where(pairs, diff**2, 0.0).sum(dim=(1, 2))
    return total / pairs.sum(dim=(1, 2)).to(total.dtype)


def m3se_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, positives: Tensor | None = None
) -> Tensor:
    """Multi-margin MSE ([DE] Eq. 4).

    ``sum_{i in P} ((t_i - t_j*) - (s_i - s_j*))^2 + sum_{j in N} relu(s_j - s_j*)^2`` with j* the
    negative of highest teacher score (first index on ties). Needs >= 1 positive and >= 1
    negative per query.
    """
    s, t, mask = _validate("m3se", student, teacher, mask, min_docs=2)
    pos, neg = _positive_sets("m3se", t, mask, positives)
    for what, sel in (("positive", pos), ("negative", neg)):
        none = ~sel.any(dim=1)
        if bool(none.any()):
            raise ValueError(
                f"m3se needs at least one positive and one negative document per query; "
                f"query {int(none.nonzero()[0, 0])} has no {what}"
            )
    j_star = torch.where(neg, t, _neg_fill(t.dtype)).argmax(dim=1, keepdim=True)
    t_star = t.gather(1, j_star)
    s_star = s.gather(1, j_star)
    margin = ((t - t_star) - (s - s_star)) ** 2
    hinge = torch.relu(s - s_star) ** 2
    return torch.where(pos, margin, 0.0).sum(dim=1) + torch.where(neg, hinge, 0.0).sum(dim=1)


def softmax_cross_entropy_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """Softmax cross-entropy ([DE] Eq. 1) with the teacher softmax as target.

    ``-sum_k p_k(t; tau) log p_k(s; tau)`` over real docs, ``p(x; tau) = softmax(x / tau)``.
    No tau^2 factor (Proposition 3 relates tau^2 * gradient to Margin-MSE's).
    """
    tau = _check_temperature(temperature)
    s, t, mask = _validate("sce", student, teacher, mask)
    p_teacher = _masked_log_softmax(t, mask, tau).exp() * mask
    return -(p_teacher * _masked_log_softmax(s, mask, tau)).sum(dim=1)


def kl_divergence_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """KL(p_teacher || p_student) with softmax at ``temperature`` over real docs (TITE §3.4).

    Scaled by ``temperature**2`` (Hinton et al.), so that the MEAN of the per-query values equals
    sentence-transformers' ``DistillKLDivLoss(temperature=tau)`` (``KLDivLoss(reduction=
    "batchmean")`` times ``tau**2``) on the same scores.
    """
    tau = _check_temperature(temperature)
    s, t, mask = _validate("kl", student, teacher, mask)
    log_p_teacher = _masked_log_softmax(t, mask, tau)
    p_teacher = log_p_teacher.exp() * mask
    kl = (p_teacher * (log_p_teacher - _masked_log_softmax(s, mask, tau))).sum(dim=1)
    return kl * (tau**2)


def rankdistil_b_loss(
    student: Tensor,
    teacher: Tensor,
    mask: Tensor,
    positives: Tensor | None = None,
    gamma: float = 0.0,
) -> Tensor:
    """Binary RankDistil ([DE] §4.3, Reddi et al. 2021).

    ``sum_{i in P} (t_i - s_i)^2 + sum_{j in N} relu(s_j - gamma)^2``.
    """
    gamma = float(gamma)
    if not math.isfinite(gamma):
        raise ValueError(f"rankdistil_b: gamma must be finite, got {gamma}")
    s, t, mask = _validate("rankdistil_b", student, teacher, mask)
    pos, neg = _positive_sets("rankdistil_b", t, mask, positives)
    matched = torch.where(pos, (t - s) ** 2, 0.0).sum(dim=1)
    below = torch.where(neg, torch.relu(s - gamma) ** 2, 0.0).sum(dim=1)
    return matched + below


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
    """InfoNCE with in-batch and in-sample negatives (TITE §3.4).

    ``scores`` ``[Q, G*K]``: student scores of each LOCAL query against every document of the
    GLOBAL batch, query-major (column ``j*K + k`` is document ``k`` of global query ``j``);
    ``teacher``/``mask`` ``[Q, K]`` are local; local query ``q`` is global query
    ``query_offset + q``; ``global_mask`` ``[G, K]`` (default ``mask``, only when ``G == Q``).

    For query q the candidates are: the positive, its own real document of highest teacher
    score (first on ties); the in-sample negatives, its own real documents with
    ``t_best - t_k >= theta`` ("at least theta below the best"); with ``in_batch`` every real document of the
    other global queries. Own documents within ``theta`` of the best are excluded. The loss is the
    cross-entropy of ``softmax(scores / temperature)`` over the candidates, positive as target.
    """
    tau = _check_temperature(temperature)
    theta = float(theta)
    if math.isnan(theta):
        raise ValueError("infonce: theta must not be NaN")
    global_mask = _infonce_global_mask(scores, teacher, mask, global_mask)
    query_offset = _infonce_query_offset(mask, global_mask, query_offset)
    _check_finite("teacher", teacher, mask)
    flat_global = global_mask.reshape(1, -1).to(scores.device).expand(mask.shape[0], -1)
    _check_finite("scores", scores, flat_global)

    dtype = _compute_dtype(scores, teacher)
    candidates, target_col = _infonce_candidates(
        teacher, mask, flat_global, global_mask.shape[0], query_offset, theta, in_batch, dtype
    )
    s = torch.where(flat_global, scores.to(dtype), 0.0)
    log_p = _masked_log_softmax(s, candidates, tau)
    return -log_p.gather(1, target_col).squeeze(1)


def _infonce_global_mask(scores: Tensor, teacher: Tensor, mask: Tensor, global_mask: Tensor | None) -> Tensor:
    """Check the types and shapes of :func:`infonce_loss`'s inputs; returns the global mask ``[G, K]``
    (the local ``mask`` when none is given, then ``G == Q``)."""
    _check_float("scores", scores)
    _check_float("teacher", teacher)
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
    t = torch.where(mask, teacher.detach().to(dtype), _neg_fill(dtype))
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


# --------------------------------------------------------------------------------------------
# registry, spec parsing, combined objective
# --------------------------------------------------------------------------------------------

LOSSES: dict[str, Callable[..., Tensor]] = {
    "mse": mse_loss,
    "margin_mse": margin_mse_loss,
    "m3se": m3se_loss,
    "sce": softmax_cross_entropy_loss,
    "kl": kl_divergence_loss,
    "rankdistil_b": rankdistil_b_loss,
    "infonce": infonce_loss,
}
#: losses defined on pairs of documents: every query needs at least 2 real documents
PAIRWISE_LOSSES = frozenset({"margin_mse", "m3se"})

# arguments a DistillationObjective passes itself; the rest may come from loss_kwargs
_RESERVED_ARGS = frozenset(
    {"student", "teacher", "mask", "scores", "positives", "query_offset", "global_mask"}
)
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$")


def parse_loss_spec(spec: str) -> dict[str, float]:
    """Parse ``"margin_mse+kl+infonce"`` or ``"margin_mse:1 + kl:0.5 + infonce:2"``.

    Returns ``{name: weight}`` in the spec's order; a missing weight is 1. Raises ValueError on an
    empty spec or term, an unknown or duplicate name, or a weight that is not a finite number
    >= 0.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty loss spec {spec!r}; known losses: {', '.join(LOSSES)}")
    out: dict[str, float] = {}
    for raw in spec.split("+"):
        term = re.sub(r"\s+", "", raw)
        if not term:
            raise ValueError(f"empty term in loss spec {spec!r}")
        match = _TERM.match(term)
        if match is None:
            raise ValueError(f"cannot parse term {raw.strip()!r} of loss spec {spec!r}")
        name, weight_text = match.group(1).lower(), match.group(2)
        if name not in LOSSES:
            raise ValueError(
                f"unknown loss {name!r} in spec {spec!r}; known losses: {', '.join(LOSSES)}"
            )
        if name in out:
            raise ValueError(f"loss {name!r} appears twice in spec {spec!r}")
        if weight_text is None:
            weight = 1.0
        else:
            try:
                weight = float(weight_text)
            except ValueError:
                raise ValueError(
                    f"bad weight {weight_text!r} for loss {name!r} in spec {spec!r}"
                ) from None
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(
                    f"weight for loss {name!r} must be a finite number >= 0, got {weight_text!r}"
                )
        out[name] = weight
    return out


class DistillationObjective(torch.nn.Module):
    """Weighted sum of the registered losses, built from a spec such as ``"margin_mse+kl:0.5"``.

    ``loss_kwargs`` maps a configured loss name to extra keyword arguments of its function, e.g.
    ``{"sce": {"temperature": 4}, "infonce": {"theta": 3}}``. ``min_documents`` (2 when a
    pairwise loss is configured, else 1) lets a data pipeline drop queries with too few documents.
    """

    def __init__(
        self,
        spec: str | Mapping[str, float],
        loss_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(spec, str):
            weights = parse_loss_spec(spec)
        else:
            weights = parse_loss_spec("+".join(f"{n}:{float(w)!r}" for n, w in dict(spec).items()))
        self.weights: dict[str, float] = weights
        self.loss_kwargs: dict[str, dict[str, Any]] = {}
        for name, kwargs in dict(loss_kwargs or {}).items():
            if name not in weights:
                raise ValueError(
                    f"loss_kwargs given for {name!r}, which is not in the spec "
                    f"({', '.join(weights)})"
                )
            params = inspect.signature(LOSSES[name]).parameters
            allowed = [p for p in params if p not in _RESERVED_ARGS]
            for key in kwargs:
                if key not in allowed:
                    raise ValueError(
                        f"{name!r} has no option {key!r}; options: {', '.join(allowed) or 'none'}"
                    )
            self.loss_kwargs[name] = dict(kwargs)
        self.min_documents: int = 2 if PAIRWISE_LOSSES & set(weights) else 1

    @property
    def names(self) -> list[str]:
        return list(self.weights)

    @property
    def requires_batch_scores(self) -> bool:
        return "infonce" in self.weights

    def forward(
        self,
        student: Tensor,
        teacher: Tensor,
        mask: Tensor,
        *,
        batch_scores: Tensor | None = None,
        global_mask: Tensor | None = None,
        query_offset: int = 0,
        positives: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Return ``(total [Q], {name: per-query loss [Q]})``, total = sum of weight * loss.

        ``batch_scores`` (needed by ``infonce``): ``[Q, G*K]`` scores of the local queries
        against the global batch, see :func:`infonce_loss`. ``positives`` goes to the losses
        that take a positive set (``m3se``, ``rankdistil_b``).
        """
        components: dict[str, Tensor] = {}
        for name in self.weights:
            kwargs = dict(self.loss_kwargs.get(name, {}))
            if name == "infonce":
                if batch_scores is None:
                    raise ValueError(
                        "the infonce loss needs batch_scores [Q, G*K] (the local queries' scores "
                        "against every document of the global batch)"
                    )
                value = infonce_loss(
                    batch_scores,
                    teacher,
                    mask,
                    query_offset=query_offset,
                    global_mask=global_mask,
                    **kwargs,
                )
            else:
                if name in ("m3se", "rankdistil_b"):
                    kwargs["positives"] = positives
                value = LOSSES[name](student, teacher, mask, **kwargs)
            components[name] = value
        total = None
        for name, value in components.items():
            term = value * self.weights[name]
            total = term if total is None else total + term
        assert total is not None  # parse_loss_spec rejects an empty spec
        return total, components

    def extra_repr(self) -> str:
        return " + ".join(f"{w:g}*{n}" for n, w in self.weights.items())
