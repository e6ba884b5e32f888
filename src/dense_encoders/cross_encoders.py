"""Cross-encoders as embedders (seed 002): layer-wise embeddings and infused dual encoders.

Layer-wise embeddings (seed 002, Sec. 3.1): "to embed a single sentence, we simply pair it with
itself ... we mean pool over the tokens of the sentence for each layer, excluding padding and
separator tokens". The sentence occurs twice in the pair; by default both copies are pooled
(``copies="both"``: every token of the pair except padding and special tokens), ``copies="first"``
pools the first copy only (the other reading of "the tokens of the sentence"). Layer 0 is the
embedding output, layer i the output of encoder layer i.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .models.infused import InfusedDualEncoderModel


def load_cross_encoder_model(cross_encoder, tokenizer=None, device: str | None = None):
    """(sequence-classification model, tokenizer) from a path / Hub id, a sentence-transformers
    ``CrossEncoder`` or a ``PreTrainedModel`` (then ``tokenizer`` is required)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

    if isinstance(cross_encoder, (str, Path)):
        name = str(cross_encoder)
        config = AutoConfig.from_pretrained(name)
        architectures = config.architectures or []
        if not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise ValueError(
                f"{name} is not a cross-encoder: its architectures {architectures or '(none)'} have no "
                "sequence-classification head (expected e.g. BertForSequenceClassification)"
            )
        model = AutoModelForSequenceClassification.from_pretrained(name)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(name)
    elif isinstance(cross_encoder, PreTrainedModel):
        model = cross_encoder
        if tokenizer is None:
            raise ValueError("a PreTrainedModel cross-encoder needs its tokenizer: pass tokenizer=")
    elif hasattr(cross_encoder, "model") and hasattr(cross_encoder, "tokenizer"):  # sentence-transformers CrossEncoder
        model, tokenizer = cross_encoder.model, tokenizer or cross_encoder.tokenizer
    else:
        raise ValueError(f"cannot use a {type(cross_encoder).__name__} as cross-encoder: give a path, a CrossEncoder "
                         "or a PreTrainedModel with a sequence-classification head")
    if not type(model).__name__.endswith("ForSequenceClassification"):
        raise ValueError(
            f"{type(model).__name__} has no sequence-classification head: a cross-encoder scores (query, document) "
            "pairs with one (load it with AutoModelForSequenceClassification or CrossEncoder)"
        )
    _check_pair_tokenizer(tokenizer)
    if device:
        model = model.to(device)
    return model.eval(), tokenizer


def _check_pair_tokenizer(tokenizer) -> None:
    try:
        encoding = tokenizer("first text", "second text")
    except Exception as error:  # noqa: BLE001 - any failure means: no pairs
        raise ValueError(f"the cross-encoder's tokenizer cannot encode text pairs: {error}") from error
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("layer-wise embeddings need a fast tokenizer (to tell the two copies of a pair apart)")
    if 1 not in encoding.sequence_ids():
        raise ValueError("the cross-encoder's tokenizer does not build text pairs (no second sequence in its output)")


def _resolve_layers(layers: Sequence[int] | None, num_layers: int) -> list[int]:
    if layers is None:
        return list(range(num_layers + 1))
    resolved = []
    for layer in layers:
        if not isinstance(layer, (int, np.integer)) or not -(num_layers + 1) <= layer <= num_layers:
            raise ValueError(
                f"layer {layer!r} is out of range: this model has layers 0 (embeddings) .. {num_layers}"
            )
        resolved.append(int(layer) % (num_layers + 1))
    return resolved


@torch.no_grad()
def layerwise_embeddings(
    cross_encoder,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    *,
    tokenizer=None,
    copies: str = "both",
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | None = None,
    show_progress_bar: bool = False,
) -> dict[int, np.ndarray]:
    """``{layer: [len(texts), hidden]}``: each text paired with itself, each layer mean-pooled over
    the text's tokens without padding and special/separator tokens (module doc; seed 002 Sec. 3.1).

    ``max_length`` bounds the PAIR (default: the tokenizer's limit), so each copy gets about half.
    """
    if copies not in ("both", "first"):
        raise ValueError(f"copies={copies!r}: choose 'both' (every token of the pair) or 'first'")
    if not texts:
        raise ValueError("no texts to embed")
    model, tokenizer = load_cross_encoder_model(cross_encoder, tokenizer, device)
    num_layers = model.config.num_hidden_layers
    layers = _resolve_layers(layers, num_layers)
    base = model.base_model
    device = next(model.parameters()).device
    order = np.argsort([-len(t) for t in texts], kind="stable")  # length-sorted batches
    outputs = {layer: np.zeros((len(texts), model.config.hidden_size), dtype=np.float32) for layer in layers}
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="layer-wise CE embeddings", disable=not show_progress_bar):
        indices = order[start : start + batch_size]
        batch_texts = [texts[i] for i in indices]
        batch = tokenizer(
            batch_texts, batch_texts, padding=True, truncation=True, max_length=max_length,
            return_tensors="pt", return_special_tokens_mask=True,
        )
        keep = batch.pop("special_tokens_mask").eq(0) & batch["attention_mask"].bool()
        if copies == "first":
            sequence_ids = torch.tensor(
                [[s == 0 for s in batch.sequence_ids(row)] for row in range(len(batch_texts))], dtype=torch.bool
            )
            keep &= sequence_ids
        hidden = base(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True).hidden_states
        weights = keep.to(device).unsqueeze(-1).float()
        counts = weights.sum(1).clamp(min=1.0)
        for layer in layers:
            pooled = (hidden[layer].float() * weights).sum(1) / counts
            outputs[layer][indices] = pooled.cpu().numpy()
    return outputs


@torch.no_grad()
def dual_encoder_layerwise_embeddings(
    model,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    *,
    tokenizer=None,
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | None = None,
    show_progress_bar: bool = False,
) -> dict[int, np.ndarray]:
    """The same for a dual encoder (path, SentenceTransformer or PreTrainedModel): each text alone,
    each layer mean-pooled over its tokens without padding and special tokens, for an equal comparison."""
    from transformers import AutoModel, AutoTokenizer, PreTrainedModel

    if isinstance(model, (str, Path)):
        name = str(model)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(name, trust_remote_code=True)
        model = AutoModel.from_pretrained(name, trust_remote_code=True)
    elif not isinstance(model, PreTrainedModel) and hasattr(model, "tokenizer"):  # SentenceTransformer
        tokenizer = tokenizer or model.tokenizer
        model = model[0].auto_model
    if tokenizer is None:
        raise ValueError("pass the dual encoder's tokenizer")
    if not texts:
        raise ValueError("no texts to embed")
    model = (model.to(device) if device else model).eval()
    layers = _resolve_layers(layers, model.config.num_hidden_layers)
    device = next(model.parameters()).device
    order = np.argsort([-len(t) for t in texts], kind="stable")
    outputs = {layer: np.zeros((len(texts), model.config.hidden_size), dtype=np.float32) for layer in layers}
    for start in tqdm(range(0, len(texts), batch_size), desc="layer-wise DE embeddings", disable=not show_progress_bar):
        indices = order[start : start + batch_size]
        batch = tokenizer([texts[i] for i in indices], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt", return_special_tokens_mask=True)
        keep = batch.pop("special_tokens_mask").eq(0) & batch["attention_mask"].bool()
        hidden = model(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True).hidden_states
        weights = keep.to(device).unsqueeze(-1).float()
        counts = weights.sum(1).clamp(min=1.0)
        for layer in layers:
            outputs[layer][indices] = ((hidden[layer].float() * weights).sum(1) / counts).cpu().numpy()
    return outputs


def infuse(
    cross_encoder,
    *,
    num_copied_layers: int = 1,
    num_new_layers: int = 1,
    random_init: bool = False,
    pooling: str = "mean",
    tokenizer=None,
    seed: int | None = 0,
):
    """DE-(N+M)-CE (or -Rand) from a cross-encoder: ``(InfusedDualEncoderModel, tokenizer)``."""
    model, tokenizer = load_cross_encoder_model(cross_encoder, tokenizer)
    name = str(cross_encoder) if isinstance(cross_encoder, (str, Path)) else getattr(model, "name_or_path", None)
    if seed is not None:
        torch.manual_seed(seed)
    dual = InfusedDualEncoderModel.from_cross_encoder(
        model, num_copied_layers=num_copied_layers, num_new_layers=num_new_layers, random_init=random_init,
        pooling=pooling, infused_from=name or None,
    )
    return dual, tokenizer


def save_dual_encoder(model, tokenizer, folder: str | Path, similarity: str = "cosine") -> Path:
    """Weights, remote code, tokenizer and sentence-transformers files (pooling from the config)."""
    from .checkpoint_folder import native_pooling, write_sentence_transformers_files

    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling=native_pooling(model.config), similarity=similarity)
    return folder


__all__ = [
    "dual_encoder_layerwise_embeddings",
    "infuse",
    "layerwise_embeddings",
    "load_cross_encoder_model",
    "save_dual_encoder",
]
