"""One run per output folder: ``pretrain``, ``distill``, ``infuse`` and ``quickstart`` share these rules.

* A training command writes into a folder that is missing or empty, or that it resumes
  (``--resume_from_checkpoint`` names a checkpoint inside it, or ``latest``). Any other non-empty
  folder is refused (:class:`OutputDirError`, a ``ValueError`` the CLI prints as one message) before
  anything is loaded or created, so nothing of a refused run is left behind.
* ``--overwrite_output_dir`` deletes the folder's contents first (the processes that save do it, the
  others wait; all processes of a ``torchrun`` agree on rank 0's verdict). It never deletes the folder
  the user works in, the checkpoint a run resumes from, or an input the run reads.
* A checkpoint without its optimizer, scheduler or RNG state is resumed with a warning: the run will
  not continue the same way. One whose state files hold pickled objects is refused before anything is
  loaded (they are never unpickled; :func:`refuse_pickled_resume_state`).
* Training arguments are saved as JSON (``training_args.json``), never as the Trainer's pickle
  (``training_args.bin``).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import torch.distributed as dist
from transformers.trainer_pt_utils import safe_globals

from ..checkpoints.weights import PickledObjectsError, load_tensors_only

logger = logging.getLogger(__name__)

TRAINING_ARGS_JSON = "training_args.json"
TRAINING_ARGS_PICKLE = "training_args.bin"
RESUME_LATEST = ("latest", "last", "true")  # --resume_from_checkpoint latest: the newest checkpoint-N of the folder
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# what Trainer.train(resume_from_checkpoint=...) reads with torch.load(weights_only=True), besides the weights
_RESUME_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth)$")


class OutputDirError(ValueError):
    """The output folder cannot be used as asked (the message names the folder and the fix)."""


@dataclass(frozen=True)
class Flags:
    """How a command spells its output-folder flags (HfArgumentParser: underscores; argparse: dashes)."""

    output_dir: str = "--output_dir"
    overwrite: str = "--overwrite_output_dir"
    resume: str | None = "--resume_from_checkpoint"


TRAINER_FLAGS = Flags()
DASHED_FLAGS = Flags("--output-dir", "--overwrite-output-dir", None)


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


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both resolved)."""
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def checkpoints(folder: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``folder``, oldest step first."""
    folder = Path(folder)
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()] \
        if folder.is_dir() else []
    return [p for _, p in sorted(found)]


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... {len(names)} entries" if len(names) > limit else "")


def resolve_resume(output_dir: str | Path, resume_from_checkpoint: str | bool | None, flags: Flags = TRAINER_FLAGS
                   ) -> Path | None:
    """The checkpoint folder a run resumes from: ``latest`` (or ``True``) is the newest ``checkpoint-N``
    of ``output_dir``; a path must be a Trainer checkpoint (``trainer_state.json``)."""
    if resume_from_checkpoint in (None, False, "") or str(resume_from_checkpoint).lower() in ("false", "none"):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in RESUME_LATEST:
        found = checkpoints(output_dir)
        if not found:
            raise OutputDirError(f"{flags.resume} {resume_from_checkpoint}: {output_dir} holds no checkpoint-N folder "
                                 "to resume from.")
        return found[-1]
    checkpoint = Path(resume_from_checkpoint)
    if not checkpoint.is_dir():
        raise OutputDirError(f"{flags.resume} {checkpoint}: no such folder.")
    if not (checkpoint / "trainer_state.json").is_file():
        raise OutputDirError(f"{flags.resume} {checkpoint}: not a Trainer checkpoint (no trainer_state.json); "
                             "name a checkpoint-N folder, or 'latest'.")
    return checkpoint


def check_output_dir(
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    resume_from_checkpoint: str | bool | None = None,
    inputs: Iterable[str | Path | None] = (),
    flags: Flags = TRAINER_FLAGS,
) -> Path | None:
    """Decide (reading only) whether a run may write into ``output_dir``; returns the checkpoint it resumes
    from. Raises :class:`OutputDirError` when the folder holds another run, or when ``overwrite`` would delete
    the working directory, the resumed checkpoint or one of ``inputs`` (paths the run reads)."""
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise OutputDirError(f"{flags.output_dir} {folder} is a file, not a folder: choose a folder.")
    checkpoint = resolve_resume(folder, resume_from_checkpoint, flags)
    if checkpoint is not None:
        refuse_pickled_resume_state(checkpoint)
    names = _entries(folder)
    if overwrite:
        if names:
            if _inside(Path.cwd(), folder) or folder.resolve() == Path.home().resolve():
                raise OutputDirError(f"{flags.overwrite} would delete everything in {folder}, which holds the current "
                                     f"directory or is the home folder: choose a dedicated {flags.output_dir}.")
            if checkpoint is not None and _inside(checkpoint, folder):
                raise OutputDirError(f"{flags.overwrite} would delete {checkpoint}, the checkpoint "
                                     f"{flags.resume} resumes from: give one of the two flags.")
            for source in inputs:
                if source and Path(source).exists() and _inside(Path(source), folder):
                    raise OutputDirError(f"{flags.overwrite} would delete {source}, which this run reads: choose "
                                         f"another {flags.output_dir} or move {source} out of {folder}.")
        return checkpoint
    if not names or (checkpoint is not None and _inside(checkpoint, folder)):
        return checkpoint  # a fresh folder, or the run that stopped here resumes
    found = checkpoints(folder)
    if checkpoint is not None:  # resuming elsewhere's run into a used folder would mix the two
        resume = f", or resume into the checkpoint's own run ({flags.output_dir} {checkpoint.parent})"
    elif flags.resume:
        resume = f", or {flags.resume} {found[-1] if found else 'CHECKPOINT'} to continue that run"
    else:
        resume = f", or choose another {flags.output_dir}"
    outside = f" ({flags.resume} {checkpoint} lies outside it)" if checkpoint is not None else ""
    raise OutputDirError(
        f"{folder} is not empty: it holds another run's files ({_listing(names)}){outside}.\n"
        f"Pass {flags.overwrite} to delete its contents first{resume}."
    )


def clear_output_dir(output_dir: str | Path) -> list[str]:
    """Delete everything inside ``output_dir`` (the folder itself stays); returns the names deleted."""
    folder = Path(output_dir)
    names = _entries(folder)
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if names:
        logger.warning("%s: deleted the earlier run's %s (overwrite_output_dir)", folder, _listing(names))
    return names


def _agree(value, args) -> object:
    """Rank 0's ``value`` on every process (identity without torch.distributed)."""
    if args is None or getattr(args, "world_size", 1) <= 1 or not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gathered_errors(error: str | None, args) -> list[str]:
    if args is None or getattr(args, "world_size", 1) <= 1 or not (dist.is_available() and dist.is_initialized()):
        return [error] if error else []
    errors: list = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    return [e for e in errors if e]


def prepare_output_dir(
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    resume_from_checkpoint: str | bool | None = None,
    inputs: Iterable[str | Path | None] = (),
    flags: Flags = TRAINER_FLAGS,
    args=None,
) -> Path | None:
    """:func:`check_output_dir`, then clear the folder when ``overwrite``, then warn if the resumed checkpoint
    lacks state. ``args`` (``TrainingArguments``) makes it collective under ``torchrun``: rank 0 decides for
    all, the saving processes clear, everyone returns together (or raises the same error)."""
    try:
        verdict = ("ok", check_output_dir(output_dir, overwrite=overwrite, inputs=inputs, flags=flags,
                                          resume_from_checkpoint=resume_from_checkpoint))
    except OutputDirError as error:
        verdict = ("error", str(error))
    kind, value = _agree((verdict[0], str(verdict[1]) if verdict[1] is not None else None), args)
    if kind == "error":
        raise OutputDirError(value)
    checkpoint = Path(value) if value is not None else None
    if overwrite:
        error = None
        if args is None or getattr(args, "should_save", True):
            try:
                clear_output_dir(output_dir)
            except OSError as failure:
                error = f"{flags.overwrite}: could not clear {output_dir} ({failure})"
        errors = _gathered_errors(error, args)
        if errors:
            raise OutputDirError(errors[0])
    if checkpoint is not None and (args is None or getattr(args, "process_index", 0) == 0):
        warn_if_resume_state_missing(checkpoint, world_size=getattr(args, "world_size", 1) if args is not None else 1)
    return checkpoint


def check_training_numbers(args) -> None:
    """Batch sizes >= 1 and a learning rate >= 0: one line naming the flag and the value, raised before
    any folder is made or model loaded (torch's own errors name neither, and come only after loading)."""
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name} {value}: give an integer >= 1")
    learning_rate = getattr(args, "learning_rate", None)
    if learning_rate is not None and not learning_rate >= 0:  # also NaN
        raise ValueError(f"--learning_rate {learning_rate}: give a learning rate >= 0 (e.g. 1e-4)")


def prepare_trainer_output_dir(args, inputs: Iterable[str | Path | None] = ()) -> str | None:
    """:func:`prepare_output_dir` for ``TrainingArguments`` (``output_dir``, ``overwrite_output_dir``,
    ``resume_from_checkpoint``); returns the checkpoint to pass to ``Trainer.train`` (``latest`` resolved).
    Checks the batch size and learning rate first (:func:`check_training_numbers`)."""
    check_training_numbers(args)
    checkpoint = prepare_output_dir(
        args.output_dir, overwrite=bool(getattr(args, "overwrite_output_dir", False)),
        resume_from_checkpoint=args.resume_from_checkpoint, inputs=inputs, flags=TRAINER_FLAGS, args=args,
    )
    return str(checkpoint) if checkpoint is not None else None


def missing_resume_state(checkpoint: str | Path, world_size: int = 1) -> list[str]:
    """Files a Trainer checkpoint needs to continue the same run that ``checkpoint`` lacks: the optimizer
    (``optimizer.pt``), the learning-rate scheduler (``scheduler.pt``) and the RNG state (``rng_state.pth``,
    or ``rng_state_<rank>.pth`` per process)."""
    folder = Path(checkpoint)
    names = set(_entries(folder))
    missing = []
    has_optimizer = any(n.startswith("optimizer") or n.endswith("optimizer.pt") or n.startswith("global_step")
                        for n in names)  # optimizer.pt / .bin, sharded, or a DeepSpeed global_step folder
    if not has_optimizer:
        missing.append("optimizer.pt")
    if "scheduler.pt" not in names and not any(n.startswith("global_step") for n in names):
        missing.append("scheduler.pt")
    expected = ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{rank}.pth" for rank in range(world_size)]
    missing += [n for n in expected if n not in names]
    return missing


def refuse_pickled_resume_state(checkpoint: str | Path) -> None:
    """Raise :class:`OutputDirError` when a state file of ``checkpoint`` that ``Trainer`` reads on resuming
    (``optimizer.pt``, ``scheduler.pt``, ``scaler.pt``, ``rng_state[_N].pth``) holds pickled objects: ``torch.load``
    with ``weights_only=True`` (as ``Trainer`` loads them, numpy's RNG arrays allowed) refuses them, and nothing
    here unpickles them either; a file torch cannot read at all is refused too. Read lazily (no tensor data)."""
    folder = Path(checkpoint)
    for name in sorted(n for n in _entries(folder) if _RESUME_STATE.match(n)):
        try:
            with safe_globals():
                load_tensors_only(folder / name)
        except PickledObjectsError as error:
            raise OutputDirError(
                f"{error}. Resume from another checkpoint, or delete {name} to resume without it (its state then "
                "starts afresh, so the run no longer equals an uninterrupted one)."
            ) from None
        except Exception as error:  # noqa: BLE001 - torch's many ways of saying "damaged"; one line, on every rank
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise OutputDirError(f"{folder / name} cannot be read ({reason}): the checkpoint is damaged (an "
                                 "interrupted save or copy?); resume from another checkpoint.") from None


def warn_if_resume_state_missing(checkpoint: str | Path, world_size: int = 1) -> list[str]:
    missing = missing_resume_state(checkpoint, world_size)
    if missing:
        logger.warning("Resuming from %s without %s: optimizer, schedule or random state start afresh, so the "
                       "resumed run will not continue the same run.", checkpoint, ", ".join(missing))
    return missing


def training_args_dict(args) -> dict:
    """``args.to_dict()`` (tokens redacted), every value JSON-ready (others as strings)."""
    values = args.to_dict() if hasattr(args, "to_dict") else dict(vars(args))
    return json.loads(json.dumps(values, default=str))


def write_training_args(args, folder: str | Path) -> Path:
    """``training_args.json`` in ``folder``, and no ``training_args.bin`` (a pickle) beside it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TRAINING_ARGS_JSON
    path.write_text(json.dumps(training_args_dict(args), indent=2, sort_keys=True) + "\n")
    (folder / TRAINING_ARGS_PICKLE).unlink(missing_ok=True)
    return path


__all__ = [
    "DASHED_FLAGS",
    "Flags",
    "OutputDirError",
    "TRAINER_FLAGS",
    "check_output_dir",
    "check_training_numbers",
    "checkpoints",
    "clear_output_dir",
    "missing_resume_state",
    "prepare_output_dir",
    "prepare_trainer_output_dir",
    "refuse_pickled_resume_state",
    "resolve_resume",
    "training_args_dict",
    "warn_if_resume_state_missing",
    "write_training_args",
]
