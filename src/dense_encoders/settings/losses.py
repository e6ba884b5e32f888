"""The options of the distillation losses that the command line sets (``--sce-temperature``, ...).

Each loss of :mod:`dense_encoders.trainer.losses` that takes such options finds them here under its spec name
(``settings = LOSS_OPTIONS["kl"]``); :data:`LossSettings` makes one dataclass field (and flag) of each, the
first fields of ``DistillationSetup``. The registry checks that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass


@dataclass(frozen=True)
class LossSetting:
    """A loss option settable from the command line: ``flag`` is the ``DistillationSetup`` field (and
    ``--flag``), ``option`` the keyword of the loss's constructor."""

    flag: str
    option: str
    default: float
    help: str


#: loss spec name -> the options of that loss the command line sets
LOSS_OPTIONS: dict[str, tuple[LossSetting, ...]] = {
    "sce": (LossSetting("sce_temperature", "temperature", 1.0,
                        "Temperature of 'sce' (Eq. 1 of Menon et al. 2022, In Defense of Dual-Encoders for "
                        "Neural Ranking)."),),
    "kl": (LossSetting("kl_temperature", "temperature", 1.0, "Temperature of 'kl'."),),
    "rankdistil_b": (LossSetting("rankdistil_gamma", "gamma", 0.0, "RankDistil-B threshold for negatives."),),
    "infonce": (
        LossSetting("infonce_theta", "theta", 3.0, "In-sample negatives: teacher score <= best - theta."),
        LossSetting("infonce_temperature", "temperature", 1.0, "Temperature of 'infonce'."),
    ),
}


def _loss_settings_dataclass() -> type:
    settings = [setting for options in LOSS_OPTIONS.values() for setting in options]
    flags = [setting.flag for setting in settings]
    if len(set(flags)) != len(flags):
        raise ValueError(f"two losses declare the same setting: {flags}")
    fields = [(s.flag, float, field(default=s.default, metadata={"help": s.help})) for s in settings]
    cls = make_dataclass("LossSettings", fields)
    cls.__module__ = __name__
    cls.__doc__ = "The losses' options as fields (command-line flags) of a setup dataclass."
    return cls


#: a dataclass with one field per ``LossSetting`` of the losses (``sce_temperature``, ...)
LossSettings = _loss_settings_dataclass()

__all__ = ["LOSS_OPTIONS", "LossSetting", "LossSettings"]
