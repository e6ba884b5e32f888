"""Condenser / coCondenser (Gao & Callan 2021, 2022). Files here are shipped as remote code."""

from .configuration_condenser import CondenserConfig
from .modeling_condenser import (
    CoCondenserForPreTraining,
    CondenserForPreTraining,
    CondenserForPreTrainingOutput,
    CondenserModel,
    CondenserPreTrainedModel,
    gather_with_local_grad,
    span_contrastive_loss,
)

__all__ = [
    "CondenserConfig",
    "CondenserModel",
    "CondenserPreTrainedModel",
    "CondenserForPreTraining",
    "CoCondenserForPreTraining",
    "CondenserForPreTrainingOutput",
    "gather_with_local_grad",
    "span_contrastive_loss",
]
