"""Condenser / coCondenser (Gao & Callan 2021, 2022). Files here are shipped as remote code."""

import importlib

_EXPORTS = {
    "CondenserConfig": ".configuration_condenser",
    "CondenserModel": ".modeling_condenser",
    "CondenserPreTrainedModel": ".modeling_condenser",
    "CondenserForPreTraining": ".modeling_condenser",
    "CoCondenserForPreTraining": ".modeling_condenser",
    "CondenserForPreTrainingOutput": ".modeling_condenser",
    "gather_with_local_grad": ".modeling_condenser",
    "span_contrastive_loss": ".modeling_condenser",
}


def __getattr__(name: str):
    """Each name is imported on first access: importing the package (e.g. for its presets) loads no model code."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_EXPORTS})


__all__ = list(_EXPORTS)
