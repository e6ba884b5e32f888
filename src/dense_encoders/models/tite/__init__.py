"""TITE (Schlatt et al., SIGIR 2025): token-independent text encoder. Files here are shipped as remote code."""

import importlib

_EXPORTS = {
    "TiteConfig": ".configuration_tite",
    "pooled_length": ".configuration_tite",
    "TiteModel": ".modeling_tite",
    "TiteForPreTraining": ".modeling_tite",
    "TitePreTrainedModel": ".modeling_tite",
    "tite_preset": ".presets",
    "TITE_PRESETS": ".presets",
    "TINY_PRESETS": ".presets",
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
