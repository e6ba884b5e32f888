"""Opening a cross-encoder checkpoint: the one validated loader, shared by training (teacher scores,
infusion) and evaluation (re-ranking, layer-wise analysis).

A folder or Hub id is checked before anything is built: its config must declare a sequence-classification
architecture (a cross-encoder scores (query, document) pairs with that head), and its weights must hold
every tensor of that model (:func:`~dense_encoders.hub.checkpoint_folder.check_checkpoint_weights`;
``allow_missing_weights`` lifts this second check): :func:`check_cross_encoder`. It is then opened as
a sentence-transformers ``CrossEncoder`` to score pairs (:func:`load_cross_encoder`: teacher scores,
re-ranking), or as its transformers model and tokenizer to work on its layers
(:func:`cross_encoder_model_and_tokenizer`: infusion, layer-wise embeddings).
"""

from __future__ import annotations

import os

from .checkpoint_folder import check_checkpoint_weights


def check_cross_encoder(name: str, *, trust_remote_code: bool = True, allow_missing_weights: bool = False) -> None:
    """Raise unless the folder / Hub id ``name`` is a complete cross-encoder checkpoint (module doc)."""
    from transformers import AutoConfig

    architectures = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code).architectures or []
    if not any(architecture.endswith("ForSequenceClassification") for architecture in architectures):
        raise ValueError(
            f"{name} is not a cross-encoder: its architectures {architectures or '(none)'} have no "
            "sequence-classification head (expected e.g. BertForSequenceClassification)"
        )
    check_checkpoint_weights(
        name,
        auto_class="AutoModelForSequenceClassification",
        allow_missing_weights=allow_missing_weights,
        trust_remote_code=trust_remote_code,
    )


def load_cross_encoder(
    cross_encoder, device: str | None = None, trust_remote_code: bool = True, allow_missing_weights: bool = False
):
    """A sentence-transformers ``CrossEncoder``: as is, or opened from a folder / Hub id after the checks of
    the module doc (a checkpoint whose weights miss or add tensors of its model is refused unless
    ``allow_missing_weights``)."""
    from sentence_transformers import CrossEncoder

    if isinstance(cross_encoder, CrossEncoder):
        return cross_encoder
    name = str(cross_encoder)
    check_cross_encoder(name, trust_remote_code=trust_remote_code, allow_missing_weights=allow_missing_weights)
    return CrossEncoder(name, device=device, trust_remote_code=trust_remote_code)


def cross_encoder_model_and_tokenizer(
    cross_encoder, tokenizer=None, device: str | None = None, *, allow_missing_weights: bool = False
):
    """(sequence-classification model in eval mode, fast pair tokenizer) of a folder / Hub id (checked by
    :func:`check_cross_encoder`, then opened with transformers' ``AutoModelForSequenceClassification``), a
    sentence-transformers ``CrossEncoder`` or a ``PreTrainedModel`` (then ``tokenizer`` is required). For code
    that works on the model's layers (layer-wise embeddings, infusion)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

    if isinstance(cross_encoder, (str, os.PathLike)):
        name = str(cross_encoder)
        check_cross_encoder(name, allow_missing_weights=allow_missing_weights)
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


__all__ = ["check_cross_encoder", "cross_encoder_model_and_tokenizer", "load_cross_encoder"]
