"""Configuration of a cross-encoder-infused dual encoder ("Can Cross Encoders Produce Useful Sentence
Embeddings?").

Shipped as remote code next to every saved checkpoint: it imports only ``transformers``.
"""

from transformers import BertConfig

INFUSED_AUTO_MAP = {
    "AutoConfig": "configuration_infused.InfusedDualEncoderConfig",
    "AutoModel": "modeling_infused.InfusedDualEncoderModel",
}


class InfusedDualEncoderConfig(BertConfig):
    r"""A BERT-family dual encoder whose embeddings and first layers come from a cross-encoder.

    All :class:`transformers.BertConfig` arguments describe the encoder (its width, heads, vocabulary
    are the cross-encoder's). The encoder has ``num_copied_layers + num_new_layers`` layers:

    Args:
        num_copied_layers (`int`, defaults to 1):
            Layers copied from the cross-encoder (its layers ``0 .. N-1``), after its embeddings.
            The paper's DE-2-CE copies 1; DE-k-CE copies k and adds none.
        num_new_layers (`int`, defaults to 1):
            Freshly initialised layers on top (DE-2-CE: 1).
        infused_from (`str`, *optional*):
            The cross-encoder the copied weights came from (``None`` for DE-k-Rand, random init).
        pooling (`str`, defaults to ``"mean"``):
            Mean over the non-padding tokens (as in the paper), or ``"cls"``.
    """

    model_type = "infused_dual_encoder"

    num_copied_layers: int = 1
    num_new_layers: int = 1
    infused_from: str | None = None
    pooling: str = "mean"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.auto_map = {**INFUSED_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}
        self.num_hidden_layers = int(self.num_copied_layers) + int(self.num_new_layers)
        self.validate_infused()

    def validate_infused(self) -> None:
        for name in ("num_copied_layers", "num_new_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r}: must be a non-negative integer")
        if self.num_copied_layers + self.num_new_layers == 0:
            raise ValueError(
                "num_copied_layers + num_new_layers = 0: the dual encoder needs at least one layer "
                "(DE-2-CE: num_copied_layers=1, num_new_layers=1)"
            )
        if self.pooling not in ("mean", "cls"):
            raise ValueError(f"pooling={self.pooling!r}: choose 'mean' (the paper's) or 'cls'")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )


InfusedDualEncoderConfig.register_for_auto_class()

__all__ = ["INFUSED_AUTO_MAP", "InfusedDualEncoderConfig"]
