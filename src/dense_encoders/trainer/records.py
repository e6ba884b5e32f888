"""What a training run records next to its checkpoint, so model cards can say it without guessing."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch


def training_environment(trainer) -> dict[str, str | int]:
    """Hardware and precision of a ``transformers.Trainer`` run."""
    args = trainer.args
    device = args.device
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine() or "cpu"
        name = f"{name} CPU, {torch.get_num_threads()} threads"
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    return {"device": name, "processes": args.world_size, "precision": precision, "torch": torch.__version__}


def write_training_environment(trainer, output_dir: str | Path) -> Path:
    path = Path(output_dir) / "training_environment.json"
    path.write_text(json.dumps(training_environment(trainer), indent=2) + "\n")
    return path


__all__ = ["training_environment", "write_training_environment"]
