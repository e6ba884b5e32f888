"""The losses a spec such as ``"margin_mse+kl+infonce"`` may name. A new loss is one file in this folder
(a :class:`~dense_encoders.trainer.losses.base.DistillationLoss` subclass) and one line in ``REGISTERED``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, make_dataclass

from torch import Tensor

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


def _loss_settings_dataclass() -> type:
    settings = [setting for loss in REGISTERED for setting in loss.settings]
    flags = [setting.flag for setting in settings]
    if len(set(flags)) != len(flags):
        raise ValueError(f"two registered losses declare the same setting: {flags}")
    fields = [(s.flag, float, field(default=s.default, metadata={"help": s.help})) for s in settings]
    cls = make_dataclass("LossSettings", fields)
    cls.__module__ = __name__
    cls.__doc__ = "The registered losses' options as fields (command-line flags) of a setup dataclass."
    return cls


#: a dataclass with one field per ``LossSetting`` of the registered losses (``sce_temperature``, ...)
LossSettings = _loss_settings_dataclass()
