"""A run of several processes (``torchrun``, ``accelerate launch``) trains one model: DDP across them, on any device.

transformers' ``TrainingArguments`` start DDP on the CPU only with ``use_cpu``. On a machine without an accelerator,
``torchrun`` without that flag starts the process group but leaves each process a model of its own (accelerate's
``NOT_PARALLEL``): gradients are never averaged, while the losses gather vectors across the processes, so every
process trains a replica of its own, and only process 0's is saved (a resumed run then restarts the others from it).
:class:`OneModelTrainingArguments` turns such a launch into DDP on the CPU, and refuses, before anything is written,
any other launch that would still leave the processes unsynchronised.
"""

from __future__ import annotations

import logging
import os

import torch
from transformers import TrainingArguments
from transformers.training_args import ParallelMode

logger = logging.getLogger(__name__)


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def accelerator_available() -> bool:
    """Whether this machine has a device other than the CPU that torch can train on (CUDA, XPU, MPS, ...)."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


class OneModelTrainingArguments(TrainingArguments):
    """``TrainingArguments`` whose multi-process runs train one model (module docstring): on a machine without an
    accelerator they train on the CPU with DDP (as ``use_cpu`` asks), and a launch that transformers would still
    leave unsynchronised is refused with one line."""

    def __post_init__(self):
        processes = launched_processes()
        if processes > 1 and not self.use_cpu and not accelerator_available():
            self.use_cpu = True  # the processes' only device: DDP on the CPU, as --use_cpu sets it up
            if os.environ.get("RANK", "0") == "0":
                logger.warning("%d processes on a machine without a GPU: training one model on the CPU with DDP "
                               "(--use_cpu)", processes)
        super().__post_init__()
        if processes > 1 and self.parallel_mode == ParallelMode.NOT_PARALLEL:
            raise ValueError(
                f"{processes} processes were launched, but transformers set up no distributed training for them on "
                f"{self.device}: each would train a model of its own; give each process its own GPU, or add "
                "--use_cpu to train one model on the CPU with DDP")


__all__ = ["OneModelTrainingArguments", "accelerator_available", "launched_processes"]
