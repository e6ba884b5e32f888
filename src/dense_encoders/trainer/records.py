"""What a training run records next to its checkpoint, so model cards can say it without guessing.

* :func:`training_environment`: hardware and precision (``training_environment.json``);
* :func:`public_record`: a setup record with no local path: each model named by
  :func:`~dense_encoders.checkpoints.folder.source_reference` (a Hub id and revision, or a folder's name, the
  whole reference under ``sources``), each data file or folder by its name;
* :func:`write_warm_start`: the backbone a model saved untrained was warm-started from (``warm_start.json``);
* :func:`model_stages` / :func:`write_earlier_stages`: the stages that made the model a run starts from (its
  ``earlier_stages.json`` and its own setup records), copied into the new run's ``earlier_stages.json`` at
  training time, since that folder may be gone when the new run is pushed.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from ..checkpoints.folder import source_reference
from ..data.hub_datasets import names_hub_dataset
from ..data.run_records import (
    EARLIER_STAGES,
    STAGE_RECORDS,
    TRAINER_STATE,
    TRAINING_ENVIRONMENT,
    WARM_START,
    read_record,
    write_record,
)
from ..recipes import load_recipe

# the fields of the setup records that name a model, and those that name a data file or folder (or the run's own)
MODEL_FIELDS = ("student", "backbone", "init_from", "tokenizer", "cross_encoder", "teacher")
DATA_FIELDS = ("train_file", "corpus", "queries", "qrels", "train_data", "output_dir")

# what makes --fp16 or --bf16 train as asked on this machine
FP16_ADVICE = "add --fp16 false to train in fp32, or --fp16 false --bf16 --use_cpu to train in bf16 on the CPU"
BF16_ADVICE = "add --use_cpu to train in bf16 on the CPU, or --bf16 false to train in fp32"


def precision_origin(flag: str, recipe: str | None = None) -> str:
    """``--fp16`` / ``--bf16``, and the recipe that set it when ``recipe`` (a recipe's name) sets it."""
    if recipe is not None:
        try:
            sets = load_recipe(recipe).values().get(flag.lstrip("-")) is True
        except (OSError, ValueError):
            sets = False
        if sets:
            return f"{flag} (recipe {recipe})"
    return flag


def check_mixed_precision(args, recipe: str | None = None) -> None:
    """Refuse ``--fp16`` on a run that trains on the CPU, before anything is loaded: accelerate applies fp16
    mixed precision on GPUs only, so the run would train in fp32 while its records said fp16. The message names
    the fixes (fp32, or bf16, which the CPU runs with ``--use_cpu``); ``recipe``, the run's recipe, is named when
    it set the flag. bf16 on the CPU is a choice of its own and stays."""
    if getattr(args, "fp16", False) and args.device.type == "cpu":
        raise ValueError(f"{precision_origin('--fp16', recipe)}: fp16 mixed precision needs a CUDA GPU, and this run "
                         f"trains on the CPU, where it would train in fp32: {FP16_ADVICE}")


def training_precision(args) -> str:
    """The precision a run trains in: bf16 (a GPU's, or the CPU's with ``--use_cpu``), fp16 (on a GPU only:
    accelerate applies no fp16 autocast on the CPU) or fp32."""
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False) and args.device.type != "cpu":
        return "fp16"
    return "fp32"


def training_environment(trainer) -> dict[str, str | int]:
    """Hardware and precision (the one used, :func:`training_precision`) of a ``transformers.Trainer`` run."""
    args = trainer.args
    device = args.device
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine() or "cpu"
        name = f"{name} CPU, {torch.get_num_threads()} threads"
    return {"device": name, "processes": args.world_size, "precision": training_precision(args),
            "torch": torch.__version__}


def write_training_environment(trainer, output_dir: str | Path) -> Path:
    return write_record(output_dir, TRAINING_ENVIRONMENT, training_environment(trainer))


def public_record(values: dict) -> dict:
    """``values`` (a setup record) without local paths: each model field (:data:`MODEL_FIELDS`) holds the name
    :func:`~dense_encoders.checkpoints.folder.source_reference` gives it, the whole reference
    (``name``, ``hub``, ``revision``) under ``sources``; each data field (:data:`DATA_FIELDS`) holds the file's
    or folder's name, or the id of a Hub dataset (public). Fields already named (under ``sources``) are kept."""
    record = dict(values)
    sources = dict(record.get("sources") or {})
    for key in MODEL_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and key not in sources:
            sources[key] = source_reference(value)
            record[key] = sources[key]["name"]
    for key in DATA_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and value and not names_hub_dataset(value):
            record[key] = Path(value).name or value
    if sources:
        record["sources"] = sources
    return record


def write_warm_start(folder: str | Path, backbone: str | Path, model_class: type,
                     preset: str | None = None) -> Path:
    """``warm_start.json`` in ``folder``, a model of ``model_class`` warm-started from ``backbone``
    (:func:`~dense_encoders.checkpoints.backbones.from_backbone`, with the preset ``preset``) and saved there
    untrained: the run that trains it copies it into its ``earlier_stages.json``, and the card names the backbone
    (:func:`public_record`: a Hub id, or a folder's name)."""
    return write_record(folder, WARM_START, public_record({"model_class": model_class.__name__,
                                                           "backbone": str(backbone), "preset": preset}))


def model_stages(name_or_path: str | Path | None) -> list[dict]:
    """The stages that made the model ``name_or_path``, oldest first, from its folder's records: the stages
    its ``earlier_stages.json`` lists, then its own (``{"model": its name, "optimizer_steps": N, "records":
    {record file: content}}`` of the :data:`STAGE_RECORDS` it holds), every record without local paths.
    Nothing for a Hub id or a folder without records (the card names the model itself)."""
    if name_or_path is None or not Path(name_or_path).is_dir():
        return []
    folder = Path(name_or_path)
    stages = [dict(stage, records={name: _public(record) for name, record in (stage.get("records") or {}).items()})
              for stage in read_record(folder, EARLIER_STAGES) or []]
    records = {name: _public(read_record(folder, name)) for name in STAGE_RECORDS if (folder / name).is_file()}
    if records:
        state = read_record(folder, TRAINER_STATE) or {}
        stages.append({"model": source_reference(folder)["name"], "optimizer_steps": state.get("global_step"),
                       "records": records})
    return stages


def _public(record):
    return public_record(record) if isinstance(record, dict) else record


def write_earlier_stages(output_dir: str | Path, start: str | Path | None) -> Path | None:
    """``earlier_stages.json`` in ``output_dir``: :func:`model_stages` of the model the run started from
    (``start``: the student, the checkpoint continued, the backbone); nothing when it records none."""
    path = Path(output_dir) / EARLIER_STAGES
    stages = model_stages(start)
    path.unlink(missing_ok=True)
    if stages:
        return write_record(output_dir, EARLIER_STAGES, stages)
    return None


__all__ = [
    "BF16_ADVICE",
    "DATA_FIELDS",
    "EARLIER_STAGES",
    "FP16_ADVICE",
    "MODEL_FIELDS",
    "STAGE_RECORDS",
    "check_mixed_precision",
    "model_stages",
    "precision_origin",
    "public_record",
    "training_environment",
    "training_precision",
    "write_earlier_stages",
    "write_training_environment",
    "write_warm_start",
]
