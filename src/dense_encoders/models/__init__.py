"""Model families, one folder each (configuration_<m>.py + modeling_<m>.py, shipped as remote code)."""

import importlib

_EXPORTS = {
    "CondenserConfig": ".condenser",
    "CondenserModel": ".condenser",
    "CondenserForPreTraining": ".condenser",
    "CoCondenserForPreTraining": ".condenser",
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
