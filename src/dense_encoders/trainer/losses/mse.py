"""Logit matching: the mean squared difference of student and teacher scores.

"In Defense of Dual-Encoders for Neural Ranking" (Menon, Jayasumana, Rawat, Kim, Reddi, Kumar; ICML 2022),
Sec. 2 / 4.1, after "Do Deep Nets Really Need to be Deep?" (Ba & Caruana, NeurIPS 2014).
"""

from __future__ import annotations

from torch import Tensor

from .base import DistillationLoss, validate


def mse_loss(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Logit matching (Menon et al. 2022, Sec. 2 / 4.1; Ba & Caruana 2014): mean over real docs of (s_k - t_k)^2."""
    s, t, mask = validate("mse", student, teacher, mask)
    sq = (s - t) ** 2  # padded entries are 0 - 0
    return sq.sum(dim=1) / mask.sum(dim=1).to(sq.dtype)


class MSELoss(DistillationLoss):
    """:func:`mse_loss` as a loss of a :class:`DistillationObjective`."""

    function = staticmethod(mse_loss)
    name = "mse"
    display_name = "MSE"
    citation = ("In Defense of Dual-Encoders for Neural Ranking (Menon et al., ICML 2022), Sec. 2; "
                "Do Deep Nets Really Need to be Deep? (Ba & Caruana, NeurIPS 2014)")
    equation = "mean_k (s_k - t_k)^2"
