"""TITE (Schlatt et al., SIGIR 2025): token-independent text encoder. Files here are shipped as remote code."""

from .configuration_tite import TiteConfig, pooled_length
from .modeling_tite import TiteForPreTraining, TiteModel, TitePreTrainedModel, bert_to_tite_state_dict
from .presets import TINY_PRESETS, TITE_PRESETS, tite_preset

__all__ = [
    "TiteConfig",
    "TiteModel",
    "TiteForPreTraining",
    "TitePreTrainedModel",
    "bert_to_tite_state_dict",
    "pooled_length",
    "tite_preset",
    "TITE_PRESETS",
    "TINY_PRESETS",
]
