"""Model families, one folder each (configuration_<m>.py + modeling_<m>.py, shipped as remote code)."""

from .condenser import (
    CoCondenserForPreTraining,
    CondenserConfig,
    CondenserForPreTraining,
    CondenserModel,
)

__all__ = ["CondenserConfig", "CondenserModel", "CondenserForPreTraining", "CoCondenserForPreTraining"]
