"""Output folders of the reference Condenser code (luyug/Condenser), converted into our Condenser checkpoints.

Condenser (Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval", EMNLP 2021) pre-trains
a BERT through a head of ``n_head_layers`` transformer layers that reads the last layer's CLS vector and the
token states of layer ``skip_from``. The reference code's ``CondenserForPretraining.save_pretrained`` writes:

* the backbone as a plain ``BertForMaskedLM`` checkpoint (``config.json`` with ``model_type`` ``"bert"``,
  ``pytorch_model.bin`` or ``model.safetensors`` holding ``bert.*`` and ``cls.predictions.*``);
* ``model.pt``: ``torch.save`` of the model's state dict without the backbone's ``lm.*`` tensors, i.e. the
  head ``c_head.N.*`` (N ``BertLayer`` state dicts). Its coCondenser class also registered the contrastive
  targets of one batch size as a buffer, ``co_target``, which lands in ``model.pt`` too: it is dropped (our
  loss builds its targets per batch) and the result is a ``CoCondenserForPreTraining``;
* ``args.pt``: the pickled argument objects (``skip_from``, ``late_mlm``, ...). Unpickling runs arbitrary
  code, so it is never read: the head's depth comes from ``model.pt``, ``skip_from`` from the option;
* the tokenizer files (the Trainer adds a pickled ``training_args.bin``, never read either).

The Hub copies (Luyu/condenser, Luyu/co-condenser-marco, Luyu/co-condenser-wiki) are headless: a plain
``BertForMaskedLM`` folder. They convert to a ``CondenserModel`` whose ``conversion.json`` records that it has
no head. A plain BERT *encoder* folder (``BertModel``: no ``cls.predictions.*``) is not claimed: the reference
code always saves the masked-LM head, so such a folder is a warm-start backbone
(``checkpoints.backbones.condenser_from_backbone``), not a Condenser output; nor is an original BERT pre-training
checkpoint (``bert.pooler.*`` or ``cls.seq_relationship.*`` tensors, which ``BertForMaskedLM.save_pretrained``
never writes).
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM
from transformers.models.bert.modeling_bert import BertLayer

from ..models.condenser import CoCondenserForPreTraining, CondenserConfig, CondenserForPreTraining, CondenserModel
from ..models.condenser.modeling_condenser import CONDENSER_ONLY_KEYS
from .folder import TOKENIZER_FILES
from .source_format import ConversionError, SourceFormat, check_config_matches_weights, check_integer_keys
from .weights import (
    CheckpointWeightsError,
    checkpoint_tensor_names,
    load_report_hidden,
    loading_differences,
    tensor_shapes,
)

HEAD_FILE = "model.pt"
NEVER_READ = ("args.pt", "training_args.bin")  # pickled objects the reference code writes
CONTRASTIVE_TARGETS = "co_target"  # coCondenser's buffer of span targets for one batch size
_HEAD_TENSOR = re.compile(r"^c_head\.(\d+)\.(.+)$")
_NOT_WRITTEN_BY_MASKED_LM = ("bert.pooler.", "cls.seq_relationship.")
_BERT_INTEGER_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                      "max_position_embeddings", "type_vocab_size")
_BERT_LAYER = re.compile(r"^bert\.encoder\.layer\.(\d+)\.")
_SHOWN = 5


def _bert_config(folder: Path) -> dict | None:
    """``config.json`` of ``folder`` when its ``model_type`` is ``"bert"`` (never one of ours)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and config.get("model_type") == "bert" else None


def detect(folder: Path) -> bool:
    """A BERT folder with the head file ``model.pt``, or a headless ``BertForMaskedLM`` save (the Hub copies).

    Without weights (or with unreadable ones) the declared architecture decides, so that
    :func:`convert` can name the missing or broken file.
    """
    config = _bert_config(folder)
    if config is None:
        return False
    if os.path.lexists(folder / HEAD_FILE):  # a dangling link too: convert refuses it by name
        return True
    try:
        found = checkpoint_tensor_names(folder)
    except CheckpointWeightsError:
        found = None
    if found is None:
        return "BertForMaskedLM" in (config.get("architectures") or [])
    names = found[1]
    return any(name.startswith("cls.predictions.") for name in names) and not any(
        name.startswith(_NOT_WRITTEN_BY_MASKED_LM) for name in names
    )


def missing_config(folder: Path) -> str | None:
    """For a folder without ``config.json`` whose other files are a reference output's (``model.pt``, or
    ``BertForMaskedLM`` weights: ``bert.*`` and ``cls.predictions.*``), the one line naming the missing file and
    what writes it; otherwise ``None``. The reference code's ``save_pretrained`` writes ``config.json`` together
    with the backbone's weights (``self.lm.save_pretrained``), so a folder without it lost it in copying."""
    if os.path.lexists(folder / "config.json"):
        return None
    has_head = os.path.lexists(folder / HEAD_FILE)
    try:
        found = checkpoint_tensor_names(folder)
    except CheckpointWeightsError:
        found = None
    names = found[1] if found is not None else set()
    masked_lm = any(name.startswith("cls.predictions.") for name in names) and any(
        name.startswith("bert.") for name in names)
    if not (has_head or masked_lm):
        return None
    evidence = [HEAD_FILE] if has_head else []
    evidence += [f"BertForMaskedLM weights ({Path(found[0][0]).name})"] if masked_lm else []
    return (f"{folder} has no config.json, yet holds a luyug/Condenser output folder's {' and '.join(evidence)}: "
            "the reference code's save_pretrained writes config.json with the backbone (BertForMaskedLM."
            "save_pretrained) next to them. Copy config.json from the run's output folder (or, if the run kept the "
            "architecture, from the checkpoint it started from, e.g. bert-base-uncased) into it, then convert again.")


def _listed(names) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:_SHOWN]) + (f", ... (+{len(ordered) - _SHOWN} more)" if len(ordered) > _SHOWN else "")


def _bert_config_object(folder: Path, config: dict) -> BertConfig:
    """The folder's :class:`BertConfig`, its architecture numbers checked first (one line naming the key)."""
    where = str(folder / "config.json")
    check_integer_keys(config, where, _BERT_INTEGER_KEYS)
    hidden, heads = config.get("hidden_size", 768), config.get("num_attention_heads", 12)
    if heads <= 0 or hidden % heads:
        raise ConversionError(f"{where}: num_attention_heads={heads} does not divide hidden_size={hidden}: put back "
                              "the config.json the run saved.")
    try:
        return BertConfig.from_pretrained(folder)
    except Exception as error:  # transformers' strict config validation: the first line names the field
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConversionError(f"{where} is not a valid BERT config ({reason}): put back the config.json the run "
                              "saved.") from None


def _implied_by_weights(shapes: dict[str, tuple[int, ...]]) -> dict:
    """The BERT config numbers the backbone tensors' shapes imply: ``{key: (value, evidence)}``."""
    implied = {}

    def take(name: str, axis: int, *keys: str) -> None:
        if name in shapes and len(shapes[name]) > axis:
            for key in keys:
                implied[key] = (shapes[name][axis], f"{name} has shape {shapes[name]}")

    take("bert.embeddings.word_embeddings.weight", 0, "vocab_size")
    take("bert.embeddings.word_embeddings.weight", 1, "hidden_size")
    take("bert.embeddings.position_embeddings.weight", 0, "max_position_embeddings")
    take("bert.embeddings.token_type_embeddings.weight", 0, "type_vocab_size")
    take("bert.encoder.layer.0.intermediate.dense.weight", 0, "intermediate_size")
    layers = {int(match.group(1)) for name in shapes if (match := _BERT_LAYER.match(name))}
    if layers:
        implied["num_hidden_layers"] = (max(layers) + 1, f"layers bert.encoder.layer.0-{max(layers)}")
    return implied


def _backbone_weights(folder: Path, config: dict, bert_config) -> list[str]:
    """The weight files of a complete ``BertForMaskedLM`` in ``folder`` (header names and shapes checked
    against ``config.json``), or an error."""
    try:
        found = checkpoint_tensor_names(folder)
        if found is not None:
            check_config_matches_weights(config, _implied_by_weights(tensor_shapes(found[0])),
                                         str(folder / "config.json"), ", ".join(Path(f).name for f in found[0]))
    except CheckpointWeightsError as error:
        raise ConversionError(str(error)) from None
    if found is None:
        raise ConversionError(
            f"{folder} has no backbone weights (model.safetensors or pytorch_model.bin) next to config.json: "
            "copy the complete output folder of the run (its save_pretrained writes them)."
        )
    files = found[0]
    with load_report_hidden():  # the differences are named below; on the meta device no tensor data is read
        model, info = BertForMaskedLM.from_pretrained(folder, config=bert_config, device_map="meta",
                                                      output_loading_info=True)
    missing, unexpected = loading_differences(model, info)
    if missing or unexpected:
        problems = [f"{len(missing)} missing ({_listed(missing)})"] if missing else []
        problems += [f"{len(unexpected)} not in it ({_listed(unexpected)})"] if unexpected else []
        raise ConversionError(
            f"{files[0]} is not a complete BertForMaskedLM, the backbone the reference code saves: tensors "
            f"{'; '.join(problems)}. Copy the run's complete output folder again."
        )
    return files


def _load_head_file(path: Path) -> dict:
    """``model.pt`` read with ``weights_only=True``: a dict of tensors, or an error naming what else it holds."""
    fix = (
        "Put back the model.pt the run's save_pretrained wrote, or re-save only the head's tensors: "
        "torch.save({name: tensor for the c_head.N.* tensors}, 'model.pt')."
    )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as error:
        reason = type(error).__name__
        raise ConversionError(
            f"{path} is not a plain dict of tensors ({reason} under torch.load(weights_only=True): pickled "
            f"objects, which are never unpickled, or a truncated file). {fix}"
        ) from None
    if not isinstance(state, dict):
        raise ConversionError(f"{path} holds a {type(state).__name__}, not a dict of tensors. {fix}")
    not_tensors = [str(key) for key, value in state.items() if not isinstance(value, torch.Tensor)]
    if not_tensors:
        raise ConversionError(f"{path} holds entries that are not tensors: {_listed(not_tensors)}. {fix}")
    return state


def _read_head(path: Path, bert_config) -> tuple[dict, int, list[str]]:
    """``(c_head tensors by name, number of head layers, dropped names)`` from the reference ``model.pt``.

    Every layer ``0..N-1`` must hold exactly the tensors of a ``BertLayer`` of the backbone's width.
    """
    state = _load_head_file(path)
    layers: dict[int, dict] = {}
    dropped, foreign = [], []
    for name, tensor in state.items():
        match = _HEAD_TENSOR.match(str(name))
        if match:
            layers.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
        elif name == CONTRASTIVE_TARGETS and tensor.dim() == 1 and not tensor.is_floating_point():
            dropped.append(name)
        else:
            foreign.append(str(name))
    if foreign:
        raise ConversionError(
            f"{path} holds tensors that are not Condenser head layers (c_head.N.*): {_listed(foreign)}. It is not "
            f"the head file of a luyug/Condenser run: remove it, or put that run's model.pt in its place."
        )
    if not layers:
        raise ConversionError(f"{path} holds no c_head.N.* tensors: put the run's model.pt (the head) in its place.")
    gaps = sorted(set(range(max(layers) + 1)) - set(layers))
    if gaps:
        raise ConversionError(
            f"{path} has head layers {sorted(layers)} but not {gaps}: the layers of a head are numbered 0..N-1 "
            "without gaps, so the file is incomplete. Copy the run's model.pt again."
        )
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in BertLayer(bert_config).state_dict().items()}
    for index in sorted(layers):
        given = layers[index]
        absent, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
        if absent or extra:
            raise ConversionError(
                f"{path}: head layer c_head.{index} is not a BertLayer (missing {_listed(absent) or 'nothing'}; "
                f"unknown {_listed(extra) or 'nothing'}). Copy the run's model.pt again."
            )
        for suffix, shape in expected.items():
            if tuple(given[suffix].shape) != shape:
                raise ConversionError(
                    f"{path}: c_head.{index}.{suffix} has shape {tuple(given[suffix].shape)}, but the backbone "
                    f"(hidden_size {bert_config.hidden_size}, intermediate_size {bert_config.intermediate_size}) "
                    f"needs {shape}: model.pt belongs to another run. Put this run's model.pt next to its weights."
                )
    head = {f"c_head.{index}.{suffix}": t for index, given in layers.items() for suffix, t in given.items()}
    return head, len(layers), dropped


def _resolve_skip_from(skip_from, num_layers: int, folder: Path) -> int:
    """The option, or ``condenser_from_backbone``'s default: half the backbone depth (the
    paper's 6 for BERT-base). The run's own value sits in ``args.pt``, which is never unpickled."""
    value = max(1, num_layers // 2) if skip_from is None else skip_from
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < num_layers:
        origin = "the default, half the depth" if skip_from is None else "given"
        raise ConversionError(
            f"skip_from={value!r} ({origin}) does not fit the {num_layers}-layer backbone of {folder}: the head reads "
            f"an early layer's output, 1 <= skip_from <= {num_layers - 1}. Pass --skip-from with the run's value "
            "(the paper: 6 of BERT-base's 12 layers)."
        )
    return value


def convert(source: Path, output: Path, *, skip_from: int | None = None) -> dict:
    """Write the reference output folder ``source`` as one safetensors checkpoint of ours into ``output``.

    With ``model.pt``: a ``CondenserForPreTraining`` (``CoCondenserForPreTraining`` when the file holds
    coCondenser's ``co_target``) whose head is the file's ``c_head.N.*``, ``n_head_layers`` = N and
    ``skip_from`` as given (default: see :func:`_resolve_skip_from`). Without it (the Hub copies): a
    ``CondenserModel``, the encoder only; ``skip_from`` is then refused, as there is no head it applies to.
    Backbone and MLM head are copied exactly, in the source's precision; ``late_mlm`` keeps the paper's
    setting (on). The source's tokenizer is saved alongside.
    """
    raw_config = _bert_config(source)
    if raw_config is None:
        raise ConversionError(f"{source}/config.json is missing or not a BERT config (model_type 'bert').")
    bert_config = _bert_config_object(source, raw_config)
    files = _backbone_weights(source, raw_config, bert_config)
    if not any((source / name).is_file() for name in TOKENIZER_FILES):
        raise ConversionError(
            f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...): copy those of the checkpoint "
            "the run started from (e.g. bert-base-uncased) into it."
        )
    has_head = os.path.lexists(source / HEAD_FILE)
    if has_head and not (source / HEAD_FILE).is_file():
        target = os.readlink(source / HEAD_FILE) if (source / HEAD_FILE).is_symlink() else None
        what = f"a symbolic link to {target}, which does not exist" if target and not (source / HEAD_FILE).exists() \
            else "not a file"
        raise ConversionError(
            f"{source / HEAD_FILE} is {what}: the Condenser head is not there, and converting without it would "
            f"drop the head silently. Put the run's model.pt (the head) in its place, or remove {HEAD_FILE} to "
            "convert the encoder alone."
        )
    if not has_head and skip_from is not None:
        raise ConversionError(
            f"skip_from={skip_from!r} applies to the Condenser head, and {source} has none (no {HEAD_FILE}): "
            "drop --skip-from."
        )
    head, n_head_layers, dropped = _read_head(source / HEAD_FILE, bert_config) if has_head else ({}, 2, [])
    settings = {k: v for k, v in bert_config.to_dict().items() if k not in CONDENSER_ONLY_KEYS}
    settings.pop("transformers_version", None)
    num_layers = bert_config.num_hidden_layers
    config = CondenserConfig(**{**settings, "n_head_layers": n_head_layers,
                                "skip_from": _resolve_skip_from(skip_from if has_head else None, num_layers, source)})
    source_model = BertForMaskedLM.from_pretrained(source)
    if has_head:
        model_class = CoCondenserForPreTraining if CONTRASTIVE_TARGETS in dropped else CondenserForPreTraining
        model = model_class(config).to(source_model.dtype)
        model.load_state_dict({**source_model.state_dict(), **head}, strict=True)
    else:
        model = CondenserModel(config).to(source_model.dtype)
        model.load_state_dict(source_model.bert.state_dict(), strict=True)
    model.save_pretrained(output)
    AutoTokenizer.from_pretrained(source).save_pretrained(output)
    facts = {
        "architecture": type(model).__name__,
        "has_condenser_head": has_head,
        "source_weights": ", ".join(Path(f).name for f in files),
        "dtype": str(source_model.dtype).removeprefix("torch."),
        "not_read": [name for name in NEVER_READ if (source / name).exists()],
    }
    if has_head:
        facts.update(head_layers=n_head_layers, skip_from=config.skip_from,
                      skip_from_given=skip_from is not None, dropped=dropped)
    return facts


CONDENSER_REFERENCE = SourceFormat(
    name="condenser-reference",
    description="luyug/Condenser output folder: BertForMaskedLM weights, the head in model.pt (or a headless Hub copy)",
    detect=detect,
    convert=convert,
    loads_as_is=True,  # as it is, the folder is the BERT encoder the reference code trained
    incomplete=missing_config,
)

__all__ = ["CONDENSER_REFERENCE", "convert", "detect", "missing_config"]
