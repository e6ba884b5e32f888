"""The records a run writes next to what it made: the one place that names them, writes them and reads them
back, each through :mod:`dense_encoders.data.files` (written whole or not at all).

Which run writes which record, in its output folder:

* ``dense-encoders convert``: :data:`CONVERSION` (the source and what the conversion did);
* a model warm-started from a backbone and saved untrained (``dense-encoders quickstart``'s TITE student's
  start): :data:`WARM_START` (the backbone, the model class and preset);
* every training run: :data:`TRAINER_STATE` (transformers writes it), :data:`TRAINING_ARGS` (the
  ``TrainingArguments``, keys sorted), :data:`TRAINING_ENVIRONMENT` (hardware and precision),
  :data:`EARLIER_STAGES` (the stages that made the model the run started from);
* pre-training: :data:`PRETRAINING_SETUP`;
* distillation: :data:`DISTILLATION_SETUP`, :data:`DISTILLATION_LOSSES`, :data:`DISTILLATION_POSITIVES`;
* infusion (``dense-encoders infuse``): :data:`INFUSION_SETUP` and the retrieve + rerank :data:`INFUSION_REPORT`;
* evaluation: results JSONs (:func:`write_results`), which a model card reports when they are passed to it or lie
  in the folder's :data:`EVALUATION_FOLDER`.

:func:`read_run_records` reads all of them at once into :class:`RunRecords`, which the model card is made from.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import read_json, write_json

CONVERSION = "conversion.json"
TRAINER_STATE = "trainer_state.json"
TRAINING_ARGS = "training_args.json"
TRAINING_ENVIRONMENT = "training_environment.json"
PRETRAINING_SETUP = "pretraining_setup.json"
DISTILLATION_SETUP = "distillation_setup.json"
DISTILLATION_LOSSES = "distillation_losses.json"
DISTILLATION_POSITIVES = "distillation_positives.json"
INFUSION_SETUP = "infusion_setup.json"
WARM_START = "warm_start.json"
EARLIER_STAGES = "earlier_stages.json"
INFUSION_REPORT = "report.json"
EVALUATION_FOLDER = "evaluation"
# the "format" of an evaluation results JSON (``evaluation.harness.RetrievalResults``); a card reports every version
RESULTS_FORMAT = "dense-encoders/retrieval-results/1"
_RESULTS_FORMATS = RESULTS_FORMAT.rsplit("/", 1)[0]

# the records of a run the card is generated from (kept local by a push: the card says what they record)
RECORD_FILES = (CONVERSION, TRAINER_STATE, TRAINING_ARGS, TRAINING_ENVIRONMENT, PRETRAINING_SETUP,
                DISTILLATION_SETUP, DISTILLATION_LOSSES, DISTILLATION_POSITIVES, INFUSION_SETUP, EARLIER_STAGES,
                INFUSION_REPORT, WARM_START)
# the records of a folder that say how its model was made (one stage of :data:`EARLIER_STAGES`)
STAGE_RECORDS = (CONVERSION, WARM_START, PRETRAINING_SETUP, DISTILLATION_SETUP, DISTILLATION_LOSSES, INFUSION_SETUP)
# the records written with their keys sorted (the others keep the order the run gave them)
_SORTED_RECORDS = (TRAINING_ARGS,)


def write_record(folder: str | Path, name: str, value: Any) -> Path:
    """The record ``name`` (one of :data:`RECORD_FILES`) in ``folder``: ``value`` as JSON indented by two spaces,
    in the key order given (sorted for :data:`TRAINING_ARGS`); returns its path."""
    if name not in RECORD_FILES:
        raise ValueError(f"{name} is not a run record; expected one of {', '.join(RECORD_FILES)}")
    path = Path(folder) / name
    write_json(path, value, sort_keys=name in _SORTED_RECORDS)
    return path


def read_record(folder: str | Path, name: str) -> Any | None:
    """The record ``name`` of ``folder``; None when the folder has none."""
    return read_json(Path(folder) / name)


def write_results(path: str | Path, results: dict) -> Path:
    """An evaluation results JSON at ``path`` (its folder made when missing): indented, in the key order given,
    non-ASCII characters as they are."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, results, sort_keys=False, ensure_ascii=False)
    return path


def read_results(path: str | Path) -> Any:
    """The JSON value of the results file ``path``; a missing file is a ``FileNotFoundError`` naming it."""
    value = read_json(path)
    if value is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    return value


def evaluation_results(folder: str | Path, results: list | None = None) -> list[tuple[str, dict]]:
    """``(where, results JSON)`` of the evaluation results a card of ``folder`` reports: ``results`` (paths or
    mappings), then the folder's :data:`EVALUATION_FOLDER` ``/*.json``; files of another format are skipped."""
    loaded = []
    for item in list(results or []) + sorted((Path(folder) / EVALUATION_FOLDER).glob("*.json")):
        data = item if isinstance(item, dict) else read_results(item)
        if data.get("format", "").startswith(_RESULTS_FORMATS):
            loaded.append(("the results given" if isinstance(item, dict) else str(item), data))
    return loaded


@dataclass
class RunRecords:
    """Everything a folder records about the run that made it (each None, or empty, when not recorded)."""

    conversion: dict | None = None
    warm_start: dict | None = None
    trainer_state: dict | None = None
    training_args: dict | None = None
    training_environment: dict | None = None
    pretraining: dict | None = None
    distillation: dict | None = None
    distillation_losses: list = field(default_factory=list)
    distillation_positives: dict | None = None
    infusion: dict | None = None
    infusion_report: Any = None
    earlier_stages: list = field(default_factory=list)
    evaluations: list[tuple[str, dict]] = field(default_factory=list)


def read_run_records(folder: str | Path, results: list | None = None) -> RunRecords:
    """The :class:`RunRecords` of ``folder``, with the evaluation results of :func:`evaluation_results`."""
    folder = Path(folder)
    return RunRecords(
        conversion=read_record(folder, CONVERSION),
        warm_start=read_record(folder, WARM_START),
        trainer_state=read_record(folder, TRAINER_STATE),
        training_args=read_record(folder, TRAINING_ARGS),
        training_environment=read_record(folder, TRAINING_ENVIRONMENT),
        pretraining=read_record(folder, PRETRAINING_SETUP),
        distillation=read_record(folder, DISTILLATION_SETUP),
        distillation_losses=read_record(folder, DISTILLATION_LOSSES) or [],
        distillation_positives=read_record(folder, DISTILLATION_POSITIVES),
        infusion=read_record(folder, INFUSION_SETUP),
        infusion_report=read_record(folder, INFUSION_REPORT),
        earlier_stages=read_record(folder, EARLIER_STAGES) or [],
        evaluations=evaluation_results(folder, results),
    )


__all__ = [
    "CONVERSION",
    "DISTILLATION_LOSSES",
    "DISTILLATION_POSITIVES",
    "DISTILLATION_SETUP",
    "EARLIER_STAGES",
    "EVALUATION_FOLDER",
    "INFUSION_REPORT",
    "INFUSION_SETUP",
    "PRETRAINING_SETUP",
    "RECORD_FILES",
    "RESULTS_FORMAT",
    "STAGE_RECORDS",
    "TRAINER_STATE",
    "TRAINING_ARGS",
    "TRAINING_ENVIRONMENT",
    "WARM_START",
    "RunRecords",
    "evaluation_results",
    "read_record",
    "read_results",
    "read_run_records",
    "write_record",
    "write_results",
]
