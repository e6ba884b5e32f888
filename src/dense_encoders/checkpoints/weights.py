"""The weight check: every tensor the model a checkpoint declares, or an error.

transformers loads a checkpoint that lacks tensors (a deleted layer, a half-copied file) by
initialising them at random and printing a report that scrolls by; everything computed from such a
model is a wrong number. This module turns that into an error naming the file, the first keys, their
counts and the fix (``allow_missing_weights`` turns it into a logged warning).

There is one weight policy: what transformers' ``from_pretrained(..., output_loading_info=True)`` reports,
less the differences a model expects (:func:`loading_differences`), and one message (:func:`weights_mismatch`).
Both live in the remote code of our model folders (``StrictLoadingMixin`` applies them to our classes wherever
they are loaded, without this package) and are imported from there:

* :func:`refuse_loaded_differences`: a model that has just been loaded with ``output_loading_info``
  (:mod:`.loading` does so for every model it opens itself);
* :func:`check_checkpoint_weights`: a folder checked before anything is loaded for real: its weight files'
  headers are read, then the model its config declares is loaded on the meta device (no memory, no tensor data)
  with ``output_loading_info``. It serves where a model is loaded by code that hands back no loading report
  (sentence-transformers' ``SentenceTransformer`` and ``CrossEncoder``) and where a folder is refused before
  anything is written.

Loads that one of these checks covers run under :func:`load_report_hidden`: transformers' own table of missing and
unexpected keys is not printed, since the check refuses (or, allowed, names) the differences that matter and the
expected ones pass silently.
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

from ..models.condenser.sentence_transformers_condenser import loading_differences, weights_mismatch
from .folder import folder_file, is_ours, sentence_transformers_settings

logger = logging.getLogger(__name__)

_LOADING_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_LOADING_AUTO_CLASSES = {  # sentence-transformers' ``transformer_task`` -> the transformers Auto class
    "feature-extraction": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "fill-mask": "AutoModelForMaskedLM",
    "text-generation": "AutoModelForCausalLM",
}


class CheckpointWeightsError(ValueError):
    """A checkpoint's weights cannot be read, or lack (or add) tensors of the model it declares."""


class PickledObjectsError(CheckpointWeightsError):
    """A file ``torch.load`` would read holds pickled Python objects besides tensors: it is never unpickled."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PICKLED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


class _LoadReportFilter(logging.Filter):
    """Drops transformers' load report when it lists only missing, unexpected or mismatched keys (which our check
    covers: :func:`refuse_loaded_differences`); a report of conversion errors, which transformers raises on, stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "LOAD REPORT" not in message or "CONVERSION" in message


@contextlib.contextmanager
def load_report_hidden():
    """Meanwhile, transformers' load report of missing and unexpected keys is not printed (module doc): for loads
    whose weights :func:`check_checkpoint_weights` or :func:`refuse_loaded_differences` check."""
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


def loading_file(name_or_path: str, subfolder: str, filename: str) -> str | None:
    """Local path of ``filename`` in a folder or Hub repository (``None`` when it has none)."""
    found = folder_file(name_or_path, filename, subfolder)
    return str(found) if found is not None else None


def _check_module_weight_files(name_or_path: str, modules: list[dict]) -> None:
    """Read the headers of the weight files of a sentence-transformers folder's other modules (``2_Dense``, ...),
    the file sentence-transformers would load (``model.safetensors`` first), so that an unreadable one, or one
    holding pickled objects, is an error naming it before anything is loaded."""
    for module in modules:
        if not module.get("path"):
            continue
        if str(module.get("type", "")).endswith("Transformer"):  # checked with its model (check_checkpoint_weights)
            continue
        for filename in _LOADING_WEIGHT_FILES:
            path = loading_file(name_or_path, str(module["path"]), filename)
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
        single = loading_file(name_or_path, subfolder, filename)
        if single is not None:
            return [single], _loading_file_keys(single)
        index = loading_file(name_or_path, subfolder, f"{filename}.index.json")
        if index is not None:
            try:
                shards = sorted(set(json.loads(Path(index).read_text(encoding="utf-8"))["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise _loading_unreadable(index, error) from None
            files, keys = [], set()
            for shard in shards:
                path = loading_file(name_or_path, subfolder, shard)
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


def refuse_differences(report: dict, *, allow_missing_weights: bool) -> dict:
    """Raise :class:`CheckpointWeightsError` for a report (``files``, ``model_class``, ``missing_keys``,
    ``unexpected_keys``) with differences, with the one message (:func:`weights_mismatch`: the first keys, their
    counts and the fix); with ``allow_missing_weights`` log that instead. Returns ``report``."""
    files = report["files"]
    where = files[0] if len(files) == 1 else f"{Path(files[0]).parent} ({len(files)} shards)"
    message = weights_mismatch(where, report["model_class"], report["missing_keys"], report["unexpected_keys"],
                               allowed=allow_missing_weights)
    if message is None:
        return report
    if allow_missing_weights:
        logger.warning("%s", message)
        return report
    raise CheckpointWeightsError(message)


def refuse_loaded_differences(model, loading_info: dict, files: list[str], *, allow_missing_weights: bool) -> dict:
    """:func:`refuse_differences` of a model just loaded from ``files`` with ``from_pretrained(...,
    output_loading_info=True)`` (``loading_info``), the differences being :func:`loading_differences`; tensors whose
    shape in the file is not the model's (:func:`refuse_other_shapes`) are refused first, whatever
    ``allow_missing_weights`` says. Returns the report (``files``, ``model_class``, ``ours``, ``missing_keys``,
    ``unexpected_keys``, ``unused_missing_keys``: the tensors of a BERT ``pooler`` the checkpoint lacks, which the
    policy lets transformers initialise at random since no encoder uses them)."""
    refuse_other_shapes(type(model).__name__, loading_info, files)
    missing, unexpected = loading_differences(model, loading_info)
    tolerated = set(loading_info.get("missing_keys", ())) - set(missing)
    unused = sorted(key for key in tolerated if key.startswith("pooler."))
    report = {"files": list(files), "model_class": type(model).__name__, "ours": is_ours(model.config),
              "missing_keys": missing, "unexpected_keys": unexpected, "unused_missing_keys": unused}
    return refuse_differences(report, allow_missing_weights=allow_missing_weights)


def refuse_other_shapes(model_class: str, loading_info: dict, files: list[str], shown: int = 3) -> None:
    """:class:`CheckpointWeightsError` (one line) when ``loading_info``'s ``mismatched_keys`` name tensors whose shape
    in ``files`` is not the one ``model_class`` (built from the config beside them) has: weights saved with another
    config (a vocabulary resized after the config was written, a config copied from another model). transformers
    raises a ``RuntimeError`` pointing at its printed report instead; with ``ignore_mismatched_sizes`` it loads them
    at random, which a checked load never does without the caller asking ``from_pretrained`` itself."""
    mismatched = sorted(loading_info.get("mismatched_keys") or (), key=lambda row: str(row[0]))
    if not mismatched:
        return
    where = files[0] if len(files) == 1 else f"{Path(files[0]).parent} ({len(files)} shards)"
    named = ", ".join(f"{key} (file {tuple(saved)}, model {tuple(wanted)})"
                      for key, saved, wanted in mismatched[:shown])
    more = f" and {len(mismatched) - shown} more" if len(mismatched) > shown else ""
    raise CheckpointWeightsError(
        f"{where} does not fit {model_class}, the model its config.json describes: {len(mismatched)} tensors have "
        f"another shape ({named}{more}); save the config with the weights it belongs to (save_pretrained), e.g. "
        "after resize_token_embeddings.")


def checked_load_kwargs(config) -> dict:
    """What a checked load passes to ``from_pretrained`` besides ``output_loading_info=True``: our classes are told
    ``allow_missing_weights=True``, so that the caller, taking the loading report, refuses or names the differences
    (with the same rule and message as their ``StrictLoadingMixin``); other classes take no such flag. Tensors of
    another shape are let through to the report (``ignore_mismatched_sizes``), where :func:`refuse_other_shapes`
    refuses them in one line."""
    return {"ignore_mismatched_sizes": True, **({"allow_missing_weights": True} if is_ours(config) else {})}


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
    encoders, ``AutoModelForSequenceClassification`` for cross-encoders).

    Raises :class:`CheckpointWeightsError` (a ``ValueError``) naming the first missing / unexpected keys,
    their counts and the fix; with ``allow_missing_weights=True`` it logs that instead and the caller loads the
    partial model (under :func:`load_report_hidden`). The model is loaded on the meta device with
    ``output_loading_info`` (module doc). An unreadable weights file (truncated,
    corrupt, or holding pickled objects), of the model or of another sentence-transformers module (``2_Dense``), is
    always an error naming the file. Returns ``{"files", "model_class", "ours", "missing_keys",
    "unexpected_keys"}``, or ``None`` when there is nothing to check (no transformers weights).
    """
    name_or_path = str(name_or_path)
    declared = sentence_transformers_settings(name_or_path)
    _check_module_weight_files(name_or_path, declared.get("modules", []))
    subfolder, task = (declared["transformer_path"], declared["transformer_task"]) if declared else ("", None)
    if subfolder is None:  # no module is a transformers model
        return None
    found = checkpoint_tensor_names(name_or_path, subfolder)
    if found is None:
        return None
    auto = getattr(transformers, _LOADING_AUTO_CLASSES.get(task or "", auto_class))
    location = {"subfolder": subfolder} if subfolder else {}
    config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **location)
    with load_report_hidden():  # the differences that matter are refused (or named) below
        model, info = auto.from_pretrained(name_or_path, config=config, trust_remote_code=trust_remote_code,
                                           device_map="meta", output_loading_info=True, **location,
                                           **checked_load_kwargs(config))
    return refuse_loaded_differences(model, info, found[0], allow_missing_weights=allow_missing_weights)


def from_pretrained_kwargs(report: dict | None, allow_missing_weights: bool) -> dict:
    """What a load that hands back no loading report (sentence-transformers' ``SentenceTransformer``) passes to
    ``from_pretrained`` for the checkpoint that :func:`check_checkpoint_weights` reported: our model classes apply
    the same rule themselves (``StrictLoadingMixin``), so a partial checkpoint of ours that the caller allowed is
    allowed there too (other classes take no such flag).
    """
    differences = report and (report["missing_keys"] or report["unexpected_keys"])
    if allow_missing_weights and differences and report.get("ours"):
        return {"allow_missing_weights": True}
    return {}


__all__ = [
    "CheckpointWeightsError",
    "PickledObjectsError",
    "check_checkpoint_weights",
    "checked_load_kwargs",
    "checkpoint_tensor_names",
    "from_pretrained_kwargs",
    "load_report_hidden",
    "load_tensors_only",
    "loading_differences",
    "loading_file",
    "pickled_weights_fix",
    "refuse_differences",
    "refuse_loaded_differences",
    "refuse_other_shapes",
    "safetensors_sizes",
    "tensor_shapes",
]
