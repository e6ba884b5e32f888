"""Condenser / coCondenser configuration (Gao & Callan, 2021).

This file is shipped as remote code next to every saved checkpoint: it imports only
``transformers`` (absolutely) and nothing from ``dense_encoders``.
"""

from transformers import BertConfig

# Written into every saved ``config.json`` so that ``AutoModel.from_pretrained(folder,
# trust_remote_code=True)`` finds the encoder even when the folder was saved by a pre-training
# class (``save_pretrained`` adds the saving class itself under ``AutoModelForPreTraining``).
CONDENSER_AUTO_MAP = {
    "AutoConfig": "configuration_condenser.CondenserConfig",
    "AutoModel": "modeling_condenser.CondenserModel",
    "AutoModelForPreTraining": "modeling_condenser.CondenserForPreTraining",
}


class CondenserConfig(BertConfig):
    r"""Configuration of a Condenser: a BERT backbone plus a pre-training head.

    All :class:`transformers.BertConfig` arguments apply to the backbone (and to the head layers,
    which have the backbone's width). Condenser adds:

    Args:
        n_head_layers (`int`, defaults to 2):
            Number of freshly initialised transformer layers in the Condenser head (paper: 2).
        skip_from (`int`, defaults to 6):
            Which backbone hidden state feeds the head's token positions through the skip
            connection. ``hidden_states[0]`` is the embedding output, so ``skip_from=6`` is the
            output of layer 6 (paper: 6 early + 6 late layers of BERT-base). Must lie in
            ``[1, num_hidden_layers)``: the head needs early states that the late layers did not
            produce.
        late_mlm (`bool`, defaults to True):
            Add the backbone's own MLM loss on its last layer ("late MLM", weight 1) to the
            head's MLM loss, as in the paper's Eq. for :math:`\mathcal{L} = \mathcal{L}^{mlm} +
            \mathcal{L}^{mlm}_{c}`.

    The encoder used for retrieval (:class:`CondenserModel`) ignores the head settings.
    """

    model_type = "condenser"

    n_head_layers: int = 2
    skip_from: int = 6
    late_mlm: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if not getattr(self, "auto_map", None):
            self.auto_map = dict(CONDENSER_AUTO_MAP)
        else:
            self.auto_map = {**CONDENSER_AUTO_MAP, **self.auto_map}
        self.validate_condenser()

    def validate_condenser(self) -> None:
        """Raise a ValueError naming the bad value and the fix."""
        if not isinstance(self.n_head_layers, int) or self.n_head_layers < 1:
            raise ValueError(
                f"n_head_layers={self.n_head_layers!r}: the Condenser head needs at least one layer "
                "(the paper uses 2). Set n_head_layers >= 1."
            )
        if not isinstance(self.skip_from, int) or not 1 <= self.skip_from < self.num_hidden_layers:
            raise ValueError(
                f"skip_from={self.skip_from!r} is outside [1, num_hidden_layers={self.num_hidden_layers}): "
                "the head must read an early layer's output (hidden_states[0] is the embedding output, "
                f"hidden_states[{self.num_hidden_layers}] the last layer). Choose 1 <= skip_from <= "
                f"{self.num_hidden_layers - 1}, e.g. skip_from={max(1, self.num_hidden_layers // 2)}."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}; choose a head count that divides the width."
            )


CondenserConfig.register_for_auto_class()

__all__ = ["CondenserConfig", "CONDENSER_AUTO_MAP"]
