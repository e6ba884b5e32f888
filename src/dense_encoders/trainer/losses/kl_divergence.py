"""KL divergence of the student's softmax from the teacher's.

Sec. 3.4 of "TITE: Token-Independent Text Encoder for Information Retrieval" (Schlatt, Hagen, Potthast,
Hagen; SIGIR 2025), with the temperature scaling of "Distilling the Knowledge in a Neural Network"
(Hinton, Vinyals, Dean; 2015).
"""

from __future__ import annotations

from torch import Tensor

from ...settings.losses import LOSS_OPTIONS
from .base import DistillationLoss, check_temperature, masked_log_softmax, validate


def kl_divergence_loss(
    student: Tensor, teacher: Tensor, mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """KL(p_teacher || p_student) with softmax at ``temperature`` over real docs (TITE Sec. 3.4).

    Scaled by ``temperature**2`` (Hinton et al.), so that the MEAN of the per-query values equals
    sentence-transformers' ``DistillKLDivLoss(temperature=tau)`` (``KLDivLoss(reduction=
    "batchmean")`` times ``tau**2``) on the same scores.
    """
    tau = check_temperature(temperature)
    s, t, mask = validate("kl", student, teacher, mask)
    log_p_teacher = masked_log_softmax(t, mask, tau)
    p_teacher = log_p_teacher.exp() * mask
    kl = (p_teacher * (log_p_teacher - masked_log_softmax(s, mask, tau))).sum(dim=1)
    return kl * (tau**2)


class KLDivergenceLoss(DistillationLoss):
    """:func:`kl_divergence_loss` as a loss of a :class:`DistillationObjective`."""

    function = staticmethod(kl_divergence_loss)
    name = "kl"
    display_name = "KL"
    citation = ("TITE: Token-Independent Text Encoder for Information Retrieval (Schlatt et al., SIGIR 2025), "
                "Sec. 3.4; Distilling the Knowledge in a Neural Network (Hinton et al., 2015)")
    equation = "tau^2 * KL(softmax(t / tau) || softmax(s / tau))"
    settings = LOSS_OPTIONS["kl"]  # the command-line options (dense_encoders.settings.losses)
