"""Training on ``transformers.Trainer``: pre-training (Condenser / coCondenser) for now."""

from .pretraining import (
    CondenserPreTrainer,
    PreTrainingArguments,
    PreTrainingSetup,
    RandomState,
    build_dataset_and_collator,
    build_model,
    pretrain,
    split_batch,
)

__all__ = [
    "CondenserPreTrainer",
    "PreTrainingArguments",
    "PreTrainingSetup",
    "RandomState",
    "build_dataset_and_collator",
    "build_model",
    "pretrain",
    "split_batch",
]
