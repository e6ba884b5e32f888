# Copied from dense_encoders.models.condenser.sentence_transformers_condenser: keep the copies identical
# (tests/test_checkpoint_folder.py checks it; each model folder ships its own copy as remote code).
"""The sentence-transformers module files of a checkpoint folder, written as plain JSON; and strict loading.

``save_pretrained`` of every model family calls :func:`write_sentence_transformers_files`, so a folder
saved anywhere (with its tokenizer) loads in ``SentenceTransformer`` with the pooling that reproduces
the model's ``pooler_output``. Without these files sentence-transformers falls back to mean pooling,
which silently cost accuracy for users of the reference Condenser checkpoints.

The layout is the one every sentence-transformers release from 3.4 to 6.x loads (the format most Hub models
carry): a ``Transformer`` module saved in the folder's root, ``Pooling`` in ``1_Pooling`` and, for a model trained
with cosine similarity, ``Normalize`` in ``2_Normalize``, named by their ``sentence_transformers.models`` paths,
with the 2.x-format ``sentence_bert_config.json`` and ``1_Pooling/config.json`` (sentence-transformers 6 reads
them as its own). Per-side token limits (``query_length`` / ``document_length``) exist only in
sentence-transformers 6: a folder that sets them needs it. Nothing here imports sentence-transformers or the
dense-encoders package: the file is shipped as remote code next to the modeling file.

:class:`StrictLoadingMixin` makes ``from_pretrained`` refuse a checkpoint that lacks weights of the model
(transformers would initialise them at random and only print a load report): every number computed from
such a model is meaningless, so the caller must ask for it with ``allow_missing_weights=True``. What counts as
missing, and the message, are :func:`loading_differences` and :func:`weights_mismatch`, which dense-encoders' own
loader applies to every model it loads.
"""

from __future__ import annotations

import json
import logging
import os
from importlib import metadata

import torch
import transformers

# The oldest sentence-transformers release that loads these files (and the models' remote code); recorded as the
# writing version when sentence-transformers itself is not installed where the folder is saved.
SENTENCE_TRANSFORMERS_LAYOUT_VERSION = "3.4.0"
# The module paths of sentence-transformers 2.x to 6.x (6 maps them to its own modules)
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"
POOLING_MODULE = "sentence_transformers.models.Pooling"
NORMALIZE_MODULE = "sentence_transformers.models.Normalize"
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
POOLING_MODES = ("cls", "mean")
LENGTH_KEYS = ("query_length", "document_length")
SIMILARITIES = ("dot", "cosine")

logger = logging.getLogger(__name__)


def _installed_version(distribution: str, fallback: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return fallback


def sentence_transformers_files(
    embedding_dimension: int,
    pooling: str,
    similarity: str,
    prompts: dict[str, str] | None = None,
    normalize: bool = False,
    lengths: dict[str, int] | None = None,
) -> dict[str, str]:
    """``{relative path: text}`` of the pipeline Transformer -> Pooling(``pooling``) [-> Normalize].

    ``normalize`` appends ``Normalize`` (unit vectors, as models trained with cosine similarity ship);
    it needs ``similarity="cosine"``. ``prompts`` maps ``"query"`` / ``"document"`` to the text
    prepended on that side (empty by default, as sentence-transformers writes them). ``lengths`` maps
    ``"query_length"`` / ``"document_length"`` to the token limit of that side (prompt included), which
    sentence-transformers applies in ``encode_query`` / ``encode_document``.
    """
    if pooling not in POOLING_MODES:
        raise ValueError(f"pooling={pooling!r}: choose one of {POOLING_MODES}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity={similarity!r}: choose one of {SIMILARITIES}")
    if normalize and similarity != "cosine":
        raise ValueError("normalize=True makes unit vectors: it goes with similarity='cosine', not dot product")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": TRANSFORMER_MODULE},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING_MODULE},
    ]
    files = {
        "1_Pooling/config.json": json.dumps(
            {
                "word_embedding_dimension": int(embedding_dimension),
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": False,
                "include_prompt": True,
            },
            indent=2,
        ),
    }
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": NORMALIZE_MODULE})
        files["2_Normalize/config.json"] = json.dumps({}, indent=4)
    files["modules.json"] = json.dumps(modules, indent=2)
    files["sentence_bert_config.json"] = json.dumps(
        {
            "do_lower_case": False,
            # sentence-transformers 6 only: a folder with per-side limits needs it
            **{key: int(value) for key, value in (lengths or {}).items() if key in LENGTH_KEYS and value},
        },
        indent=4,
    )
    versions = {
        "pytorch": torch.__version__,
        "sentence_transformers": _installed_version("sentence-transformers", SENTENCE_TRANSFORMERS_LAYOUT_VERSION),
        "transformers": transformers.__version__,
    }
    files["config_sentence_transformers.json"] = json.dumps(
        {
            "__version__": versions,
            "default_prompt_name": None,
            "model_type": "SentenceTransformer",
            "prompts": {"query": "", "document": "", **(prompts or {})},
            "similarity_fn_name": similarity,
        },
        indent=2,
        sort_keys=True,
    )
    return files


def read_saved_settings(folder: str | os.PathLike) -> dict:
    """``{"pooling", "prompts", "similarity", "normalize", "lengths"}`` from a folder's sentence-transformers files
    (what a training run or a conversion chose), so saving the model again, into that folder or another, keeps them;
    ``{}`` without the files."""
    path = os.path.join(folder, "config_sentence_transformers.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        saved = json.load(handle)
    settings = {"normalize": False}
    modules_path = os.path.join(folder, "modules.json")
    if os.path.isfile(modules_path):
        with open(modules_path, encoding="utf-8") as handle:
            modules = json.load(handle)
        settings["normalize"] = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
        pooling = next((m for m in modules if str(m.get("type", "")).endswith(".Pooling")), None)
        pooling_path = os.path.join(folder, str(pooling.get("path") or ""), "config.json") if pooling else ""
        if pooling and os.path.isfile(pooling_path):
            with open(pooling_path, encoding="utf-8") as handle:
                mode = _pooling_mode(json.load(handle))
            if mode is not None:
                settings["pooling"] = mode
    if isinstance(saved.get("prompts"), dict):
        settings["prompts"] = dict(saved["prompts"])
    if saved.get("similarity_fn_name") in SIMILARITIES:
        settings["similarity"] = saved["similarity_fn_name"]
    transformer_path = os.path.join(folder, "sentence_bert_config.json")
    if os.path.isfile(transformer_path):
        with open(transformer_path, encoding="utf-8") as handle:
            transformer = json.load(handle)
        settings["lengths"] = {key: transformer[key] for key in LENGTH_KEYS if transformer.get(key)}
    return settings


def _pooling_mode(config: dict) -> str | None:
    """The pooling of a ``Pooling`` config, in sentence-transformers 6's key or the older flags; None for others."""
    if config.get("pooling_mode") in POOLING_MODES:
        return config["pooling_mode"]
    flags = [mode for mode, key in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"))
             if config.get(key)]
    return flags[0] if len(flags) == 1 else None


def loaded_settings(name_or_path, subfolder: str = "", revision: str | None = None) -> dict:
    """:func:`read_saved_settings` of the folder a model is loaded from: a local folder, or a Hub id whose files are
    in the local cache already (nothing is downloaded here); ``{}`` otherwise."""
    folder = os.path.join(str(name_or_path), subfolder) if subfolder else str(name_or_path)
    if os.path.isdir(folder):
        return read_saved_settings(folder)
    try:
        from huggingface_hub import try_to_load_from_cache

        name = "config_sentence_transformers.json"
        relative = f"{subfolder}/{name}" if subfolder else name
        cached = try_to_load_from_cache(str(name_or_path), relative, revision=revision)
    except Exception:  # noqa: BLE001 - not a Hub id either: nothing to carry
        return {}
    return read_saved_settings(os.path.dirname(cached)) if isinstance(cached, str) else {}


def write_sentence_transformers_files(
    folder: str | os.PathLike,
    embedding_dimension: int,
    pooling: str,
    similarity: str,
    prompts: dict[str, str] | None = None,
    normalize: bool = False,
    lengths: dict[str, int] | None = None,
) -> list[str]:
    """Write :func:`sentence_transformers_files` into ``folder``; returns the written paths.

    A module folder of an earlier pipeline that this one does not have (``2_Normalize`` after a switch
    to dot product) is removed, so the folder never describes two pipelines.
    """
    files = sentence_transformers_files(embedding_dimension, pooling, similarity, prompts, normalize, lengths)
    stale = os.path.join(folder, "2_Normalize", "config.json")
    if "2_Normalize/config.json" not in files and os.path.isfile(stale):
        os.remove(stale)
        if not os.listdir(os.path.dirname(stale)):
            os.rmdir(os.path.dirname(stale))
    written = []
    for relative, text in files.items():
        path = os.path.join(folder, *relative.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append(path)
    return written


class SentenceTransformersFilesMixin:
    """Makes ``save_pretrained`` write the sentence-transformers files beside the weights.

    A model class names its pipeline in :meth:`native_sentence_transformers_pipeline`; the vectors are
    then exactly ``pooler_output``. Saving again into a folder keeps the pooling, prompts, similarity,
    normalisation and per-side lengths a training run or a conversion wrote there; saving into a folder without
    them keeps those of the folder the model was loaded from (:class:`StrictLoadingMixin` reads them), so a model
    loaded, merged with an adapter or pushed, and saved elsewhere gives the same vectors there.
    """

    @classmethod
    def native_sentence_transformers_pipeline(cls, config) -> tuple[str, str]:
        """``(pooling, similarity)`` under which sentence-transformers reproduces ``pooler_output``."""
        raise NotImplementedError(f"{cls.__name__} does not declare its sentence-transformers pipeline")

    def save_pretrained(self, save_directory: str | os.PathLike, is_main_process: bool = True, *args, **kwargs):
        super().save_pretrained(save_directory, is_main_process, *args, **kwargs)
        if is_main_process and os.path.isdir(save_directory):
            pooling, similarity = self.native_sentence_transformers_pipeline(self.config)
            saved = read_saved_settings(save_directory) or getattr(self, "loaded_sentence_transformers_settings", {})
            pooling = saved.get("pooling", pooling)
            similarity = saved.get("similarity", similarity)
            normalize = saved.get("normalize", False) and similarity == "cosine"
            dimension = getattr(self.config, "sentence_embedding_dimension", self.config.hidden_size)
            write_sentence_transformers_files(
                save_directory, dimension, pooling, similarity, saved.get("prompts"), normalize, saved.get("lengths")
            )


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHOWN_KEYS = 5


def loading_differences(model, loading_info: dict) -> tuple[list[str], list[str]]:
    """(missing, unexpected) tensor names of a model just loaded with ``from_pretrained(...,
    output_loading_info=True)`` (``loading_info``) that make it compute something else than the checkpoint: the one
    weight policy, applied by :class:`StrictLoadingMixin` to our classes and by dense-encoders' loader to every model.

    Missing keys are initialised at random, unexpected keys dropped; what transformers and the classes declare
    harmless (``_keys_to_ignore_on_load_*``, tied weights) is not reported. Expected, too: parameters the class may
    start fresh (``fresh_weight_prefixes``: pre-training heads on an encoder checkpoint) and, for a base model (what
    encoders load), a BERT ``pooler`` the checkpoint lacks (sentence-transformers and our encoders never use it) and,
    from a checkpoint of another architecture (its config's ``architectures``), the tensors outside
    ``base_model_prefix`` (the task's heads, e.g. ``cls.*`` of ``BertForMaskedLM``). A tensor of another shape
    (``mismatched_keys``) is no difference here: transformers refuses it (RuntimeError) unless the caller consented
    with ``ignore_mismatched_sizes=True``, and then re-initialises it and names it in its load report, as for any
    model."""
    fresh = tuple(getattr(model, "fresh_weight_prefixes", ()) or ())
    missing = {key for key in loading_info.get("missing_keys", ()) if not (fresh and key.startswith(fresh))}
    unexpected = set(loading_info.get("unexpected_keys", ()))
    if getattr(model, "base_model", model) is model:
        missing = {key for key in missing if not key.startswith("pooler.")}
        prefix = getattr(model, "base_model_prefix", "") or ""
        architectures = getattr(getattr(model, "config", None), "architectures", None) or []
        if prefix and architectures and type(model).__name__ not in architectures:
            unexpected = {key for key in unexpected if key.startswith(f"{prefix}.")}
    return sorted(missing), sorted(unexpected)


def weights_location(name_or_path, subfolder: str = "") -> str:
    """How a message names a checkpoint's weights: the weights file of a local folder (``folder (N shards)`` for a
    sharded one), the state_dict of ``from_pretrained(None, config=..., state_dict=...)`` for ``None``, else
    ``name_or_path`` itself (a Hub id)."""
    if name_or_path is None:
        return "the state_dict given to from_pretrained"
    folder = os.path.join(os.fspath(name_or_path), subfolder)
    for filename in WEIGHT_FILES:
        if os.path.isfile(os.path.join(folder, filename)):
            return os.path.join(folder, filename)
        index = os.path.join(folder, filename + ".index.json")
        if os.path.isfile(index):
            with open(index, encoding="utf-8") as handle:
                shards = set(json.load(handle).get("weight_map", {}).values())
            return f"{folder} ({len(shards)} shards)"
    return os.fspath(name_or_path)


def _listed(keys) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f", ... (+{len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else "")


def weights_mismatch(where: str, model_class: str, missing, unexpected, *, allowed: bool) -> str | None:
    """The one message for a checkpoint with :func:`loading_differences` (``None`` without any): the refusal, or with
    ``allowed`` (``allow_missing_weights``) the warning; ``where`` from :func:`weights_location`."""
    if not missing and not unexpected:
        return None
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensors of the model are missing ({_listed(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} tensors in the file are not in the model ({_listed(unexpected)})")
    summary = f"{where} does not match {model_class}, the model its config describes: {'; '.join(problems)}."
    if allowed:
        return (f"{summary} Loading it anyway (allow_missing_weights): missing tensors are randomly initialised, so "
                "results computed from this model say nothing about the checkpoint.")
    return (f"{summary} Loading it would leave the missing tensors randomly initialised and every number computed "
            "from it meaningless. Fix: point at the complete checkpoint (save it again with save_pretrained, or copy "
            "/ download its weights again; a folder another implementation wrote: `dense-encoders convert` it "
            "first); to load it anyway, pass --allow-missing-weights (allow_missing_weights=True).")


class StrictLoadingMixin:
    """``from_pretrained`` that refuses to hand back a model with randomly initialised weights.

    What counts is :func:`loading_differences` of transformers' own ``output_loading_info``; ``fresh_weight_prefixes``
    names parameters that may legitimately start fresh (pre-training heads on top of an encoder checkpoint). Any
    other difference raises a one-line ValueError (:func:`weights_mismatch`) unless the caller passes
    ``allow_missing_weights=True``, which logs it instead (a caller that also takes ``output_loading_info`` reports
    the differences itself: dense-encoders' loader does, with the same rule and message). Weights given in memory
    (``from_pretrained(None, config=..., state_dict=...)``) are checked alike. A tensor of another shape is
    transformers' own rule: refused without ``ignore_mismatched_sizes=True``; with it (the caller's consent)
    re-initialised and named in transformers' load report, as for ``BertModel``.
    """

    fresh_weight_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, allow_missing_weights: bool = False,
                        **kwargs):
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        where = weights_location(pretrained_model_name_or_path, kwargs.get("subfolder", "") or "")
        message = weights_mismatch(where, cls.__name__, *loading_differences(model, info),
                                   allowed=allow_missing_weights)
        if message and not allow_missing_weights:
            raise ValueError(message)
        if message and not want_info:
            logger.warning(message)
        if pretrained_model_name_or_path is not None:  # carried to every folder it is saved to
            model.loaded_sentence_transformers_settings = loaded_settings(
                pretrained_model_name_or_path, kwargs.get("subfolder", "") or "", kwargs.get("revision"))
        return (model, info) if want_info else model


__all__ = [
    "SentenceTransformersFilesMixin",
    "StrictLoadingMixin",
    "loaded_settings",
    "loading_differences",
    "read_saved_settings",
    "sentence_transformers_files",
    "weights_location",
    "weights_mismatch",
    "write_sentence_transformers_files",
]
