"""Multi-margin MSE (M3SE): Eq. 4 of "In Defense of Dual-Encoders for Neural Ranking" (Menon, Jayasumana,
Rawat, Kim, Reddi, Kumar; ICML 2022)."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import DistillationLoss, neg_fill, positive_sets, validate


def m3se_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, positives: Tensor | None = None
) -> Tensor:
    """Multi-margin MSE (Menon et al. 2022, Eq. 4).

    ``sum_{i in P} ((t_i - t_j*) - (s_i - s_j*))^2 + sum_{j in N} relu(s_j - s_j*)^2`` with j* the
    negative of highest teacher score (first index on ties). Needs >= 1 positive and >= 1
    negative per query.
    """
    s, t, mask = validate("m3se", student, teacher, mask, min_docs=M3SELoss.min_documents)
    pos, neg = positive_sets("m3se", t, mask, positives)
    for what, sel in (("positive", pos), ("negative", neg)):
        none = ~sel.any(dim=1)
        if bool(none.any()):
            raise ValueError(
                f"m3se needs at least one positive and one negative document per query; "
                f"query {int(none.nonzero()[0, 0])} has no {what}"
            )
    j_star = torch.where(neg, t, neg_fill(t.dtype)).argmax(dim=1, keepdim=True)
    t_star = t.gather(1, j_star)
    s_star = s.gather(1, j_star)
    margin = ((t - t_star) - (s - s_star)) ** 2
    hinge = torch.relu(s - s_star) ** 2
    return torch.where(pos, margin, 0.0).sum(dim=1) + torch.where(neg, hinge, 0.0).sum(dim=1)


class M3SELoss(DistillationLoss):
    """:func:`m3se_loss` as a loss of a :class:`DistillationObjective`; P is the judged positive set when the
    batch has one."""

    function = staticmethod(m3se_loss)
    name = "m3se"
    display_name = "M3SE"
    citation = "In Defense of Dual-Encoders for Neural Ranking (Menon et al., ICML 2022), Eq. 4"
    equation = "sum_{i in P} ((t_i - t_j*) - (s_i - s_j*))^2 + sum_{j in N} relu(s_j - s_j*)^2"
    min_documents = 2
    uses_positives = True
