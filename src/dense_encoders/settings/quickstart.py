"""What ``dense-encoders quickstart`` (:func:`dense_encoders.quickstart.run_quickstart`) takes."""

from __future__ import annotations

from dataclasses import dataclass


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


__all__ = ["QuickstartSettings"]
