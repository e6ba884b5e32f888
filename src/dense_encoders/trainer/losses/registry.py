"""The losses a spec such as ``"margin_mse+kl+infonce"`` may name. A new loss is one file in this folder
(a :class:`~dense_encoders.trainer.losses.base.DistillationLoss` subclass) and one line in ``REGISTERED``; the
options of it that the command line sets, if any, go in :data:`dense_encoders.settings.losses.LOSS_OPTIONS`
(read by ``--help`` without importing torch), which the loss names as its ``settings``."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from ...settings.losses import LOSS_OPTIONS, LossSettings
from .base import DistillationLoss
from .infonce import InfoNCELoss
from .kl_divergence import KLDivergenceLoss
from .m3se import M3SELoss
from .margin_mse import MarginMSELoss
from .mse import MSELoss
from .rankdistil_b import RankDistilBLoss
from .softmax_cross_entropy import SoftmaxCrossEntropyLoss

__all__ = ["LOSSES", "LOSS_CLASSES", "LossSettings", "positive_set_loss_names"]

REGISTERED: tuple[type[DistillationLoss], ...] = (
    MSELoss,
    MarginMSELoss,
    M3SELoss,
    SoftmaxCrossEntropyLoss,
    KLDivergenceLoss,
    RankDistilBLoss,
    InfoNCELoss,
)

#: spec name -> loss class, in the order error messages list them
LOSS_CLASSES: dict[str, type[DistillationLoss]] = {loss.name: loss for loss in REGISTERED}
#: spec name -> functional form on score tensors (``loss(student, teacher, mask, **options)``)
LOSSES: dict[str, Callable[..., Tensor]] = {name: loss.function for name, loss in LOSS_CLASSES.items()}


def positive_set_loss_names() -> list[str]:
    """The registered losses that read the judged positive set P."""
    return [name for name, loss in LOSS_CLASSES.items() if loss.uses_positives]


def _check_loss_options() -> None:
    """Each registered loss's ``settings`` are its entry of ``LOSS_OPTIONS``, and each entry a registered loss's."""
    declared = {loss.name: tuple(loss.settings) for loss in REGISTERED if loss.settings}
    if declared != LOSS_OPTIONS:
        raise ValueError(f"the losses' settings {declared} are not dense_encoders.settings.losses.LOSS_OPTIONS "
                         f"{LOSS_OPTIONS}: name each loss's options there, and only there")


_check_loss_options()
