"""Training on ``transformers.Trainer``: Condenser / coCondenser / TITE pre-training and score distillation.

The files it reads live in :mod:`dense_encoders.data` (``read_training_file`` is re-exported here).
"""

from ..data.distillation import read_training_file
from .distillation import (
    DistillationArguments,
    DistillationSetup,
    DistillationTrainer,
    DualEncoder,
    build_student,
    distill,
)
from .losses import (
    LOSSES,
    DistillationObjective,
    infonce_loss,
    kl_divergence_loss,
    m3se_loss,
    margin_mse_loss,
    mse_loss,
    parse_loss_spec,
    rankdistil_b_loss,
    softmax_cross_entropy_loss,
)
from .pretraining import (
    PreTrainingTrainer,
    PreTrainingArguments,
    PreTrainingSetup,
    RandomState,
    build_dataset_and_collator,
    build_model,
    pretrain,
    split_batch,
)
from .teacher import score_teacher

__all__ = [
    "LOSSES",
    "PreTrainingTrainer",
    "DistillationArguments",
    "DistillationObjective",
    "DistillationSetup",
    "DistillationTrainer",
    "DualEncoder",
    "PreTrainingArguments",
    "PreTrainingSetup",
    "RandomState",
    "build_dataset_and_collator",
    "build_model",
    "build_student",
    "distill",
    "infonce_loss",
    "kl_divergence_loss",
    "m3se_loss",
    "margin_mse_loss",
    "mse_loss",
    "parse_loss_spec",
    "pretrain",
    "rankdistil_b_loss",
    "read_training_file",
    "score_teacher",
    "softmax_cross_entropy_loss",
    "split_batch",
]
