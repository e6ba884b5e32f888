"""What ``dense-encoders pretrain ARCHITECTURE`` takes: :class:`PreTrainingSetup` (model source, corpus, masking)
and :class:`PreTrainingTrainerFields`, the fields :class:`~dense_encoders.trainer.PreTrainingArguments` adds to
transformers' ``TrainingArguments`` or gives other defaults (the paper's recipe)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models.condenser.presets import CONDENSER_PRESETS
from ..models.tite.presets import TINY_PRESETS, TITE_PRESETS
from ..recipes import RECIPE_HELP
from .datasets import dataset_revision_field
from .training import overwrite_output_dir_field, resume_from_checkpoint_field

ARCHITECTURE_NAMES = ("condenser", "cocondenser", "tite")
PRESETS = {
    "condenser": sorted(CONDENSER_PRESETS),
    "cocondenser": sorted(CONDENSER_PRESETS),
    "tite": sorted(TITE_PRESETS) + sorted(TINY_PRESETS),
}
DEFAULT_PRESETS = {"condenser": "tiny", "cocondenser": "tiny", "tite": "tite-2-late"}
# the fields of PreTrainingSetup / PreTrainingTrainerFields only some architectures read (the others: all)
ARCHITECTURES_OF_FIELD = {
    "n_head_layers": ("condenser", "cocondenser"),
    "skip_from": ("condenser", "cocondenser"),
    "late_mlm": ("condenser", "cocondenser"),
    "min_span_tokens": ("cocondenser",),
    "max_span_tokens": ("cocondenser",),
    "grad_cache_chunk_size": ("cocondenser",),
}


def preset_help(architecture: str | None = None) -> str:
    """The text of ``--preset``: each architecture's presets and default, or ``architecture``'s only."""
    notes = {"tite": "; with --backbone it gives the pooling schedule"}
    listed = [f"{name} {', '.join(PRESETS[name])} (default {DEFAULT_PRESETS[name]}{notes.get(name, '')})"
              for name in ([architecture] if architecture else ARCHITECTURE_NAMES)]
    return "Config preset: " + "; ".join(listed) + "."


def unread_fields(architecture: str) -> set[str]:
    """The fields of :data:`ARCHITECTURES_OF_FIELD` that ``architecture`` does not read."""
    return {name for name, architectures in ARCHITECTURES_OF_FIELD.items() if architecture not in architectures}


@dataclass
class PreTrainingSetup:
    """What to pre-train on what: model source, corpus and masking (``dense-encoders pretrain``)."""

    architecture: str = field(default="condenser", metadata={"help": "condenser, cocondenser or tite."})
    recipe: str | None = field(default=None, metadata={"help": RECIPE_HELP})
    backbone: str | None = field(
        default=None,
        metadata={"help": "BERT-family checkpoint (folder or Hub id) to warm-start from (paper: bert-base-uncased)."},
    )
    init_from: str | None = field(
        default=None, metadata={"help": "A saved pre-training checkpoint (with its heads) to continue from."}
    )
    preset: str | None = field(default=None, metadata={"help": preset_help()})
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Tokenizer folder or id; defaults to the backbone's, else the bundled bert-base-uncased."},
    )
    corpus: str | None = field(
        default=None,
        metadata={"help": "Text (.txt line per document), .jsonl (text/title), .parquet (each also .gz) or a folder of "
                  "them, or a Hub dataset id in BEIR's or MTEB's layout (BeIR/scifact: its corpus, streamed from the "
                  "Hub with --streaming); default: the bundled corpus."},
    )
    dataset_revision: str | None = dataset_revision_field()
    streaming: bool = field(default=False, metadata={"help": "Stream the corpus (large files; needs --max_steps)."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per sequence incl. [CLS]/[SEP]."})
    mlm_probability: float | None = field(
        default=None,
        metadata={"help": "Whole-word masking rate of the input (default: condenser and cocondenser 0.15, as in the "
                  "Condenser paper; tite 0, no input masking)."},
    )
    n_head_layers: int = field(default=2, metadata={"help": "Condenser head layers (paper: 2)."})
    skip_from: int | None = field(
        default=None, metadata={"help": "Early layer feeding the head (default: half the depth; the paper: 6 of 12)."})
    late_mlm: bool = field(default=True, metadata={"help": "Add the backbone's own MLM loss (paper: on)."})
    min_span_tokens: int = field(default=80, metadata={"help": "coCondenser: shortest span in tokens."})
    max_span_tokens: int = field(default=128, metadata={"help": "coCondenser: longest span in tokens."})

    def __post_init__(self):
        if self.architecture not in ARCHITECTURE_NAMES:
            raise ValueError(f"architecture={self.architecture!r}: choose one of {sorted(ARCHITECTURE_NAMES)}.")
        if self.backbone and self.init_from:
            raise ValueError("Give either --backbone (warm start from BERT) or --init_from (a Condenser checkpoint).")
        if self.preset is not None and self.preset not in PRESETS[self.architecture]:
            raise ValueError(
                f"Unknown {self.architecture} preset {self.preset!r}; choose one of {PRESETS[self.architecture]}."
            )
        if self.mlm_probability is None:
            self.mlm_probability = 0.0 if self.architecture == "tite" else 0.15


@dataclass
class PreTrainingTrainerFields:
    """The fields :class:`~dense_encoders.trainer.PreTrainingArguments` adds to ``TrainingArguments`` (the gradient
    cache switch, the output folder's rules) or gives the Condenser paper's defaults."""

    grad_cache_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "coCondenser only: encode each batch in chunks of this many spans without a graph, "
            "compute the contrastive loss over the whole batch, then re-run chunk by chunk with the cached "
            "representation gradients. Parameter gradients equal the un-chunked step's; memory is one chunk's."
        },
    )
    remove_unused_columns: bool = field(default=False, metadata={"help": "Batches come from our collators."})
    # paper recipe (Gao & Callan 2021): lr 1e-4, 10 % warm-up, weight decay 0.01
    learning_rate: float = field(default=1e-4, metadata={"help": "Peak learning rate (paper: 1e-4)."})
    warmup_steps: float = field(default=0.1, metadata={"help": "Warm-up: a fraction of training if < 1 (paper: 0.1)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (paper: 0.01)."})
    overwrite_output_dir: bool = overwrite_output_dir_field()
    resume_from_checkpoint: str | None = resume_from_checkpoint_field()


__all__ = ["ARCHITECTURES_OF_FIELD", "ARCHITECTURE_NAMES", "DEFAULT_PRESETS", "PRESETS", "PreTrainingSetup",
           "PreTrainingTrainerFields", "preset_help", "unread_fields"]
