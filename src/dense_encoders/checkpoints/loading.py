"""Opening a checkpoint: the one loader of bi-encoders and cross-encoders, every load weight-checked.

Each caller gives "a path or a model object" (a folder or Hub id, or a model already in memory) and
gets what it works with; a folder or Hub id whose weights miss or add tensors of the model its config
declares is refused (:mod:`.weights`; ``allow_missing_weights`` turns the refusal into a logged warning):

* :func:`load_checked_model`: a transformers model (by Auto class or model class), loaded with ``from_pretrained(...,
  output_loading_info=True)`` and refused on what that reports; :func:`load_config` / :func:`load_tokenizer`: a
  folder's configuration / tokenizer (every ``from_pretrained`` of the package outside the model folders is here
  and in the converters of this package; ``tests/test_import_rules.py`` checks it);
* :func:`model_and_tokenizer`: (transformers model in eval mode, tokenizer) of a bi-encoder or a
  cross-encoder given as a path, a sentence-transformers model or a ``PreTrainedModel``, for code that
  works on the model's layers (layer-wise embeddings, infusion); :func:`cross_encoder_model_and_tokenizer`
  adds the checks of a cross-encoder (a sequence-classification head, a fast pair tokenizer);
* :func:`load_sentence_transformer` / :func:`load_cross_encoder`: a sentence-transformers
  ``SentenceTransformer`` (encoding, evaluation) / ``CrossEncoder`` (teacher scores, re-ranking).
  sentence-transformers loads the transformers model inside its own modules and hands back no loading
  report, so these two check the folder before loading it (:func:`~.weights.check_checkpoint_weights`);
  :func:`check_cross_encoder` is that check for a cross-encoder, for callers that refuse a folder before
  anything is written;
* :func:`model_fingerprint` / :func:`folder_fingerprint`: what identifies a bi-encoder's embeddings (its
  weights and module configurations), recorded in results JSONs and embedding shards and checked by ``push``.

A folder or Hub id that would run code of its own (``auto_map`` in its ``config.json``, custom
sentence-transformers modules) is refused unless ``trust_remote_code=True`` (:mod:`.trust`); our own
families load without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os

import torch
import transformers
from sentence_transformers import CrossEncoder, SentenceTransformer
from sentence_transformers.base.modules.transformer import Transformer
from sentence_transformers.sentence_transformer.modules.pooling import Pooling
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from ..vectors import POOLING_MODES, refuse_mean_pooling_of_tite
from .folder import (
    OUR_ENCODERS,
    has_sentence_transformers_files,
    is_ours,
    native_pipeline,
    refuse_folder_without_tokenizer,
)
from .trust import TRUST_FIX, UntrustedCodeError, refuse_untrusted_code, tokenizer_code
from .weights import (
    check_checkpoint_weights,
    checked_load_kwargs,
    checkpoint_tensor_names,
    from_pretrained_kwargs,
    load_report_hidden,
    refuse_loaded_differences,
)

CROSS_ENCODER_CLASS = "AutoModelForSequenceClassification"
# where our model classes' StrictLoadingMixin logs (one module per family, ``logging.getLogger(__name__)``)
_STRICT_LOADING_LOGGERS = tuple(dict.fromkeys(
    base.__module__ for encoder in OUR_ENCODERS.values() for base in encoder.__mro__
    if base.__name__ == "StrictLoadingMixin"))


class _NamedByTheCheck(logging.Filter):
    """Drops the warning of ``StrictLoadingMixin.from_pretrained`` (a partial checkpoint of ours loaded with
    ``allow_missing_weights=True``): :func:`~.weights.check_checkpoint_weights` has logged the same differences."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.funcName != "from_pretrained"


@contextlib.contextmanager
def _differences_named_once():
    """Meanwhile, a load that :func:`~.weights.check_checkpoint_weights` has checked (and, allowed, whose differences
    it has logged) names them no second time: neither transformers' load report (:func:`~.weights.load_report_hidden`)
    nor our classes' own warning, which ``from_pretrained_kwargs``' ``allow_missing_weights=True`` lets them log."""
    loggers = [logging.getLogger(name) for name in _STRICT_LOADING_LOGGERS]
    named = _NamedByTheCheck()
    for logger in loggers:
        logger.addFilter(named)
    try:
        with load_report_hidden():
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(named)


def load_checked_model(
    name_or_path: str | os.PathLike,
    *,
    auto_class: str | type = "AutoModel",
    allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
    output_loading_info: bool = False,
):
    """``<auto_class>.from_pretrained(name_or_path)``, refused (:class:`~.weights.CheckpointWeightsError`) when its
    weights miss or add tensors of the model, unless ``allow_missing_weights``.

    ``auto_class``: the name of a transformers Auto class, whose folder is refused
    (:class:`~.trust.UntrustedCodeError`) when it would run code of its own, unless ``trust_remote_code``; or a model
    class already in memory (its own code: resuming a model, continuing a pre-training). The weight files' headers
    are read first (an unreadable file is an error naming it); the differences are what ``output_loading_info``
    reports, less those the model expects (:func:`~.weights.loading_differences`). ``output_loading_info=True``
    returns ``(model, loading info)``.
    """
    name_or_path = str(name_or_path)
    if isinstance(auto_class, str):
        refuse_untrusted_code(name_or_path, trust_remote_code)
    found = checkpoint_tensor_names(name_or_path)
    if isinstance(auto_class, str):
        config = load_config(name_or_path, trust_remote_code=trust_remote_code)
        model_class, load_kwargs = getattr(transformers, auto_class), {"config": config,
                                                                       "trust_remote_code": trust_remote_code}
    else:
        config = getattr(auto_class.config_class, "model_type", "")
        model_class, load_kwargs = auto_class, {}
    with load_report_hidden():  # the differences that matter are refused (or named) below
        model, info = model_class.from_pretrained(
            name_or_path, output_loading_info=True, **load_kwargs, **checked_load_kwargs(config)
        )
    if found is not None:
        refuse_loaded_differences(model, info, found[0], allow_missing_weights=allow_missing_weights)
    return (model, info) if output_loading_info else model


def load_config(name_or_path: str | os.PathLike, *, trust_remote_code: bool = False):
    """``AutoConfig.from_pretrained(name_or_path)``: the configuration of a folder or Hub id."""
    return AutoConfig.from_pretrained(str(name_or_path), trust_remote_code=trust_remote_code)


def load_tokenizer(name_or_path: str | os.PathLike, *, trust_remote_code: bool = False):
    """``AutoTokenizer.from_pretrained(name_or_path)``: the tokenizer of a folder or Hub id. One that names code of
    its own (:func:`~.trust.tokenizer_code`) is refused without ``trust_remote_code``: transformers would load a
    stock class in its place, silently."""
    if trust_remote_code is not True and (code := tokenizer_code(name_or_path)):
        raise UntrustedCodeError(
            f"{code[0].describe()}: without your consent transformers would load a stock tokenizer in its place, "
            f"not the one {name_or_path} names. Read that code, then {TRUST_FIX}, or use a tokenizer without code "
            "of its own")
    return AutoTokenizer.from_pretrained(str(name_or_path), trust_remote_code=trust_remote_code)


def model_and_tokenizer(
    model,
    tokenizer=None,
    *,
    cross_encoder: bool,
    device: str | None = None,
    allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
):
    """(transformers model in eval mode, tokenizer) of a bi-encoder (``cross_encoder=False``: loaded with
    ``AutoModel``) or a cross-encoder (``AutoModelForSequenceClassification``).

    ``model``: a folder or Hub id (:func:`load_checked_model`, and its tokenizer), a sentence-transformers
    ``SentenceTransformer`` / ``CrossEncoder`` (its transformers model and tokenizer), or a ``PreTrainedModel``
    (then ``tokenizer`` is required). ``tokenizer`` replaces the model's own.
    """
    if isinstance(model, (str, os.PathLike)):
        name = str(model)
        auto_class = CROSS_ENCODER_CLASS if cross_encoder else "AutoModel"
        model = load_checked_model(name, auto_class=auto_class, allow_missing_weights=allow_missing_weights,
                                   trust_remote_code=trust_remote_code)
        tokenizer = tokenizer or load_tokenizer(name, trust_remote_code=trust_remote_code)
    elif isinstance(model, SentenceTransformer):
        model, tokenizer = model[0].auto_model, tokenizer or model.tokenizer
    elif isinstance(model, PreTrainedModel):
        if tokenizer is None:
            raise ValueError("a PreTrainedModel cross-encoder needs its tokenizer: pass tokenizer=" if cross_encoder
                             else "pass the dual encoder's tokenizer")
    elif hasattr(model, "model") and hasattr(model, "tokenizer"):  # sentence-transformers CrossEncoder
        model, tokenizer = model.model, tokenizer or model.tokenizer
    else:
        what = ("cross-encoder: give a path, a CrossEncoder or a PreTrainedModel with a sequence-classification head"
                if cross_encoder else "dual encoder: give a path, a SentenceTransformer or a PreTrainedModel")
        raise ValueError(f"cannot use a {type(model).__name__} as {what}")
    if device:
        model = model.to(device)
    return model.eval(), tokenizer


def cross_encoder_model_and_tokenizer(
    cross_encoder, tokenizer=None, device: str | None = None, *, allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
):
    """(sequence-classification model in eval mode, fast pair tokenizer) of a cross-encoder given as
    :func:`model_and_tokenizer` takes it; its config must declare a sequence-classification head (a folder or
    Hub id is checked by :func:`check_cross_encoder` first). For code that works on the model's layers
    (layer-wise embeddings, infusion)."""
    if isinstance(cross_encoder, (str, os.PathLike)):
        refuse_untrusted_code(cross_encoder, trust_remote_code)
        _check_classification_architecture(str(cross_encoder), trust_remote_code=trust_remote_code)
    model, tokenizer = model_and_tokenizer(cross_encoder, tokenizer, cross_encoder=True, device=device,
                                           allow_missing_weights=allow_missing_weights,
                                           trust_remote_code=trust_remote_code)
    if not type(model).__name__.endswith("ForSequenceClassification"):
        raise ValueError(
            f"{type(model).__name__} has no sequence-classification head: a cross-encoder scores (query, document) "
            "pairs with one (load it with AutoModelForSequenceClassification or CrossEncoder)"
        )
    _check_pair_tokenizer(tokenizer)
    return model, tokenizer


def _architectures(name: str, *, trust_remote_code: bool) -> list[str]:
    return load_config(name, trust_remote_code=trust_remote_code).architectures or []


def _is_classification(architectures: list[str]) -> bool:
    return any(architecture.endswith("ForSequenceClassification") for architecture in architectures)


def declares_cross_encoder(name: str, *, trust_remote_code: bool = False) -> bool:
    """Whether the folder / Hub id ``name`` is a cross-encoder: its ``config.json`` declares a
    sequence-classification architecture (e.g. ``BertForSequenceClassification``); a bi-encoder's does not.
    One that would run code of its own is refused unless ``trust_remote_code``."""
    refuse_untrusted_code(name, trust_remote_code)
    folder = os.path.expanduser(name)
    if os.path.isfile(os.path.join(folder, "modules.json")) and not os.path.isfile(os.path.join(folder, "config.json")):
        return False  # sentence-transformers' older layout: the model lives in a module folder
    return _is_classification(_architectures(name, trust_remote_code=trust_remote_code))


def _check_classification_architecture(name: str, *, trust_remote_code: bool) -> None:
    architectures = _architectures(name, trust_remote_code=trust_remote_code)
    if not _is_classification(architectures):
        raise ValueError(
            f"{name} is not a cross-encoder: its architectures {architectures or '(none)'} have no "
            "sequence-classification head (expected e.g. BertForSequenceClassification)"
        )


def check_cross_encoder(name: str, *, trust_remote_code: bool = False, allow_missing_weights: bool = False) -> None:
    """Raise unless the folder / Hub id ``name`` is a complete cross-encoder checkpoint: it runs no code of its own
    unless ``trust_remote_code`` (:func:`~.trust.refuse_untrusted_code`), its config declares a
    sequence-classification architecture and its weights hold every tensor of that model (checked without
    loading it, :func:`~.weights.check_checkpoint_weights`; ``allow_missing_weights`` lifts this last check)."""
    refuse_untrusted_code(name, trust_remote_code)
    refuse_folder_without_tokenizer(name, "cross-encoder")
    _check_classification_architecture(name, trust_remote_code=trust_remote_code)
    check_checkpoint_weights(
        name,
        auto_class=CROSS_ENCODER_CLASS,
        allow_missing_weights=allow_missing_weights,
        trust_remote_code=trust_remote_code,
    )


def load_cross_encoder(
    cross_encoder, device: str | None = None, trust_remote_code: bool = False, allow_missing_weights: bool = False
):
    """A sentence-transformers ``CrossEncoder``: as is, or opened from a folder / Hub id after
    :func:`check_cross_encoder` (a checkpoint whose weights miss or add tensors of its model is refused unless
    ``allow_missing_weights``)."""
    if isinstance(cross_encoder, CrossEncoder):
        return cross_encoder
    name = str(cross_encoder)
    check_cross_encoder(name, trust_remote_code=trust_remote_code, allow_missing_weights=allow_missing_weights)
    with load_report_hidden():
        return CrossEncoder(name, device=device, trust_remote_code=trust_remote_code)


def load_sentence_transformer(
    model,
    *,
    pooling: str | None = None,
    device: str | None = None,
    trust_remote_code: bool = False,
    allow_missing_weights: bool = False,
):
    """``model`` (a SentenceTransformer, a folder or a Hub id) as a SentenceTransformer.

    * a folder or Hub id with ``modules.json`` is loaded as its own configuration prescribes;
    * our models without sentence-transformers files use their native pipeline
      (:func:`~.folder.native_pipeline`: the vector of ``pooler_output``);
    * any other ``AutoModel`` checkpoint needs an explicit ``pooling="cls"`` or ``"mean"``.

    A folder or Hub id whose weights miss (or add) tensors of the model it declares is refused
    (:func:`~.weights.check_checkpoint_weights`) unless ``allow_missing_weights`` (whose differences the check then
    names in one warning: the load repeats none of it, :func:`_differences_named_once`); one that would run code of its
    own (``auto_map``, custom modules) unless ``trust_remote_code`` (:func:`~.trust.refuse_untrusted_code`); a
    folder without a tokenizer in one line (:func:`~.folder.refuse_folder_without_tokenizer`)."""
    if pooling is not None and pooling not in POOLING_MODES:
        raise ValueError(f"pooling={pooling!r}: choose one of {POOLING_MODES}")
    if isinstance(model, SentenceTransformer):
        if pooling is not None:
            raise ValueError(
                "pooling= is for plain transformers checkpoints; this SentenceTransformer declares its own")
        return model.to(device) if device else model
    name_or_path = str(model)
    refuse_untrusted_code(name_or_path, trust_remote_code)
    refuse_folder_without_tokenizer(name_or_path)
    report = check_checkpoint_weights(
        name_or_path, allow_missing_weights=allow_missing_weights, trust_remote_code=trust_remote_code
    )
    model_kwargs = {"trust_remote_code": trust_remote_code, **from_pretrained_kwargs(report, allow_missing_weights)}
    if pooling is None and has_sentence_transformers_files(name_or_path):
        with _differences_named_once():
            return _unused_weights_zeroed(SentenceTransformer(
                name_or_path, device=device, trust_remote_code=trust_remote_code, model_kwargs=model_kwargs
            ), report)
    config = load_config(name_or_path, trust_remote_code=trust_remote_code)
    native_pooling, similarity = native_pipeline(config) if is_ours(config) else (None, None)
    refuse_mean_pooling_of_tite(config.model_type, pooling, "pooling='cls' (or leave it unset)")
    if pooling is None:
        if native_pooling is None:
            raise ValueError(
                f"{name_or_path} has no sentence-transformers configuration (modules.json), so its pooling is "
                "unknown: pass pooling='cls' or pooling='mean' (CLI: --pooling)."
            )
        pooling = native_pooling
    remote = {"trust_remote_code": trust_remote_code}
    with _differences_named_once():
        transformer = Transformer(name_or_path, model_kwargs=model_kwargs, config_kwargs=remote,
                                  processor_kwargs=remote)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    return _unused_weights_zeroed(SentenceTransformer(modules=modules, device=device, similarity_fn_name=similarity),
                                  report)


def _unused_weights_zeroed(model: SentenceTransformer, report: dict | None) -> SentenceTransformer:
    """``model`` with the tensors its checkpoint lacks but no encoder uses (``report["unused_missing_keys"]`` of
    :func:`~.weights.check_checkpoint_weights`: a BERT ``pooler``, absent from e.g. every ``BertForMaskedLM``
    checkpoint) set to zeros. transformers initialises them at random, so every load of the folder would be another
    model to :func:`model_fingerprint`: shards of its corpus and of its queries encoded apart would refuse to be
    searched together, an encode could not be continued, a runtime's cached export would be made again each time,
    and ``push`` would refuse the folder's own results. Zeros make every load the same model; its embeddings never
    read these tensors (only ``pooler_output`` does, which reads as zeros instead of noise)."""
    unused = (report or {}).get("unused_missing_keys") or ()
    transformer = getattr(model[0], "auto_model", None) if len(model) else None
    if unused and transformer is not None:
        with torch.no_grad():
            for key in unused:
                with contextlib.suppress(AttributeError):  # a class that holds no such tensor: nothing to zero
                    transformer.get_parameter(key).zero_()
    return model


def model_fingerprint(model) -> str:
    """sha256 of a SentenceTransformer's weights and module configurations (what decides its embeddings): the
    ``model_fingerprint`` of a results JSON and the ``fingerprint`` of embedding shards and cache entries."""
    digest = hashlib.sha256()
    for index, module in enumerate(model):
        config = module.get_config_dict() if hasattr(module, "get_config_dict") else {}
        digest.update(f"{index}:{type(module).__name__}:{json.dumps(config, sort_keys=True, default=str)}".encode())
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def folder_fingerprint(folder, *, pooling: str | None = None) -> str:
    """The :func:`model_fingerprint` of the model in ``folder`` (or a Hub id) as evaluation loads it
    (:func:`load_sentence_transformer` with ``pooling``, on the CPU)."""
    return model_fingerprint(load_sentence_transformer(str(folder), pooling=pooling, device="cpu"))


def _check_pair_tokenizer(tokenizer) -> None:
    try:
        encoding = tokenizer("first text", "second text")
    except Exception as error:  # noqa: BLE001 - any failure means: no pairs
        raise ValueError(f"the cross-encoder's tokenizer cannot encode text pairs: {error}") from error
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("layer-wise embeddings need a fast tokenizer (to tell the two copies of a pair apart)")
    if 1 not in encoding.sequence_ids():
        raise ValueError("the cross-encoder's tokenizer does not build text pairs (no second sequence in its output)")


__all__ = [
    "check_cross_encoder",
    "cross_encoder_model_and_tokenizer",
    "declares_cross_encoder",
    "folder_fingerprint",
    "load_checked_model",
    "load_config",
    "load_cross_encoder",
    "load_sentence_transformer",
    "load_tokenizer",
    "model_and_tokenizer",
    "model_fingerprint",
]
