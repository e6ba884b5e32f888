"""What a training run records next to its checkpoint, so model cards can say it without guessing."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

from ..recipes import load_recipe

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
    path = Path(output_dir) / "training_environment.json"
    path.write_text(json.dumps(training_environment(trainer), indent=2) + "\n")
    return path


__all__ = [
    "BF16_ADVICE",
    "FP16_ADVICE",
    "check_mixed_precision",
    "precision_origin",
    "training_environment",
    "training_precision",
    "write_training_environment",
]
