"""The fields our ``TrainingArguments`` subclasses (pre-training, distillation) add to transformers' own."""

from __future__ import annotations

from dataclasses import field


def overwrite_output_dir_field():
    """The ``--overwrite_output_dir`` field of our TrainingArguments subclasses (transformers 5 has none)."""
    return field(
        default=False,
        metadata={
            "help": "Delete the contents of --output_dir before training. Without it, a non-empty --output_dir is "
            "refused unless --resume_from_checkpoint names a checkpoint inside it (or 'latest')."
        },
    )


def resume_from_checkpoint_field():
    """The ``--resume_from_checkpoint`` field of our TrainingArguments subclasses, with its help text."""
    return field(
        default=None,
        metadata={
            "help": "Continue a run: a checkpoint-N folder (optimizer, scheduler and RNG state included; a warning "
            "names what is missing), or 'latest' for the newest checkpoint-N in --output_dir."
        },
    )


__all__ = ["overwrite_output_dir_field", "resume_from_checkpoint_field"]
