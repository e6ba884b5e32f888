"""Cross-encoder-infused dual encoders ("Can Cross Encoders Produce Useful Sentence Embeddings?").

Files here are shipped as remote code."""

from .configuration_infused import InfusedDualEncoderConfig
from .modeling_infused import InfusedDualEncoderModel, mean_pool

__all__ = ["InfusedDualEncoderConfig", "InfusedDualEncoderModel", "mean_pool"]
