"""Binary RankDistil: Sec. 4.3 of "In Defense of Dual-Encoders for Neural Ranking" (Menon, Jayasumana, Rawat,
Kim, Reddi, Kumar; ICML 2022), after "RankDistil: Knowledge Distillation for Ranking" (Reddi, Pasumarthi,
Menon, Rawat, Yu, Kim, Veit, Kumar; AISTATS 2021)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...settings.losses import LOSS_OPTIONS
from .base import DistillationLoss, positive_sets, validate


def rankdistil_b_loss(
    student: Tensor,
    teacher: Tensor,
    mask: Tensor,
    positives: Tensor | None = None,
    gamma: float = 0.0,
) -> Tensor:
    """Binary RankDistil (Menon et al. 2022, Sec. 4.3; Reddi et al. 2021).

    ``sum_{i in P} (t_i - s_i)^2 + sum_{j in N} relu(s_j - gamma)^2``.
    """
    gamma = float(gamma)
    if not math.isfinite(gamma):
        raise ValueError(f"rankdistil_b: gamma must be finite, got {gamma}")
    s, t, mask = validate("rankdistil_b", student, teacher, mask)
    pos, neg = positive_sets("rankdistil_b", t, mask, positives)
    matched = torch.where(pos, (t - s) ** 2, 0.0).sum(dim=1)
    below = torch.where(neg, torch.relu(s - gamma) ** 2, 0.0).sum(dim=1)
    return matched + below


class RankDistilBLoss(DistillationLoss):
    """:func:`rankdistil_b_loss` as a loss of a :class:`DistillationObjective`; P is the judged positive set
    when the batch has one."""

    function = staticmethod(rankdistil_b_loss)
    name = "rankdistil_b"
    display_name = "RankDistil-B"
    citation = ("In Defense of Dual-Encoders for Neural Ranking (Menon et al., ICML 2022), Sec. 4.3; "
                "RankDistil: Knowledge Distillation for Ranking (Reddi et al., AISTATS 2021)")
    equation = "sum_{i in P} (t_i - s_i)^2 + sum_{j in N} relu(s_j - gamma)^2"
    uses_positives = True
    settings = LOSS_OPTIONS["rankdistil_b"]  # the command-line options (dense_encoders.settings.losses)
