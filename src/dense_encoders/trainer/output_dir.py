"""One run per output folder: ``pretrain``, ``distill``, ``infuse`` and ``quickstart`` share these rules.

* A training command writes into a folder that is missing or empty, or that it resumes
  (``--resume_from_checkpoint`` names a checkpoint inside it, or ``latest``). Any other non-empty
  folder is refused (:class:`OutputDirError`, a ``ValueError`` the CLI prints as one message) before
  anything is loaded or created, so nothing of a refused run is left behind.
* ``--overwrite_output_dir`` deletes the folder's contents first (the processes that save do it, the
  others wait; all processes of a ``torchrun`` agree on rank 0's verdict). It never deletes the folder
  the user works in, the checkpoint a run resumes from, or an input the run reads.
* One run at a time: a run holds an OS lock on its folder (:func:`output_dir_lock`, ``data.run_lock``:
  ``fcntl.flock`` on ``.<folder name>.lock`` beside the folder, never inside it) from before the folder is
  checked until the model is saved. A second run into the same folder is refused with the first one's PID;
  the kernel drops the lock when its process dies, so a killed run never blocks the next one.
* ``--resume_from_checkpoint latest`` is the newest *complete* ``checkpoint-N`` (:func:`checkpoint_problem`):
  one killed while it was being saved is skipped, with one line saying so.
* A checkpoint without its optimizer, scheduler or RNG state is resumed with a warning: the run will
  not continue the same way. One whose state files hold pickled objects is refused before anything is
  loaded (they are never unpickled; :func:`refuse_pickled_resume_state`).
* Training arguments are saved as JSON (``training_args.json``), never as the Trainer's pickle
  (``training_args.bin``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path
from typing import Iterable, Iterator

import torch.distributed as dist
from transformers.trainer_pt_utils import safe_globals
from transformers.utils import (
    ADAPTER_SAFE_WEIGHTS_NAME,
    ADAPTER_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
)

from ..checkpoints.weights import PickledObjectsError, load_tensors_only
from ..data.files import (  # the rules every command's output folder follows; resuming and the lock are here
    DASHED_FLAGS,
    TRAINER_FLAGS,
    Flags,
    OutputDirError,
    clear_output_dir,
    refuse_unsafe_overwrite,
)
from ..data.files import folder_entries as _entries
from ..data.files import is_inside as _inside
from ..data.files import listing as _listing
from ..data.run_lock import OutputDirLock, local_lock_file, lock_file
from ..data.run_records import TRAINER_STATE, TRAINING_ARGS, write_record

logger = logging.getLogger(__name__)

TRAINING_ARGS_JSON = TRAINING_ARGS
TRAINING_ARGS_PICKLE = "training_args.bin"
# TRAINER_STATE (data.run_records): the Trainer writes it last into a checkpoint-N (after weights, optimizer, RNG)
# a checkpoint's model weights as the Trainer saves them: safetensors or a pickle, whole or sharded, a PEFT
# adapter, or FSDP / DeepSpeed state folders
WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME,
                ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME)
WEIGHT_FOLDERS = re.compile(r"^(pytorch_model_fsdp_\d+|global_step\d+)$")
# each process of a multi-process run saves its own RNG state into a checkpoint
PROCESS_RNG_STATE = re.compile(r"^rng_state_(\d+)\.pth$")
RESUME_LATEST = ("latest", "last", "true")  # --resume_from_checkpoint latest: the newest checkpoint-N of the folder
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# what Trainer.train(resume_from_checkpoint=...) reads with torch.load(weights_only=True), besides the weights
_RESUME_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth)$")




def checkpoints(folder: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``folder``, oldest step first."""
    folder = Path(folder)
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()] \
        if folder.is_dir() else []
    return [p for _, p in sorted(found)]


def checkpoint_problem(checkpoint: str | Path, world_size: int = 1) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it is complete. The Trainer writes a
    checkpoint's ``trainer_state.json`` last (``Trainer._save_checkpoint``: model, optimizer, scheduler, RNG
    state, then the state), so a run killed while saving leaves no (or a cut-off) ``trainer_state.json``;
    weights removed afterwards are a problem too.

    ``world_size`` > 1 (a run of that many processes resumes): every process saves its own
    ``rng_state_<rank>.pth``, and rank 0 writes ``trainer_state.json`` without waiting for the others, so a
    checkpoint of a multi-process run that lacks one of those files was cut off while another process saved it
    (resumed from it, that process would draw other random numbers than the uninterrupted run)."""
    folder = Path(checkpoint)
    state = folder / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE}"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return f"{TRAINER_STATE} is cut off or unreadable"
    names = _entries(folder)
    if not any(name in WEIGHT_FILES or WEIGHT_FOLDERS.match(name) for name in names):
        return f"no model weights ({SAFE_WEIGHTS_NAME})"
    saved = {int(match.group(1)) for name in names if (match := PROCESS_RNG_STATE.match(name))}
    missing = [rank for rank in range(world_size) if rank not in saved] if world_size > 1 else []
    if saved and missing:
        return f"no rng_state_{missing[0]}.pth: process {missing[0]} was stopped before it saved its random state"
    return None


def _incomplete(checkpoints_: list[Path], world_size: int = 1) -> list[str]:
    return [f"{checkpoint.name} ({problem})" for checkpoint in checkpoints_
            if (problem := checkpoint_problem(checkpoint, world_size)) is not None]


def latest_checkpoint(found: list[Path], world_size: int = 1) -> tuple[Path | None, int]:
    """The newest complete checkpoint of ``found`` (oldest first) and the world size it was judged complete
    for: complete for ``world_size`` processes if any is; else complete for one (a run resumed on more
    processes than saved its checkpoints: the missing RNG states are warned about, not skipped)."""
    for judged_for in dict.fromkeys((world_size, 1)):
        complete = [checkpoint for checkpoint in found if checkpoint_problem(checkpoint, judged_for) is None]
        if complete:
            return complete[-1], judged_for
    return None, 1


def resolve_resume(output_dir: str | Path, resume_from_checkpoint: str | bool | None, flags: Flags = TRAINER_FLAGS,
                   world_size: int = 1) -> Path | None:
    """The checkpoint folder a run resumes from: ``latest`` (or ``True``) is the newest complete
    ``checkpoint-N`` of ``output_dir`` (:func:`checkpoint_problem`; newer incomplete ones are skipped); a
    path must be a Trainer checkpoint (:func:`check_output_dir` also refuses an incomplete one)."""
    if resume_from_checkpoint in (None, False, "") or str(resume_from_checkpoint).lower() in ("false", "none"):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in RESUME_LATEST:
        found = checkpoints(output_dir)
        if not found:
            raise OutputDirError(f"{flags.resume} {resume_from_checkpoint}: {output_dir} holds no checkpoint-N folder "
                                 "to resume from.")
        latest, _ = latest_checkpoint(found, world_size)
        if latest is None:
            raise OutputDirError(f"{flags.resume} {resume_from_checkpoint}: {output_dir} holds no complete "
                                 f"checkpoint-N folder ({_listing(_incomplete(found), 3)}): start afresh with "
                                 f"{flags.overwrite}.")
        return latest
    checkpoint = Path(resume_from_checkpoint)
    if not checkpoint.is_dir():
        raise OutputDirError(f"{flags.resume} {checkpoint}: no such folder.")
    if not (checkpoint / TRAINER_STATE).is_file():
        raise OutputDirError(f"{flags.resume} {checkpoint}: not a Trainer checkpoint (no {TRAINER_STATE}); "
                             "name a checkpoint-N folder, or 'latest'.")
    return checkpoint


def _complete(checkpoint: Path | None, flags: Flags) -> Path | None:
    """``checkpoint`` if it is None or complete (:func:`checkpoint_problem`), else one line saying why not."""
    problem = checkpoint_problem(checkpoint) if checkpoint is not None else None
    if problem is not None:
        raise OutputDirError(f"{flags.resume} {checkpoint}: incomplete checkpoint ({problem}; was its run killed "
                             "while saving it?); name an earlier checkpoint-N, or 'latest'.")
    return checkpoint


def skipped_checkpoints(output_dir: str | Path, checkpoint: str | Path, world_size: int = 1) -> list[str]:
    """The incomplete checkpoints of ``output_dir`` newer than ``checkpoint`` (``name (why)``): those that
    ``latest`` skipped (for a run of ``world_size`` processes)."""
    found = checkpoints(output_dir)
    resolved = [path.resolve() for path in found]
    target = Path(checkpoint).resolve()
    _, judged_for = latest_checkpoint(found, world_size)
    return _incomplete(found[resolved.index(target) + 1:], judged_for) if target in resolved else []


def check_output_dir(
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    resume_from_checkpoint: str | bool | None = None,
    inputs: Iterable[str | Path | None] = (),
    flags: Flags = TRAINER_FLAGS,
    world_size: int = 1,
) -> Path | None:
    """Decide (reading only) whether a run of ``world_size`` processes may write into ``output_dir``; returns
    the checkpoint it resumes from. Raises :class:`OutputDirError` when the folder holds another run, when
    ``overwrite`` would delete
    the working directory, the resumed checkpoint or one of ``inputs`` (paths the run reads), or when the
    checkpoint is incomplete."""
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise OutputDirError(f"{flags.output_dir} {folder} is a file, not a folder: choose a folder.")
    checkpoint = resolve_resume(folder, resume_from_checkpoint, flags, world_size)
    if checkpoint is not None:
        refuse_pickled_resume_state(checkpoint)
    names = _entries(folder)
    if overwrite:
        if names:
            refuse_unsafe_overwrite(folder, (), flags)  # the current directory or the home folder first
            if checkpoint is not None and _inside(checkpoint, folder):
                raise OutputDirError(f"{flags.overwrite} would delete {checkpoint}, the checkpoint "
                                     f"{flags.resume} resumes from: give one of the two flags.")
            refuse_unsafe_overwrite(folder, inputs, flags)
        return _complete(checkpoint, flags)
    if not names or (checkpoint is not None and _inside(checkpoint, folder)):
        return _complete(checkpoint, flags)  # a fresh folder, or the run that stopped here resumes
    found = checkpoints(folder)
    if checkpoint is not None:  # resuming elsewhere's run into a used folder would mix the two
        resume = f", or resume into the checkpoint's own run ({flags.output_dir} {checkpoint.parent})"
    elif flags.resume:
        # the newest checkpoint that can be resumed from (one cut off while it was saved, by a full disk or a kill,
        # cannot): 'latest' when there is one, as it skips the cut-off ones
        complete, _ = latest_checkpoint(found)
        resume = (f", or {flags.resume} latest to continue that run (from {complete.name})" if complete is not None
                  else f", or {flags.resume} CHECKPOINT to continue that run")
    else:
        resume = f", or choose another {flags.output_dir}"
    outside = f" ({flags.resume} {checkpoint} lies outside it)" if checkpoint is not None else ""
    raise OutputDirError(
        f"{folder} is not empty: it holds another run's files ({_listing(names)}){outside}.\n"
        f"Pass {flags.overwrite} to delete its contents first{resume}."
    )


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
    world_size = getattr(args, "world_size", 1) if args is not None else 1
    try:
        verdict = ("ok", check_output_dir(output_dir, overwrite=overwrite, inputs=inputs, flags=flags,
                                          resume_from_checkpoint=resume_from_checkpoint, world_size=world_size))
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
        skipped = skipped_checkpoints(output_dir, checkpoint, world_size)
        if skipped:
            logger.warning("%s %s: skipping the incomplete %s (killed while saving?); resuming from %s",
                           flags.resume, resume_from_checkpoint, ", ".join(skipped), checkpoint)
        warn_if_resume_state_missing(checkpoint, world_size=world_size)
    return checkpoint


# ------------------------------------------------------------------------------------------------ run lock


def checkpoint_bytes(model) -> int:
    """About the bytes one checkpoint of ``model`` takes: its weights, and AdamW's two moments of every trained one."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    moments = sum(2 * p.numel() * 4 for p in model.parameters() if p.requires_grad)
    return weights + moments


@contextlib.contextmanager
def output_dir_lock(output_dir: str | Path, *, args=None, flags: Flags = TRAINER_FLAGS) -> Iterator[None]:
    """Hold :class:`OutputDirLock` on ``output_dir`` for the ``with`` block: one run per folder. ``args``
    (``TrainingArguments``) makes it collective under ``torchrun``: the first process (``process_index`` 0)
    holds the lock, and every process raises the same :class:`OutputDirError` when it is taken."""
    lock, error = None, None
    if args is None or getattr(args, "process_index", 0) == 0:
        try:
            lock = OutputDirLock(output_dir, flags).acquire()
        except OutputDirError as refused:  # the other processes must hear of it too
            error = str(refused)
        except OSError as failure:
            error = f"could not lock {output_dir} for this run ({failure})"
    error = _agree(error, args)
    if error is not None:
        raise OutputDirError(error)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def check_training_numbers(args) -> None:
    """Batch sizes >= 1, ``max_steps`` >= 1 (or -1, unset: epochs) and a learning rate >= 0: one line naming the
    flag and the value, raised before any folder is made or model loaded (torch's own errors name neither, and
    come only after loading; ``max_steps`` 0 would train one step at learning rate 0)."""
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name} {value}: give an integer >= 1")
    max_steps = getattr(args, "max_steps", None)
    if max_steps is not None and (max_steps == 0 or max_steps < -1):
        raise ValueError(f"--max_steps {max_steps}: give a number of optimizer steps >= 1, or leave it unset (-1) "
                         "to train for --num_train_epochs")
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
    path = write_record(folder, TRAINING_ARGS_JSON, training_args_dict(args))
    (folder / TRAINING_ARGS_PICKLE).unlink(missing_ok=True)
    return path


__all__ = [
    "DASHED_FLAGS",
    "Flags",
    "OutputDirError",
    "OutputDirLock",
    "TRAINER_FLAGS",
    "check_output_dir",
    "check_training_numbers",
    "checkpoint_bytes",
    "checkpoint_problem",
    "checkpoints",
    "clear_output_dir",
    "local_lock_file",
    "lock_file",
    "missing_resume_state",
    "output_dir_lock",
    "prepare_output_dir",
    "prepare_trainer_output_dir",
    "refuse_pickled_resume_state",
    "resolve_resume",
    "skipped_checkpoints",
    "training_args_dict",
    "warn_if_resume_state_missing",
    "write_training_args",
]
