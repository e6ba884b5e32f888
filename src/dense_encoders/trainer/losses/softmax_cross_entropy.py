"""Softmax cross-entropy against the teacher's softmax: Eq. 1 of "In Defense of Dual-Encoders for Neural
Ranking" (Menon, Jayasumana, Rawat, Kim, Reddi, Kumar; ICML 2022)."""

from __future__ import annotations

from torch import Tensor

from ...settings.losses import LOSS_OPTIONS
from .base import DistillationLoss, check_temperature, masked_log_softmax, validate


def softmax_cross_entropy_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """Softmax cross-entropy (Menon et al. 2022, Eq. 1) with the teacher softmax as target.

    ``-sum_k p_k(t; tau) log p_k(s; tau)`` over real docs, ``p(x; tau) = softmax(x / tau)``.
    No tau^2 factor (Proposition 3 relates tau^2 * gradient to Margin-MSE's).
    """
    tau = check_temperature(temperature)
    s, t, mask = validate("sce", student, teacher, mask)
    p_teacher = masked_log_softmax(t, mask, tau).exp() * mask
    return -(p_teacher * masked_log_softmax(s, mask, tau)).sum(dim=1)


class SoftmaxCrossEntropyLoss(DistillationLoss):
    """:func:`softmax_cross_entropy_loss` as a loss of a :class:`DistillationObjective`."""

    function = staticmethod(softmax_cross_entropy_loss)
    name = "sce"
    display_name = "softmax CE"
    citation = "In Defense of Dual-Encoders for Neural Ranking (Menon et al., ICML 2022), Eq. 1"
    equation = "-sum_k softmax(t / tau)_k log softmax(s / tau)_k"
    settings = LOSS_OPTIONS["sce"]  # the command-line options (dense_encoders.settings.losses)
