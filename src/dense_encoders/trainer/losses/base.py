"""What every distillation loss shares: the batch it reads, the base class, input checks and masking.

Every loss works on a batch of ``Q`` queries, each with up to ``K`` candidate documents:

* ``student`` and ``teacher``: float tensors ``[Q, K]``, the scores of each query's candidates;
* ``mask``: bool ``[Q, K]``, True for a real document. A query may have fewer than ``K`` documents;
  padded entries never influence the value or the gradient (they may hold any value, NaN included,
  and get an exact zero gradient);
* ``positives`` (where accepted): optional bool ``[Q, K]``, the positive set P. When None, P is the
  teacher's highest-scoring real document (first index on ties) and N the other real documents.

Each loss returns a PER-QUERY value ``[Q]`` (float32 or wider), differentiable w.r.t. the student;
the teacher is always detached. The caller sums and normalises (e.g. by the number of queries over
all gradient-accumulation steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...settings.losses import LossSetting

__all__ = ["DistillationLoss", "LossSetting", "ScoreBatch"]


@dataclass(frozen=True)
class ScoreBatch:
    """The scores of one batch, everything any loss may read.

    ``batch_scores`` ``[Q, G*K]``: the local queries' student scores against every document of the
    global batch (query-major); ``global_mask`` ``[G, K]``: its real documents; local query ``q`` is
    global query ``query_offset + q``; ``positives``: the judged positive set P (None: the teacher's best).
    """

    student: Tensor
    teacher: Tensor
    mask: Tensor
    batch_scores: Tensor | None = None
    global_mask: Tensor | None = None
    query_offset: int = 0
    positives: Tensor | None = None


class DistillationLoss(torch.nn.Module):
    """One loss of a :class:`~dense_encoders.trainer.losses.DistillationObjective`.

    A subclass sets ``function`` (its functional form on score tensors), ``name`` (its name in a loss
    spec such as ``"margin_mse+kl"``), ``display_name``, ``citation`` (the paper, by title and authors)
    and ``equation`` (for the model card); declares what it needs (``min_documents`` per query,
    ``uses_positives``: it reads the judged positive set P, ``needs_batch_scores``: it reads the scores
    against the global batch); lists the options the command line sets in ``settings``. :meth:`forward`
    maps a :class:`ScoreBatch` to the per-query loss ``[Q]``; a loss overrides it only when its function
    reads more of the batch than the scores, the mask and P.

    The constructor takes the options of ``settings`` (and of ``extra_options``, those only the Python
    API sets) as keywords, each defaulting to its declared default; the default :meth:`forward` calls
    ``function`` on the batch's scores with them (and with P, for a loss that reads it).
    """

    function: ClassVar[Callable[..., Tensor]]
    name: ClassVar[str]
    display_name: ClassVar[str]
    citation: ClassVar[str]
    equation: ClassVar[str]
    min_documents: ClassVar[int] = 1
    uses_positives: ClassVar[bool] = False
    needs_batch_scores: ClassVar[bool] = False
    settings: ClassVar[tuple[LossSetting, ...]] = ()
    extra_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        super().__init__()
        defaults = self.option_defaults()
        for key in options:
            if key not in defaults:
                raise ValueError(f"{self.name!r} has no option {key!r}; options: {', '.join(defaults) or 'none'}")
        for key, default in defaults.items():
            setattr(self, key, options.get(key, default))

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """The constructor's keywords and their defaults: the options of ``settings``, then ``extra_options``."""
        return {**{setting.option: setting.default for setting in cls.settings}, **cls.extra_options}

    def options(self) -> dict[str, Any]:
        """The constructor keywords this loss was built with."""
        return {key: getattr(self, key) for key in self.option_defaults()}

    def forward(self, batch: ScoreBatch) -> Tensor:
        positives = {"positives": batch.positives} if self.uses_positives else {}
        return self.function(batch.student, batch.teacher, batch.mask, **positives, **self.options())

    def describe(self) -> dict[str, Any]:
        """What the model card says about this loss."""
        return {"name": self.name, "display_name": self.display_name, "equation": self.equation,
                "citation": self.citation, "options": self.options()}

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in self.options().items())


# --------------------------------------------------------------------------------------------
# validation and masking helpers of the functional forms
# --------------------------------------------------------------------------------------------


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def neg_fill(dtype: torch.dtype) -> float:
    """A large but finite negative logit: exp() underflows to 0 while nothing becomes inf/NaN."""
    return torch.finfo(dtype).min / 4


def first_bad_row(bad: Tensor) -> int:
    return int(bad.any(dim=1).nonzero()[0, 0])


def check_float(name: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} scores must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} scores must be 2-D [queries, documents], got shape {tuple(x.shape)}")


def check_finite(name: str, x: Tensor, mask: Tensor) -> None:
    bad = ~torch.isfinite(x.detach()) & mask
    if bool(bad.any()):
        raise ValueError(f"{name} scores contain NaN/inf at query index {first_bad_row(bad)}")


def check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (0.0 < t < math.inf):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    return t


def _check_mask(loss: str, student: Tensor, mask: Tensor | None) -> Tensor:
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
    return mask


def _check_counts(loss: str, mask: Tensor, min_docs: int) -> None:
    if mask.shape[0] == 0:
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


def validate(
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
    check_float("student", student)
    check_float("teacher", teacher)
    if student.shape != teacher.shape:
        raise ValueError(
            f"{loss}: student and teacher must have the same shape [Q, K], got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    mask = _check_mask(loss, student, mask)
    _check_counts(loss, mask, min_docs)
    check_finite("teacher", teacher, mask)
    check_finite("student", student, mask)
    dtype = compute_dtype(student, teacher)
    s = torch.where(mask, student.to(dtype), 0.0)
    t = torch.where(mask, teacher.detach().to(dtype), 0.0)
    return s, t, mask


def positive_sets(
    loss: str, teacher: Tensor, mask: Tensor, positives: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The (P, N) bool masks; P defaults to the teacher's top real document (first on ties)."""
    if positives is None:
        best = torch.where(mask, teacher, neg_fill(teacher.dtype)).argmax(dim=1)
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
                f"{loss}: positives marks a padded document at query index {first_bad_row(stray)}"
            )
        pos = positives
    return pos, mask & ~pos


def masked_log_softmax(x: Tensor, mask: Tensor, temperature: float) -> Tensor:
    """log softmax(x / temperature) over the real entries; padded entries are 0 (not -inf)."""
    logits = torch.where(mask, x / temperature, neg_fill(x.dtype))
    return torch.where(mask, torch.log_softmax(logits, dim=1), 0.0)
