"""The checkpoint folder: our model types, their native pooling and similarity, the sentence-transformers
files, and whether a folder is complete enough to publish.

A folder is what users meet: ``save_pretrained``, our training commands and ``dense-encoders push``
write it; ``AutoModel``, ``SentenceTransformer`` and Hub downloads read it. Every writer and reader in
the package asks this module, and the model classes themselves declare their pipeline
(``native_sentence_transformers_pipeline``), so the facts live in one place:

* :data:`OUR_ENCODERS` maps our ``model_type`` values to their encoder classes;
* :func:`native_pipeline` gives the (pooling, similarity) under which sentence-transformers reproduces
  ``pooler_output`` (CLS + dot product for Condenser and TITE, the configured pooling + cosine for
  the cross-encoder-infused dual encoder);
* :func:`write_sentence_transformers_files` writes sentence-transformers' own files for any folder
  (our models write them in ``save_pretrained`` already; other students need them written);
* :func:`read_pipeline` reads a folder's declared pooling, similarity and prompts;
* :func:`publishing_problems` lists what makes a folder unfit to upload: remote-code files that
  ``auto_map`` does not reach, config and code that disagree, missing weights or tokenizer.

Users of the reference Condenser checkpoints loaded them with ``SentenceTransformer`` and silently got
mean pooling; every folder we write declares its pooling explicitly.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..models.condenser import CondenserModel
from ..models.condenser.sentence_transformers_condenser import (
    SENTENCE_TRANSFORMERS_FILES,
    sentence_transformers_files,
)
from ..models.infused import InfusedDualEncoderModel
from ..models.tite import TiteModel

# model_type -> the encoder class AutoModel loads (it declares its sentence-transformers pipeline)
OUR_ENCODERS = {
    CondenserModel.config_class.model_type: CondenserModel,
    TiteModel.config_class.model_type: TiteModel,
    InfusedDualEncoderModel.config_class.model_type: InfusedDualEncoderModel,
}
OUR_MODEL_TYPES = tuple(OUR_ENCODERS)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "spiece.model", "vocab.json")


def is_ours(config_or_model_type) -> bool:
    """Whether a config (or a ``model_type`` string) is one of this package's model families."""
    model_type = config_or_model_type if isinstance(config_or_model_type, str) else config_or_model_type.model_type
    return model_type in OUR_ENCODERS


def native_pipeline(config) -> tuple[str, str]:
    """``(pooling, similarity)`` that reproduces one of our models' ``pooler_output`` in sentence-transformers."""
    if not is_ours(config):
        raise ValueError(
            f"model_type {config.model_type!r} is not one of this package's ({', '.join(OUR_MODEL_TYPES)}): "
            "its pooling is not known; choose it explicitly (pooling='cls' or 'mean')."
        )
    return OUR_ENCODERS[config.model_type].native_sentence_transformers_pipeline(config)


def native_pooling(config) -> str:
    """The sentence-transformers pooling of :func:`native_pipeline`."""
    return native_pipeline(config)[0]


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_sentence_transformers_files(
    folder: str | Path,
    *,
    pooling: str,
    similarity: str,
    prompts: dict[str, str] | None = None,
    normalize: bool | None = None,
    lengths: dict[str, int] | None = None,
) -> list[Path]:
    """Write sentence-transformers' module files into a ``save_pretrained`` folder; returns their paths.

    For a model a training run has just trained: the pipeline is Transformer -> Pooling(``pooling``),
    plus ``Normalize`` when it was trained with cosine similarity (``normalize`` defaults to
    ``similarity == "cosine"``; cosine-trained models ship unit vectors). The files are exactly what
    sentence-transformers writes for that pipeline; weights, config and code stay untouched. ``prompts``
    and ``lengths`` (``query_length`` / ``document_length``) set what ``encode_query`` / ``encode_document``
    prepend and where they truncate.
    """
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    if config is None:
        raise FileNotFoundError(f"{folder} has no config.json: call model.save_pretrained({str(folder)!r}) first.")
    from ..models.condenser.sentence_transformers_condenser import write_sentence_transformers_files as write

    if normalize is None:
        normalize = similarity == "cosine"
    dimension = _embedding_dimension(config)
    return [Path(p) for p in write(folder, dimension, pooling, similarity, prompts, normalize, lengths)]


def _embedding_dimension(config: dict) -> int:
    if config.get("projection_size"):  # a TITE whose output passes through a projection
        return int(config["projection_size"])
    if "hidden_size" in config:
        return int(config["hidden_size"])
    if config.get("hidden_sizes"):  # TITE configs saved with per-layer widths only
        widths = config["hidden_sizes"]
        return int(widths[-1] if isinstance(widths, list) else widths)
    raise ValueError("config.json names no hidden_size: the embedding dimension is unknown")


def has_sentence_transformers_files(name_or_path: str | Path) -> bool:
    """Whether a folder (or a Hub id, looked up in the cache or online) has ``modules.json``."""
    if Path(name_or_path).is_dir():
        return (Path(name_or_path) / "modules.json").is_file()
    from transformers.utils import cached_file

    found = cached_file(
        str(name_or_path),
        "modules.json",
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    return found is not None


def read_pipeline(folder: str | Path) -> dict:
    """What a folder's sentence-transformers files declare: ``pooling``, ``similarity``, ``normalize``,
    ``prompts`` (``{}`` for a folder without ``modules.json``)."""
    folder = Path(folder)
    modules = _read_json(folder / "modules.json")
    if modules is None:
        return {}
    declared = {"pooling": None, "normalize": False}
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            pooling = _read_json(folder / module.get("path", "") / "config.json") or {}
            declared["pooling"] = pooling.get("pooling_mode") or next(  # older files: pooling_mode_cls_token: true
                (key[len("pooling_mode_"):].split("_")[0] for key, value in pooling.items()
                 if key.startswith("pooling_mode_") and value is True), None)
        elif kind == "Normalize":
            declared["normalize"] = True
    settings = _read_json(folder / "config_sentence_transformers.json") or {}
    declared["similarity"] = settings.get("similarity_fn_name")
    declared["prompts"] = settings.get("prompts") or {}
    return declared


# --------------------------------------------------------------------------------------------
# Completeness: what may be published
# --------------------------------------------------------------------------------------------

_CLASS = re.compile(r"^class\s+(\w+)\b", re.MULTILINE)
_MODEL_TYPE = re.compile(r"^\s+model_type\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)


def _module_file(target: str) -> tuple[str, str]:
    """``"modeling_tite.TiteModel"`` (or ``"repo--modeling_tite.TiteModel"``) -> (file name, class name)."""
    module, _, name = str(target).split("--")[-1].rpartition(".")
    return module + ".py", name


def remote_code_files(folder: str | Path) -> set[str]:
    """The ``.py`` files ``auto_map`` reaches: the named modules and, transitively, their relative imports."""
    from transformers.dynamic_module_utils import get_relative_import_files

    folder = Path(folder)
    config = _read_json(folder / "config.json") or {}
    reached = set()
    for target in (config.get("auto_map") or {}).values():
        targets = target if isinstance(target, (list, tuple)) else [target]
        for one in targets:
            if one is None:
                continue
            name, _ = _module_file(one)
            if (folder / name).is_file():
                reached.add(name)
                reached.update(Path(p).name for p in get_relative_import_files(str(folder / name)))
    return reached


def publishing_problems(folder: str | Path) -> list[str]:
    """Why ``folder`` must not be uploaded as it is; one line per problem, each naming the fix."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    if config is None:
        return [f"{folder} has no config.json: save the model with model.save_pretrained(folder) first."]
    problems = []
    auto_map = config.get("auto_map") or {}
    for auto_class, target in sorted(auto_map.items()):
        for one in target if isinstance(target, (list, tuple)) else [target]:
            if one is None:
                continue
            name, class_name = _module_file(one)
            code = folder / name
            if not code.is_file():
                problems.append(
                    f"config.json names {one!r} for {auto_class} but {name} is missing: re-save the model with "
                    "dense_encoders installed (model.save_pretrained(folder)) so its code files are copied."
                )
            elif class_name not in _CLASS.findall(code.read_text(encoding="utf-8")):
                problems.append(
                    f"config.json names {one!r} for {auto_class} but {name} defines no class {class_name}: the code "
                    "belongs to another model. Re-save the model into an empty folder."
                )
            elif auto_class == "AutoConfig":
                declared = _MODEL_TYPE.findall(code.read_text(encoding="utf-8"))
                if declared and config.get("model_type") not in declared:
                    problems.append(
                        f"config.json has model_type {config.get('model_type')!r} but {name} declares "
                        f"{declared[0]!r}: config and code come from different models. Re-save the model into an "
                        "empty folder."
                    )
    stray = sorted(p.name for p in folder.glob("*.py") if p.name not in remote_code_files(folder))
    if stray:
        problems.append(
            f"{folder} holds remote-code files that config.json's auto_map does not use: {', '.join(stray)} "
            "(left from another model?). Remove them, or re-save the model into an empty folder."
        )
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        problems.append(
            f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...): users could not encode "
            "text with it. Save the tokenizer too: tokenizer.save_pretrained(folder)."
        )
    return problems


def missing_sentence_transformers_files(folder: str | Path) -> dict[str, str]:
    """``{relative path: text}`` of the sentence-transformers files one of our models' folder lacks (its
    native pipeline; prompts and similarity kept from ``config_sentence_transformers.json`` if present);
    ``{}`` when ``modules.json`` exists or the model is not ours (its pooling is not ours to guess)."""
    folder = Path(folder)
    config = _read_json(folder / "config.json") or {}
    if (folder / "modules.json").is_file() or config.get("model_type") not in OUR_ENCODERS:
        return {}
    from transformers import AutoConfig

    pooling, similarity = native_pipeline(AutoConfig.from_pretrained(folder, trust_remote_code=True))
    files = sentence_transformers_files(_embedding_dimension(config), pooling, similarity)
    return {path: text for path, text in files.items() if not (folder / path).exists()}


__all__ = [
    "OUR_ENCODERS",
    "OUR_MODEL_TYPES",
    "SENTENCE_TRANSFORMERS_FILES",
    "has_sentence_transformers_files",
    "is_ours",
    "missing_sentence_transformers_files",
    "native_pipeline",
    "native_pooling",
    "publishing_problems",
    "read_pipeline",
    "remote_code_files",
    "write_sentence_transformers_files",
]


# ---- loading: every tensor the model declares, or an error ------------------------------------
#
# transformers loads a checkpoint that lacks tensors (a deleted layer, a half-copied file) by
# initialising them at random and printing a report that scrolls by; everything computed from such
# a model is a wrong number. ``check_checkpoint_weights`` compares the tensor names in a folder's
# weights (file headers only) with what the model class it declares expects, using transformers' own
# key matching (renamings, base-model prefix, tied weights, the classes' ``_keys_to_ignore_on_load_*``
# lists) on a model built on the meta device, and refuses the mismatch before anything is loaded.

_LOADING_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_LOADING_AUTO_CLASSES = {  # sentence-transformers' ``transformer_task`` -> the transformers Auto class
    "feature-extraction": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "fill-mask": "AutoModelForMaskedLM",
    "text-generation": "AutoModelForCausalLM",
}
_LOADING_SHOWN_KEYS = 5


class CheckpointWeightsError(ValueError):
    """A checkpoint's weights cannot be read, or lack (or add) tensors of the model it declares."""


def _loading_file(name_or_path: str, subfolder: str, filename: str) -> str | None:
    """Local path of ``filename`` in a folder or Hub repository (``None`` when it has none)."""
    folder = Path(name_or_path)
    if folder.is_dir():
        candidate = folder / subfolder / filename
        return str(candidate) if candidate.is_file() else None
    from transformers.utils import cached_file

    return cached_file(
        name_or_path,
        filename,
        subfolder=subfolder,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )


def _loading_transformer_module(name_or_path: str) -> tuple[str, str | None] | None:
    """(subfolder, transformer_task) of a sentence-transformers folder's Transformer module; ``("", None)``
    for a plain transformers folder; ``None`` when its first module is not a transformers model."""
    modules_file = _loading_file(name_or_path, "", "modules.json")
    if modules_file is None:
        return "", None
    modules = json.loads(Path(modules_file).read_text(encoding="utf-8"))
    transformer = next((m for m in modules if str(m.get("type", "")).endswith("Transformer")), None)
    if transformer is None:
        return None
    subfolder = transformer.get("path", "") or ""
    task = None
    settings_file = _loading_file(name_or_path, subfolder, "sentence_bert_config.json")
    if settings_file is not None:
        task = json.loads(Path(settings_file).read_text(encoding="utf-8")).get("transformer_task")
    return subfolder, task


def safetensors_sizes(path: str | Path) -> str | None:
    """``"N bytes on disk, the header promises M"`` for a safetensors file (8 bytes of little-endian header
    length H, H bytes of JSON header, then the data up to the largest tensor ``data_offsets`` end), saying
    so when the header itself is cut short; ``None`` when the file cannot be measured at all."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return f"{size} bytes on disk, fewer than the 8 bytes of a safetensors header length"
            header_length = int.from_bytes(prefix, "little")
            if size < 8 + header_length:
                return (
                    f"{size} bytes on disk, the header alone promises {8 + header_length} "
                    f"(8 + a {header_length}-byte header)"
                )
            header = json.loads(handle.read(header_length))
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2 and isinstance(entry["data_offsets"][1], int)
    ]
    promised = 8 + header_length + max(ends, default=0)
    return f"{size} bytes on disk, the header promises {promised}"


def _loading_unreadable(path: str, error: BaseException) -> CheckpointWeightsError:
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    sizes = safetensors_sizes(path) if str(path).endswith(".safetensors") else None
    return CheckpointWeightsError(
        f"{path} cannot be read ({reason}{'; ' + sizes if sizes else ''}): the file is truncated or corrupt, "
        "typically an interrupted download, copy or save. Download, copy or save it again."
    )


def _loading_file_keys(path: str) -> set[str]:
    """Tensor names in one weights file, read from its header (safetensors) or lazily (PyTorch pickle)."""
    try:
        if path.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt") as handle:
                return set(handle.keys())
        import torch

        return set(torch.load(path, map_location="meta", weights_only=True, mmap=True))
    except Exception as error:  # SafetensorError, UnpicklingError, RuntimeError, OSError: all mean "unreadable"
        raise _loading_unreadable(path, error) from None


def checkpoint_tensor_names(name_or_path: str | Path, subfolder: str = "") -> tuple[list[str], set[str]] | None:
    """(weight files, tensor names) of a checkpoint folder or Hub id (single file or sharded with an
    index); ``None`` when it has no weights in a format read here. Unreadable files raise
    :class:`CheckpointWeightsError` naming the file."""
    name_or_path = str(name_or_path)
    for filename in _LOADING_WEIGHT_FILES:
        single = _loading_file(name_or_path, subfolder, filename)
        if single is not None:
            return [single], _loading_file_keys(single)
        index = _loading_file(name_or_path, subfolder, f"{filename}.index.json")
        if index is not None:
            try:
                shards = sorted(set(json.loads(Path(index).read_text(encoding="utf-8"))["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise _loading_unreadable(index, error) from None
            files, keys = [], set()
            for shard in shards:
                path = _loading_file(name_or_path, subfolder, shard)
                if path is None:
                    raise CheckpointWeightsError(
                        f"{index} lists the shard {shard}, which is not there: copy or download the checkpoint again."
                    )
                files.append(path)
                keys |= _loading_file_keys(path)
            return files, keys
    return None


def _loading_is_base_model(model) -> bool:
    return getattr(model, "base_model", model) is model


def expected_loading_differences(model, checkpoint_keys) -> tuple[set[str], set[str]]:
    """(missing, unexpected) keys that ``type(model).from_pretrained`` would report for a checkpoint holding
    ``checkpoint_keys``, after everything transformers and our classes declare harmless.

    The matching is transformers' own (``rename_source_key`` with the model's conversion mapping and
    ``base_model_prefix``; tied weights count as present when either side is; the classes'
    ``_keys_to_ignore_on_load_missing`` / ``_unexpected`` through ``_adjust_missing_and_unexpected_keys``).
    Beyond that, when a base model is loaded (``AutoModel``, what encoders use) two differences are
    expected: the heads of a task checkpoint (its keys outside ``base_model_prefix``, e.g. ``cls.*`` of
    ``BertForMaskedLM``) and a missing BERT ``pooler`` (sentence-transformers and our encoders never use it).
    """
    from transformers.utils.loading_report import LoadStateDictInfo

    state = model.state_dict()
    prefix = getattr(model, "base_model_prefix", "") or ""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

        mapping = get_model_conversion_mapping(model, None, None) or []
        renamings = [entry for entry in mapping if isinstance(entry, WeightRenaming)]
        converters = [entry for entry in mapping if isinstance(entry, WeightConverter)]
    except ImportError:  # another transformers layout: plain names, base-model prefix only
        renamings, converters, rename_source_key = [], [], None
    by_pattern = {pattern: converter for converter in converters for pattern in converter.source_patterns}

    def rename(key: str, with_transforms: bool = True) -> tuple[str, str | None]:
        if rename_source_key is not None:
            if with_transforms:
                return rename_source_key(key, renamings, converters, prefix or None, state)
            return rename_source_key(key, [], [], prefix or None, state)
        if prefix and key.startswith(f"{prefix}.") and key[len(prefix) + 1 :] in state:
            return key[len(prefix) + 1 :], None
        if prefix and f"{prefix}.{key}" in state:
            return f"{prefix}.{key}", None
        return key, None

    missing, unexpected = set(state), set()
    for key in sorted(checkpoint_keys):
        renamed, pattern = rename(key)
        if renamed not in state and key in state:
            renamed, pattern = rename(key, with_transforms=False)
        if renamed in state:
            missing.discard(renamed)
        elif pattern is not None:
            targets = by_pattern[pattern].target_patterns
            unexpected.update(renamed.replace(targets[0], target) for target in targets)
        else:
            unexpected.add(renamed)
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in missing and source not in missing:
            missing.discard(target)
        elif source in missing and target not in missing:
            missing.discard(source)
    info = LoadStateDictInfo(
        missing_keys=missing,
        unexpected_keys=unexpected,
        mismatched_keys=set(),
        error_msgs=[],
        conversion_errors={},
        skipped_pp_keys=set(),
    )
    model._adjust_missing_and_unexpected_keys(info)
    missing, unexpected = set(info.missing_keys), set(info.unexpected_keys)
    if _loading_is_base_model(model):
        missing = {key for key in missing if not key.startswith("pooler.")}
        if prefix and any(key.startswith(f"{prefix}.") for key in checkpoint_keys):
            unexpected = {key for key in unexpected if key.startswith(f"{prefix}.")}
    return missing, unexpected


def _loading_listed(keys: set[str]) -> str:
    ordered = sorted(keys)
    shown = ", ".join(ordered[:_LOADING_SHOWN_KEYS])
    return shown + (f", ... (+{len(ordered) - _LOADING_SHOWN_KEYS} more)" if len(ordered) > _LOADING_SHOWN_KEYS else "")


def check_checkpoint_weights(
    name_or_path: str | Path,
    *,
    auto_class: str = "AutoModel",
    allow_missing_weights: bool = False,
    trust_remote_code: bool = True,
) -> dict | None:
    """Refuse a checkpoint whose weights miss or add tensors of the model it declares, before loading it.

    ``name_or_path``: a transformers folder, a sentence-transformers folder (its Transformer module is
    checked, with the Auto class of its ``transformer_task``) or a Hub id (files from the cache or the
    Hub). ``auto_class``: what the caller loads it with when the folder does not say (``AutoModel`` for
    encoders, ``AutoModelForSequenceClassification`` for cross-encoders). The model is built on the meta
    device (no memory, no weights read), and only the weight files' headers are read.

    Raises :class:`CheckpointWeightsError` (a ``ValueError``) naming the first missing / unexpected keys,
    their counts and the fix; with ``allow_missing_weights=True`` it logs that instead (the transformers
    load report follows) and the caller loads the partial model. An unreadable weights file (truncated,
    corrupt) is always an error naming the file. Returns ``{"files", "model_class", "ours", "missing_keys",
    "unexpected_keys"}``, or ``None`` when there is nothing to check (no transformers weights).
    """
    import logging

    import torch
    import transformers
    from transformers import AutoConfig

    name_or_path = str(name_or_path)
    module = _loading_transformer_module(name_or_path)
    if module is None:
        return None
    subfolder, task = module
    found = checkpoint_tensor_names(name_or_path, subfolder)
    if found is None:
        return None
    files, keys = found
    auto = getattr(transformers, _LOADING_AUTO_CLASSES.get(task or "", auto_class))
    config_kwargs = {"subfolder": subfolder} if subfolder else {}
    config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **config_kwargs)
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    missing, unexpected = expected_loading_differences(model, keys)
    report = {
        "files": files,
        "model_class": type(model).__name__,
        "ours": is_ours(config),
        "missing_keys": sorted(missing),
        "unexpected_keys": sorted(unexpected),
    }
    if not missing and not unexpected:
        return report
    where = files[0] if len(files) == 1 else f"{Path(files[0]).parent} ({len(files)} shards)"
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensors of the model are missing ({_loading_listed(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} tensors in the file are not in the model ({_loading_listed(unexpected)})")
    summary = f"{where} does not match {type(model).__name__}, the model its config.json describes: {'; '.join(problems)}."
    if allow_missing_weights:
        logging.getLogger(__name__).warning(
            "%s Loading it anyway (allow_missing_weights): missing tensors are randomly initialised, so results "
            "computed from this model say nothing about the checkpoint.", summary
        )
        return report
    raise CheckpointWeightsError(
        f"{summary} Loading it would leave the missing tensors randomly initialised and every number computed "
        "from it meaningless. Fix: point at the complete checkpoint (save it again with save_pretrained, or "
        "copy / download its weights again); to load it anyway, pass --allow-missing-weights "
        "(allow_missing_weights=True)."
    )


def from_pretrained_kwargs(report: dict | None, allow_missing_weights: bool) -> dict:
    """What ``from_pretrained`` needs to load the checkpoint that :func:`check_checkpoint_weights` reported.

    Our model classes refuse missing weights themselves (``StrictLoadingMixin`` in their remote code); when
    the caller allowed a partial checkpoint of ours, they must be told so (other classes take no such flag).
    """
    if allow_missing_weights and report and report.get("ours") and report["missing_keys"]:
        return {"allow_missing_weights": True}
    return {}
