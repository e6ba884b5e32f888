"""Warm starts from a BERT-family checkpoint, one way for every family: :func:`from_backbone`.

* Condenser (Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval": "initialised from BERT"):
  embeddings and encoder layers copied exactly, the MLM head too when the checkpoint has one; the Condenser head
  fresh (:func:`condenser_from_backbone`).
* TITE (beyond the paper, which trains from scratch; ``pretrain --architecture tite --backbone``, the quickstart's
  TITE student): BERT's embeddings and layer i copied exactly into TITE layer i, under TITE's names
  (:func:`tite_from_backbone`).

Only the package warm-starts, so this lives here rather than in the model folders (whose files are shipped as
remote code next to every checkpoint).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from transformers import AutoConfig, BertForMaskedLM, BertModel, PreTrainedModel
from transformers.utils import logging as transformers_logging

from ..models.condenser.configuration_condenser import CondenserConfig
from ..models.condenser.modeling_condenser import (
    BERT_LIKE_MODEL_TYPES,
    CONDENSER_ONLY_KEYS,
    CondenserForPreTraining,
)
from ..models.tite.configuration_tite import TiteConfig
from ..models.tite.modeling_tite import TiteModel

logger = logging.getLogger(__name__)


def from_backbone(model_class: type[PreTrainedModel], name_or_path: str | os.PathLike, *args,
                  **options) -> PreTrainedModel:
    """``model_class`` (a Condenser or TITE class: ``CondenserForPreTraining``, ``CoCondenserForPreTraining``,
    ``TiteModel``, ``TiteForPreTraining``) warm-started from the BERT-family checkpoint ``name_or_path``: the one
    way for every family. ``args`` / ``options`` are the family's own (:func:`condenser_from_backbone`:
    ``n_head_layers``, ``skip_from``, ``late_mlm``, config overrides; :func:`tite_from_backbone`: a ``config`` or
    config overrides)."""
    family = getattr(getattr(model_class, "config_class", None), "model_type", None)
    if family == CondenserConfig.model_type:
        return condenser_from_backbone(name_or_path, *args, model_class=model_class, **options)
    if family == TiteConfig.model_type:
        return tite_from_backbone(name_or_path, *args, model_class=model_class, **options)
    raise ValueError(f"{getattr(model_class, '__name__', model_class)} has no warm start from a backbone: give a "
                     "Condenser or TITE class (CondenserForPreTraining, CoCondenserForPreTraining, TiteModel, "
                     "TiteForPreTraining).")


def condenser_from_backbone(name_or_path: str | os.PathLike, *,
                            model_class: type[CondenserForPreTraining] = CondenserForPreTraining,
                            n_head_layers: int = 2, skip_from: int | None = None, late_mlm: bool = True,
                            **config_overrides) -> CondenserForPreTraining:
    """A Condenser (``model_class``: :class:`CondenserForPreTraining` or its coCondenser subclass) warm-started
    from any BERT-architecture checkpoint (the paper: "initialised from BERT").

    Embeddings and encoder layers are copied exactly; the MLM head too when the checkpoint has one
    (``BertForMaskedLM`` / ``BertForPreTraining`` layouts), otherwise it is freshly initialised (logged). The
    Condenser head is always fresh (BERT init). ``skip_from`` defaults to half the depth (6 for BERT-base, as in
    the paper)."""
    source_config = AutoConfig.from_pretrained(name_or_path)
    if source_config.model_type not in BERT_LIKE_MODEL_TYPES:
        raise ValueError(
            f"{name_or_path} is a {source_config.model_type!r} checkpoint; Condenser warm-starts from "
            f"BERT-architecture checkpoints (model_type in {BERT_LIKE_MODEL_TYPES}), whose parameter "
            "layout it copies. Pick a BERT-family checkpoint (e.g. bert-base-uncased, all-MiniLM-L6-v2) "
            "or build CondenserForPreTraining(CondenserConfig(...)) to train from scratch."
        )
    config_dict = {k: v for k, v in source_config.to_dict().items() if k not in CONDENSER_ONLY_KEYS}
    config_dict.pop("transformers_version", None)
    num_layers = config_dict.get("num_hidden_layers", 12)
    config = CondenserConfig(**{
        **config_dict,
        "n_head_layers": n_head_layers,
        "skip_from": skip_from if skip_from is not None else max(1, num_layers // 2),
        "late_mlm": late_mlm,
        **config_overrides,
    })
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # its generic "newly initialized" report; we log our own below
    try:
        source, info = BertForMaskedLM.from_pretrained(name_or_path, output_loading_info=True)
    finally:
        transformers_logging.set_verbosity(verbosity)
    model = model_class(config)
    model.bert.load_state_dict(source.bert.state_dict())
    if any(key.startswith("cls.predictions.transform.") for key in info.get("missing_keys", ())):
        logger.warning(
            f"{name_or_path} has no MLM prediction head: the shared MLM head of the Condenser was freshly "
            "initialised (decoder tied to the copied word embeddings)."
        )
    else:
        model.cls.load_state_dict(source.cls.state_dict())
    model.tie_weights()
    model.config.name_or_path = str(name_or_path)
    return model


def tite_from_backbone(name_or_path: str | Path, config: TiteConfig | None = None, *,
                       model_class: type[PreTrainedModel] = TiteModel, **config_overrides) -> PreTrainedModel:
    """A TITE warm-started from a BERT-family checkpoint (beyond the paper, which trains from scratch): a
    ``model_class`` (:class:`TiteModel`, or :class:`TiteForPreTraining`, whose decoders and heads are fresh).

    Embeddings and layer i are copied exactly into TITE layer i, so the TITE config must have the
    backbone's depth, widths, head counts and feed-forward sizes (pooling is free: e.g. preset
    ``minilm-l6-3-all`` for 6-layer MiniLMs). Learned absolute positions are kept when the config
    uses ``position_embedding_type="absolute"`` (rotary configs drop them, logged); without
    token types (``type_vocab_size=0``) BERT's type-0 vector is folded into the word embeddings,
    which is exact. Without ``config``, one is derived from the backbone (no pooling, absolute
    positions) and ``config_overrides`` apply.
    """
    source_config = AutoConfig.from_pretrained(name_or_path)
    if source_config.model_type != "bert":
        raise ValueError(
            f"{name_or_path} is a {source_config.model_type!r} checkpoint; TITE warm-starts from BERT-architecture "
            "checkpoints (model_type 'bert'), whose layers it copies one to one."
        )
    config = backbone_config(source_config, name_or_path, config, **config_overrides)

    class BertBackbone(BertModel):  # what a warm start drops is expected: no load report for it
        _keys_to_ignore_on_load_unexpected = [r"(^|\.)pooler\.", r"^cls\."]

    bert = BertBackbone.from_pretrained(name_or_path, add_pooling_layer=False)
    state = bert_to_tite_state_dict(bert.state_dict())
    positions = state.pop("embeddings.position_embeddings.weight")
    token_types = state.pop("embeddings.token_type_embeddings.weight")
    if config.absolute_positions:
        state["embeddings.position_embeddings.weight"] = positions[: config.max_position_embeddings]
    else:
        logger.warning(
            f"{name_or_path}'s learned absolute positions are not used: this TITE config uses rotary positions, "
            "which the copied layers have never seen. Set position_embedding_type='absolute' to keep them."
        )
    if config.type_vocab_size:
        state["embeddings.token_type_embeddings.weight"] = token_types[: config.type_vocab_size]
    else:  # every token is type 0 in single-text encoding: fold that vector into the word table
        state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"] + token_types[0]
    encoder = TiteModel(config)
    encoder.load_state_dict(state, strict=True)
    encoder.config.name_or_path = str(name_or_path)
    if isinstance(encoder, model_class):
        return encoder
    model = model_class(encoder.config)
    model.tite.load_state_dict(encoder.state_dict())
    model.tie_weights()
    return model


def bert_to_tite_state_dict(bert_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a ``BertModel`` state dict (``bert.`` prefix optional) to :class:`TiteModel`'s names.

    Layers map one to one (BERT layer i -> TITE layer i); pooler and MLM-head weights are dropped.
    """
    renames = (
        ("attention.self.query.", "attention.query."),
        ("attention.self.key.", "attention.key."),
        ("attention.self.value.", "attention.value."),
        ("attention.output.dense.", "attention.dense."),
        ("attention.output.LayerNorm.", "attention.LayerNorm."),
        ("intermediate.dense.", "intermediate."),
        ("output.dense.", "output."),
        ("output.LayerNorm.", "LayerNorm."),
    )
    mapped = {}
    for name, tensor in bert_state.items():
        name = name.removeprefix("bert.")
        if name.startswith("encoder.layer."):
            name = "layers." + name[len("encoder.layer."):]
            for old, new in renames:
                if old in name:
                    name = name.replace(old, new, 1)
                    break
        elif not name.startswith("embeddings.") or name.endswith("position_ids") or name.endswith("token_type_ids"):
            continue
        mapped[name] = tensor
    return mapped


def backbone_config(source_config, name_or_path, config: TiteConfig | None = None, **config_overrides) -> TiteConfig:
    """The TITE config of a warm start from the BERT config ``source_config`` (see
    :func:`tite_from_backbone`): ``config`` checked against the backbone's shape, or, without it, one
    derived from the backbone (no pooling, absolute positions) with ``config_overrides`` applied."""
    if config is None:
        derived = dict(
            vocab_size=source_config.vocab_size,
            num_hidden_layers=source_config.num_hidden_layers,
            hidden_sizes=source_config.hidden_size,
            num_attention_heads=source_config.num_attention_heads,
            intermediate_sizes=source_config.intermediate_size,
            kernel_sizes=None,
            max_position_embeddings=source_config.max_position_embeddings,
            position_embedding_type="absolute",
            type_vocab_size=source_config.type_vocab_size,
            hidden_act=source_config.hidden_act,
            layer_norm_eps=source_config.layer_norm_eps,
            pad_token_id=source_config.pad_token_id,
        )
        config = TiteConfig(**{**derived, **config_overrides})
    elif config_overrides:
        raise ValueError("Pass either a config or config overrides to tite_from_backbone, not both.")
    expected = {
        "num_hidden_layers": (config.num_hidden_layers, source_config.num_hidden_layers),
        "hidden_sizes": (set(config.hidden_sizes), {source_config.hidden_size}),
        "num_attention_heads": (set(config.num_attention_heads), {source_config.num_attention_heads}),
        "intermediate_sizes": (set(config.intermediate_sizes), {source_config.intermediate_size}),
        "vocab_size": (config.vocab_size, source_config.vocab_size),
        "hidden_act": (config.hidden_act, source_config.hidden_act),
    }
    mismatched = {name: values for name, values in expected.items() if values[0] != values[1]}
    if mismatched:
        details = "; ".join(f"{name}: TITE {ours} vs backbone {theirs}" for name, (ours, theirs) in mismatched.items())
        raise ValueError(
            f"The TITE config does not have the shape of {name_or_path} ({details}). Warm starts copy layers one to "
            "one: give a config with the backbone's depth and widths (only pooling may differ), or omit it."
        )
    if config.absolute_positions and config.max_position_embeddings > source_config.max_position_embeddings:
        raise ValueError(
            f"max_position_embeddings={config.max_position_embeddings} exceeds the backbone's "
            f"{source_config.max_position_embeddings} learned positions; lower it."
        )
    return config


__all__ = [
    "backbone_config", "bert_to_tite_state_dict", "condenser_from_backbone", "from_backbone", "tite_from_backbone",
]
