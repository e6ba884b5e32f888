"""The weight check: every tensor the model a checkpoint declares, or an error.

transformers loads a checkpoint that lacks tensors (a deleted layer, a half-copied file) by
initialising them at random and printing a report that scrolls by; everything computed from such a
model is a wrong number. This module turns that into an error naming the file, the first keys, their
counts and the fix (``allow_missing_weights`` turns it into a logged warning):

* :func:`loaded_differences` reads what ``from_pretrained(..., output_loading_info=True)`` reports for
  a model that has just been loaded (:mod:`.loading` does so for every model it opens itself);
* :func:`check_checkpoint_weights` checks a folder WITHOUT loading it: the tensor names in its weight
  files (file headers only) against the model class its config declares, built on the meta device,
  matched with transformers' own key matching (:func:`expected_loading_differences`). It serves where a
  model is loaded by code that hands back no loading report (sentence-transformers' ``SentenceTransformer``
  and ``CrossEncoder``) and where a folder is refused before anything is written or loaded.

Both report the same differences: the classes' ``_keys_to_ignore_on_load_*`` lists and tied weights are
harmless, and a base model (``AutoModel``, what encoders use) loaded from a task checkpoint neither needs
the task's heads (its keys outside ``base_model_prefix``, e.g. ``cls.*`` of ``BertForMaskedLM``) nor a BERT
``pooler`` (sentence-transformers and our encoders never use it). Loads that one of these checks covers run
under :func:`load_report_hidden`: transformers' own table of missing and unexpected keys is not printed, since
the check refuses (or, allowed, names) the differences that matter and the expected ones pass silently.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import re
import zipfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig
from transformers.utils import cached_file

from .folder import is_ours

logger = logging.getLogger(__name__)

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


class PickledObjectsError(CheckpointWeightsError):
    """A file ``torch.load`` would read holds pickled Python objects besides tensors: it is never unpickled."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PICKLED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


class _LoadReportFilter(logging.Filter):
    """Drops transformers' load report when it lists only missing / unexpected keys (which our check covers);
    a report of shape mismatches or conversion errors, which transformers raises on, stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "LOAD REPORT" not in message or "MISMATCH" in message or "CONVERSION" in message


@contextlib.contextmanager
def load_report_hidden():
    """Meanwhile, transformers' load report of missing and unexpected keys is not printed (module doc): for loads
    whose weights :func:`check_checkpoint_weights` or :func:`loaded_differences` check."""
    logger_ = logging.getLogger("transformers.modeling_utils")  # where from_pretrained logs the report
    report_filter = _LoadReportFilter()
    logger_.addFilter(report_filter)
    try:
        yield
    finally:
        logger_.removeFilter(report_filter)


def load_tensors_only(path: str | Path, *, map_location="meta"):
    """``torch.load(path, weights_only=True)``: tensors and plain containers, never a pickled object (memory-mapped
    when the file is torch's zip format, so ``map_location="meta"`` reads no data). A file holding pickled objects
    raises :class:`PickledObjectsError` naming the file and the object (the caller adds the fix); any other failure
    is torch's own error."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        text = _ANSI.sub("", str(error))
        found = _PICKLED_GLOBAL.search(text)
        what = (f"holds pickled Python objects besides tensors (the object {found.group(1)})" if found else
                "is no file of tensors that weights-only loading reads (pickled objects besides tensors, or damage)")
        raise PickledObjectsError(
            f"{path} {what}, which are never unpickled here: unpickling runs whatever code the file names"
        ) from None


def pickled_weights_fix(path: str | Path) -> str:
    """How to turn a weights file that holds pickled objects into safetensors, for one who trusts it."""
    path = Path(path)
    target = path.with_name("model.safetensors")
    return (
        f"If you trust the file, convert it to safetensors once: python -c \"import torch; from safetensors.torch "
        f"import save_file; state = torch.load('{path}', weights_only=False); save_file({{k: v.contiguous().clone() "
        f"for k, v in state.items() if isinstance(v, torch.Tensor)}}, '{target}')\" and remove {path.name}; or load "
        "the model where it was made and save it again with save_pretrained (safetensors)."
    )


def _loading_file(name_or_path: str, subfolder: str, filename: str) -> str | None:
    """Local path of ``filename`` in a folder or Hub repository (``None`` when it has none)."""
    folder = Path(name_or_path)
    if folder.is_dir():
        candidate = folder / subfolder / filename
        return str(candidate) if candidate.is_file() else None
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


def _check_module_weight_files(name_or_path: str) -> None:
    """Read the headers of the weight files of a sentence-transformers folder's other modules (``2_Dense``, ...),
    the file sentence-transformers would load (``model.safetensors`` first), so that an unreadable one, or one
    holding pickled objects, is an error naming it before anything is loaded."""
    modules_file = _loading_file(name_or_path, "", "modules.json")
    if modules_file is None:
        return
    modules = json.loads(Path(modules_file).read_text(encoding="utf-8"))
    for module in modules if isinstance(modules, list) else []:
        if not isinstance(module, dict) or not module.get("path"):
            continue
        if str(module.get("type", "")).endswith("Transformer"):  # checked with its model (check_checkpoint_weights)
            continue
        for filename in _LOADING_WEIGHT_FILES:
            path = _loading_file(name_or_path, str(module["path"]), filename)
            if path is not None:
                _loading_file_keys(path)
                break


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
    reason = (_ANSI.sub("", str(error)).strip().splitlines() or [type(error).__name__])[0]
    sizes = safetensors_sizes(path) if str(path).endswith(".safetensors") else None
    return CheckpointWeightsError(
        f"{path} cannot be read ({reason}{'; ' + sizes if sizes else ''}): the file is truncated or corrupt, "
        "typically an interrupted download, copy or save. Download, copy or save it again."
    )


def _loading_file_keys(path: str) -> set[str]:
    """Tensor names in one weights file, read from its header (safetensors) or lazily (PyTorch pickle, tensors
    only: a file holding pickled objects is refused with the way to convert it, :func:`load_tensors_only`)."""
    try:
        if path.endswith(".safetensors"):
            with safe_open(path, framework="pt") as handle:
                return set(handle.keys())
        return set(load_tensors_only(path))
    except PickledObjectsError as error:
        raise PickledObjectsError(f"{error}. {pickled_weights_fix(path)}") from None
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


def tensor_shapes(files: list[str]) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` of weight files, read from the safetensors headers (PyTorch files: loaded on
    the meta device with ``weights_only``, so no data is read and no object unpickled)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in map(str, files):
        try:
            if path.endswith(".safetensors"):
                with safe_open(path, framework="pt") as handle:
                    shapes.update({name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()})
            else:
                state = torch.load(path, map_location="meta", weights_only=True, mmap=True)
                shapes.update({name: tuple(tensor.shape) for name, tensor in state.items()})
        except Exception as error:  # as in _loading_file_keys: every failure means "unreadable"
            raise _loading_unreadable(path, error) from None
    return shapes


def _loading_is_base_model(model) -> bool:
    return getattr(model, "base_model", model) is model


def _base_model_differences(
    model, missing: set[str], unexpected: set[str], checkpoint_keys
) -> tuple[set[str], set[str]]:
    """What remains of transformers' (missing, unexpected) keys once a base model's expected ones are gone: a
    BERT ``pooler`` it does not find and the heads of a task checkpoint (keys outside ``base_model_prefix``)."""
    if not _loading_is_base_model(model):
        return missing, unexpected
    prefix = getattr(model, "base_model_prefix", "") or ""
    missing = {key for key in missing if not key.startswith("pooler.")}
    if prefix and any(key.startswith(f"{prefix}.") for key in checkpoint_keys):
        unexpected = {key for key in unexpected if key.startswith(f"{prefix}.")}
    return missing, unexpected


def expected_loading_differences(model, checkpoint_keys) -> tuple[set[str], set[str]]:
    """(missing, unexpected) keys that ``type(model).from_pretrained`` would report for a checkpoint holding
    ``checkpoint_keys``, after everything transformers and our classes declare harmless (module doc).

    The matching is transformers' own (``rename_source_key`` with the model's conversion mapping and
    ``base_model_prefix``; tied weights count as present when either side is; the classes'
    ``_keys_to_ignore_on_load_missing`` / ``_unexpected`` through ``_adjust_missing_and_unexpected_keys``).
    These are private transformers internals, used because nothing public reports the differences of a
    checkpoint without loading its weights; a caller that loads the model reads ``output_loading_info``
    instead (:func:`loaded_differences`).
    """
    # private transformers internals (see the docstring): a layout change fails this check, not the import
    from transformers.utils.loading_report import LoadStateDictInfo

    state = model.state_dict()
    rename = _key_renamer(model, state)
    missing, unexpected = set(state), set()
    for key in sorted(checkpoint_keys):
        renamed, targets = rename(key)
        if renamed not in state and key in state:
            renamed, targets = rename(key, with_transforms=False)
        if renamed in state:
            missing.discard(renamed)
        elif targets is not None:
            unexpected.update(renamed.replace(targets[0], target) for target in targets)
        else:
            unexpected.add(renamed)
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in missing and source not in missing:
            missing.discard(target)
        elif source in missing and target not in missing:
            missing.discard(source)
    info = LoadStateDictInfo(missing_keys=missing, unexpected_keys=unexpected, mismatched_keys=set(), error_msgs=[],
                             conversion_errors={}, skipped_pp_keys=set())
    model._adjust_missing_and_unexpected_keys(info)
    return _base_model_differences(model, set(info.missing_keys), set(info.unexpected_keys), checkpoint_keys)


def _key_renamer(model, state):
    """``rename(key, with_transforms=True) -> (model key, target patterns of a weight converter or None)``:
    transformers' ``rename_source_key`` with the model's conversion mapping and ``base_model_prefix``."""
    prefix = getattr(model, "base_model_prefix", "") or ""
    try:  # private transformers internals (see expected_loading_differences)
        # optional: private transformers internals, absent from other layouts (except below)
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

        mapping = get_model_conversion_mapping(model, None, None) or []
        renamings = [entry for entry in mapping if isinstance(entry, WeightRenaming)]
        converters = [entry for entry in mapping if isinstance(entry, WeightConverter)]
    except ImportError:  # another transformers layout: plain names, base-model prefix only
        renamings, converters, rename_source_key = [], [], None
    by_pattern = {pattern: converter.target_patterns
                  for converter in converters for pattern in converter.source_patterns}

    def rename(key: str, with_transforms: bool = True) -> tuple[str, list[str] | None]:
        if rename_source_key is not None:
            if with_transforms:
                renamed, pattern = rename_source_key(key, renamings, converters, prefix or None, state)
            else:
                renamed, pattern = rename_source_key(key, [], [], prefix or None, state)
            return renamed, (by_pattern[pattern] if pattern is not None else None)
        if prefix and key.startswith(f"{prefix}.") and key[len(prefix) + 1 :] in state:
            return key[len(prefix) + 1 :], None
        if prefix and f"{prefix}.{key}" in state:
            return f"{prefix}.{key}", None
        return key, None

    return rename


def loaded_differences(model, loading_info: dict, checkpoint_keys) -> tuple[set[str], set[str]]:
    """(missing, unexpected) keys of a model just loaded with ``from_pretrained(..., output_loading_info=True)``
    (``loading_info``), after the differences a base model expects (module doc); shape mismatches count as
    missing (their tensors are initialised at random too)."""
    mismatched = {entry[0] if isinstance(entry, (tuple, list)) else entry
                  for entry in loading_info.get("mismatched_keys", ())}
    missing = set(loading_info.get("missing_keys", ())) | mismatched
    return _base_model_differences(model, missing, set(loading_info.get("unexpected_keys", ())), checkpoint_keys)


def _loading_listed(keys: set[str]) -> str:
    ordered = sorted(keys)
    shown = ", ".join(ordered[:_LOADING_SHOWN_KEYS])
    return shown + (f", ... (+{len(ordered) - _LOADING_SHOWN_KEYS} more)" if len(ordered) > _LOADING_SHOWN_KEYS else "")


def refuse_differences(report: dict, *, allow_missing_weights: bool) -> dict:
    """Raise :class:`CheckpointWeightsError` for a report (``files``, ``model_class``, ``missing_keys``,
    ``unexpected_keys``) with differences, naming the first keys, their counts and the fix; with
    ``allow_missing_weights`` log that instead. Returns ``report``."""
    missing, unexpected, files = report["missing_keys"], report["unexpected_keys"], report["files"]
    if not missing and not unexpected:
        return report
    where = files[0] if len(files) == 1 else f"{Path(files[0]).parent} ({len(files)} shards)"
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensors of the model are missing ({_loading_listed(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} tensors in the file are not in the model ({_loading_listed(unexpected)})")
    model_class = report["model_class"]
    summary = f"{where} does not match {model_class}, the model its config.json describes: {'; '.join(problems)}."
    if allow_missing_weights:
        logger.warning(
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


def check_checkpoint_weights(
    name_or_path: str | Path,
    *,
    auto_class: str = "AutoModel",
    allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
) -> dict | None:
    """Refuse a checkpoint whose weights miss or add tensors of the model it declares, before loading it.

    ``name_or_path``: a transformers folder, a sentence-transformers folder (its Transformer module is
    checked, with the Auto class of its ``transformer_task``) or a Hub id (files from the cache or the
    Hub). ``auto_class``: what the caller loads it with when the folder does not say (``AutoModel`` for
    encoders, ``AutoModelForSequenceClassification`` for cross-encoders). The model is built on the meta
    device (no memory, no weights read), and only the weight files' headers are read.

    Raises :class:`CheckpointWeightsError` (a ``ValueError``) naming the first missing / unexpected keys,
    their counts and the fix; with ``allow_missing_weights=True`` it logs that instead and the caller loads the
    partial model (under :func:`load_report_hidden`). An unreadable weights file (truncated,
    corrupt, or holding pickled objects), of the model or of another sentence-transformers module (``2_Dense``), is
    always an error naming the file. Returns ``{"files", "model_class", "ours", "missing_keys",
    "unexpected_keys"}``, or ``None`` when there is nothing to check (no transformers weights).
    """
    name_or_path = str(name_or_path)
    _check_module_weight_files(name_or_path)
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
    return refuse_differences(report, allow_missing_weights=allow_missing_weights)


def from_pretrained_kwargs(report: dict | None, allow_missing_weights: bool) -> dict:
    """What ``from_pretrained`` needs to load the checkpoint that :func:`check_checkpoint_weights` reported.

    Our model classes refuse missing weights themselves (``StrictLoadingMixin`` in their remote code); when
    the caller allowed a partial checkpoint of ours, they must be told so (other classes take no such flag).
    """
    if allow_missing_weights and report and report.get("ours") and report["missing_keys"]:
        return {"allow_missing_weights": True}
    return {}


__all__ = [
    "CheckpointWeightsError",
    "PickledObjectsError",
    "check_checkpoint_weights",
    "checkpoint_tensor_names",
    "expected_loading_differences",
    "from_pretrained_kwargs",
    "load_report_hidden",
    "load_tensors_only",
    "loaded_differences",
    "pickled_weights_fix",
    "refuse_differences",
    "safetensors_sizes",
    "tensor_shapes",
]
