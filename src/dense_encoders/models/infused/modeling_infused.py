"""Cross-encoder-infused dual encoder ("Can Cross Encoders Produce Useful Sentence Embeddings?", Sec. 3.2 and
Fig. 2).

A BERT-family encoder whose embedding layer and first ``num_copied_layers`` layers are copied from
a cross-encoder, topped by ``num_new_layers`` freshly initialised layers (DE-2-CE: 1 + 1), mean
pooled over the text's tokens. Shipped as remote code: imports only ``torch`` / ``transformers``.
"""

from __future__ import annotations

import torch
from transformers import BertModel, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_infused import InfusedDualEncoderConfig
from .sentence_transformers_infused import SentenceTransformersFilesMixin, StrictLoadingMixin

# model types whose encoder is transformers' BertModel layout (embeddings + encoder.layer[i])
BERT_FAMILY = ("bert",)
# dense-encoders release that wrote this file
DENSE_ENCODERS_CODE_VERSION = "0.1.0"


def mean_pool(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``states`` ``[batch, tokens, dim]`` over the positions where ``attention_mask`` ``[batch, tokens]``
    is 1 (no padding): the pooling of this model, and the mean pooling of every other encoder of the package
    (the trainer and the evaluation import it from here, as remote code can import nothing of theirs)."""
    if states.shape[1] != attention_mask.shape[1]:
        raise ValueError(f"mean pooling needs one state per token: {states.shape[1]} states for "
                         f"{attention_mask.shape[1]} tokens (a model that returns one vector per text is pooled "
                         "already: use its pooler_output)")
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class InfusedDualEncoderModel(StrictLoadingMixin, SentenceTransformersFilesMixin, BertModel):
    """The infused dual encoder; ``pooler_output`` is the mean over non-padding tokens (as in the paper)."""

    config_class = InfusedDualEncoderConfig
    config: InfusedDualEncoderConfig
    _keys_to_ignore_on_load_unexpected = [r"^pooler\.", r"^classifier\.", r"^bert\.pooler\."]

    @classmethod
    def native_sentence_transformers_pipeline(cls, config) -> tuple[str, str]:
        """``config.pooling`` (mean in the paper) with cosine similarity, as trained with
        sentence-transformers' MultipleNegativesRankingLoss."""
        return config.pooling, "cosine"

    def __init__(self, config: InfusedDualEncoderConfig, add_pooling_layer: bool = False):
        if add_pooling_layer:
            raise ValueError("InfusedDualEncoderModel pools by config.pooling and has no pooler weights")
        super().__init__(config, add_pooling_layer=False)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode a batch; ``pooler_output`` ``(batch_size, hidden_size)`` is pooled by ``config.pooling``.

        As ``BertModel``: ``return_dict`` and the ``output_*`` flags default to the config's; ``return_dict=False``
        gives ``to_tuple()`` of the output.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is not None and (reference.dim() < 2 or reference.shape[1] == 0):
            raise ValueError(f"Empty input (shape {tuple(reference.shape)}): every text needs at least one token.")
        if attention_mask is None:
            attention_mask = torch.ones(reference.shape[:2], dtype=torch.long, device=reference.device)
        outputs = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        states = outputs.last_hidden_state
        pooled = mean_pool(states, attention_mask) if self.config.pooling == "mean" else states[:, 0]
        output = BaseModelOutputWithPooling(
            last_hidden_state=states,
            pooler_output=pooled,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    @classmethod
    def from_cross_encoder(
        cls,
        cross_encoder: PreTrainedModel,
        num_copied_layers: int = 1,
        num_new_layers: int = 1,
        random_init: bool = False,
        pooling: str = "mean",
        infused_from: str | None = None,
    ) -> InfusedDualEncoderModel:
        """DE-(N+M)-CE from a sequence-classification cross-encoder: its embeddings and layers
        ``0 .. N-1`` copied exactly, ``M`` new layers. ``random_init=True`` gives DE-(N+M)-Rand (same
        shape, nothing copied)."""
        base = getattr(cross_encoder, "base_model", None)
        if base is None or base is cross_encoder or not hasattr(cross_encoder.config, "num_labels"):
            raise ValueError(
                f"{type(cross_encoder).__name__} is not a cross-encoder with a sequence-classification head "
                "(load one with AutoModelForSequenceClassification or sentence-transformers' CrossEncoder)"
            )
        model_type = cross_encoder.config.model_type
        if model_type not in BERT_FAMILY or not hasattr(base, "encoder") or not hasattr(base.encoder, "layer"):
            raise ValueError(f"infusion copies BERT-family layers; a {model_type!r} cross-encoder is not supported")
        available = len(base.encoder.layer)
        if num_copied_layers > available:
            raise ValueError(
                f"num_copied_layers={num_copied_layers} but the cross-encoder has {available} layers"
            )
        settings = cross_encoder.config.to_dict()
        for key in ("architectures", "auto_map", "id2label", "label2id", "num_labels", "problem_type",
                    "model_type", "num_hidden_layers", "transformers_version", "_name_or_path", "dtype"):
            settings.pop(key, None)
        config = cls.config_class(
            **settings,
            num_copied_layers=num_copied_layers,
            num_new_layers=num_new_layers,
            pooling=pooling,
            infused_from=None if random_init else infused_from,
        )
        config._attn_implementation = cross_encoder.config._attn_implementation
        model = cls(config)
        if not random_init:
            with torch.no_grad():
                model.embeddings.load_state_dict(base.embeddings.state_dict())
                for index in range(num_copied_layers):
                    model.encoder.layer[index].load_state_dict(base.encoder.layer[index].state_dict())
        return model.to(dtype=next(cross_encoder.parameters()).dtype)


InfusedDualEncoderModel.register_for_auto_class("AutoModel")

__all__ = ["InfusedDualEncoderModel", "mean_pool"]
