"""Training on ``transformers.Trainer``: Condenser / coCondenser / TITE pre-training and score distillation.

The files it reads are read by :mod:`dense_encoders.data`; the distillation losses are
:mod:`dense_encoders.trainer.losses` (one file each).
"""

from .distillation import (
    DistillationArguments,
    DistillationSetup,
    DistillationTrainer,
    DualEncoder,
    build_student,
    distill,
)
from .pretraining import (
    PreTrainingArguments,
    PreTrainingSetup,
    PreTrainingTrainer,
    RandomState,
    build_dataset_and_collator,
    build_model,
    pretrain,
    split_batch,
)
from .teacher import score_teacher

__all__ = [
    "DistillationArguments",
    "DistillationSetup",
    "DistillationTrainer",
    "DualEncoder",
    "PreTrainingArguments",
    "PreTrainingSetup",
    "PreTrainingTrainer",
    "RandomState",
    "build_dataset_and_collator",
    "build_model",
    "build_student",
    "distill",
    "pretrain",
    "score_teacher",
    "split_batch",
]
