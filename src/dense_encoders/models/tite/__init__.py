"""TITE (Schlatt et al., SIGIR 2025): token-independent text encoder. Files here are shipped as remote code."""

from .configuration_tite import TiteConfig, pooled_length
from .presets import TINY_PRESETS, TITE_PRESETS, tite_preset

__all__ = ["TiteConfig", "pooled_length", "tite_preset", "TITE_PRESETS", "TINY_PRESETS"]
