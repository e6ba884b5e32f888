"""Files written whole or not at all, JSON records read back, and output folders that hold one run: the one
place every layer (trainer, evaluation, hub, data) writes a file atomically, reads a JSON file and claims an
output folder.

:func:`atomic_write` writes through a scratch file in the target's folder and ``os.replace``, so a reader
(or a run that is resumed after a crash) sees the old file or the new one, never a part of one.
:func:`prepare_new_output_dir` gives a command a missing or empty folder, refuses a non-empty one unless
``overwrite`` (then clears it, never the working folder, the home folder or an input): the rules the
trainers apply (``trainer/output_dir.py`` adds resuming and the run lock) and ``layerwise`` shares.
:func:`refuse_outputs_over_inputs` is the one check, run by every command before it writes, that none of its
outputs is, lies inside or holds one of its inputs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def atomic_write(path: str | Path, write: Callable[[str], None], *, durable: bool = False) -> None:
    """Replace ``path`` by the file ``write(scratch)`` writes at the path ``scratch``: a scratch file in
    the same folder, given the permissions of an ordinary new file (``0o666`` less the umask; ``mkstemp``
    creates ``0o600``), flushed to disk first when ``durable``, then moved over ``path`` by ``os.replace``.
    The scratch file is removed when anything fails."""
    path = Path(path)
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(scratch)
        if durable:
            with open(scratch, "rb+") as file:
                os.fsync(file.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(scratch, 0o666 & ~umask)
        os.replace(scratch, path)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)


def atomic_write_bytes(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """:func:`atomic_write` of ``data``."""
    atomic_write(path, lambda scratch: Path(scratch).write_bytes(data), durable=durable)


def write_json(path: str | Path, value: Any, *, durable: bool = False, sort_keys: bool = True,
               indent: int | None = 2, ensure_ascii: bool = True) -> None:
    """``value`` as JSON (indented by ``indent`` spaces, keys sorted unless ``sort_keys`` is False, non-ASCII
    characters escaped unless ``ensure_ascii`` is False) and a final line break, in UTF-8, written by
    :func:`atomic_write`."""
    text = json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def read_json(path: str | Path, *, fix: str = "") -> Any | None:
    """The JSON value of the UTF-8 file ``path``; None when there is no such file. A file that is not valid
    JSON is a ``ValueError`` naming it, the problem and its line, followed by ``fix`` (what to do) when given."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg}, line {error.lineno})"
                         + (f": {fix}" if fix else "")) from None


# ------------------------------------------------------------------------------------------------ output folders


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


# ------------------------------------------------------------------------------------------------ a full disk

# what the writers say when the disk is full: the OS's message and errno (safetensors' Rust writer: "os error 28")
_DISK_FULL_WORDS = ("no space left on device", "os error 28", "storagefull", "disk quota exceeded", "os error 122")
# what torch.save says when a write failed, whatever the reason: a full disk only when the folder has little room left
_FAILED_WRITE_WORDS = ("inline_container.cc", "pytorchstreamwriter failed", "file write failed")


class DiskFullError(OSError):
    """A write failed because the disk of a command's output is full: one line naming the folder, the room left and
    the room the write needed (the CLI prints it; what was already written is kept, and the same command goes on)."""


def _size(size: float) -> str:
    unit, scale = next(((unit, scale) for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)) if size >= scale),
                       ("B", 1))
    return f"{size / scale:,.1f} {unit}"


def disk_full(error: BaseException, folder: str | Path, needed: int) -> DiskFullError | None:
    """The :class:`DiskFullError` that ``error`` (a failed write into ``folder`` of about ``needed`` bytes, its causes
    included) amounts to, or None when the disk is not what failed."""
    free = None
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(next(p for p in (Path(folder), *Path(folder).parents) if p.exists())).free
    seen, full = error, False
    while seen is not None and not full:
        message = str(seen).lower()
        full = (getattr(seen, "errno", None) in (errno.ENOSPC, getattr(errno, "EDQUOT", -1))
                or any(words in message for words in _DISK_FULL_WORDS)
                or (any(words in message for words in _FAILED_WRITE_WORDS) and free is not None and free < needed))
        seen = seen.__cause__ or seen.__context__
    if not full:
        return None
    room = f"{_size(free)} free" if free is not None else "its free space unknown"
    return DiskFullError(f"the disk of {folder} is full ({room}; writing there needs about {_size(needed)} "
                         "more): free space on it, or move the folder elsewhere, and run the same command again, "
                         "which keeps what was written")


@contextlib.contextmanager
def disk_full_as_one_line(folder: str | Path, needed: int) -> Iterator[None]:
    """Raise :class:`DiskFullError` (one line) for a failure inside the block that a full disk caused
    (:func:`disk_full`); every other failure as it is."""
    try:
        yield
    except Exception as error:
        full = disk_full(error, folder, needed)
        if full is None:
            raise
        raise full from None


def process_is_gone(pid: int) -> bool:
    """Whether no process ``pid`` exists on this machine (POSIX; elsewhere every process counts as alive): the test
    that a scratch folder named after its process's PID was left behind by a run that was killed."""
    if os.name != "posix" or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: another user's live process
        return False
    return False


def folder_entries(folder: str | Path) -> list[str]:
    """The names in ``folder``, sorted; none when it is missing."""
    folder = Path(folder)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def is_inside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both resolved)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def listing(names: list[str], limit: int = 4) -> str:
    """The first ``limit`` names, then how many there are."""
    shown = ", ".join(names[:limit])
    return shown + (f", ... {len(names)} entries" if len(names) > limit else "")


def refuse_unsafe_overwrite(output_dir: str | Path, inputs: Iterable[str | Path | None] = (),
                            flags: Flags = TRAINER_FLAGS) -> None:
    """:class:`OutputDirError` when clearing the non-empty ``output_dir`` would delete the current directory,
    the home folder or one of ``inputs`` (paths the command reads)."""
    folder = Path(output_dir)
    if _is_home_or_holds_cwd(folder):
        raise OutputDirError(f"{flags.overwrite} would delete everything in {folder}, which holds the current "
                             f"directory or is the home folder: choose a dedicated {flags.output_dir}.")
    for source in inputs:
        if source and Path(source).exists() and is_inside(Path(source), folder):
            raise OutputDirError(f"{flags.overwrite} would delete {source}, which this run reads: choose "
                                 f"another {flags.output_dir} or move {source} out of {folder}.")


def _is_home_or_holds_cwd(folder: Path) -> bool:
    return is_inside(Path.cwd(), folder) or folder.resolve() == Path.home().resolve()


def clear_output_dir(output_dir: str | Path) -> list[str]:
    """Delete everything inside ``output_dir`` (the folder itself stays); returns the names deleted."""
    folder = Path(output_dir)
    names = folder_entries(folder)
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if names:
        logger.warning("%s: deleted the earlier run's %s (overwrite_output_dir)", folder, listing(names))
    return names


def prepare_new_output_dir(output_dir: str | Path, *, overwrite: bool = False,
                           inputs: Iterable[str | Path | None] = (), flags: Flags = DASHED_FLAGS) -> Path:
    """The folder a command that does not resume writes into, checked before the command loads anything: a
    missing or empty one is used (the command makes it when it writes: a failed run leaves nothing); a non-empty
    one is refused (:class:`OutputDirError`, naming a few of its entries and the flags that help) unless
    ``overwrite``, which deletes its contents first (:func:`refuse_unsafe_overwrite` permitting)."""
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise OutputDirError(f"{flags.output_dir} {folder} is a file, not a folder: choose a folder.")
    names = folder_entries(folder)
    if names and not overwrite:
        raise OutputDirError(f"{folder} is not empty: it holds another run's files ({listing(names)}).\n"
                             f"Pass {flags.overwrite} to delete its contents first, or choose another "
                             f"{flags.output_dir}.")
    if names:
        refuse_unsafe_overwrite(folder, inputs, flags)
        clear_output_dir(folder)
    return folder


# ------------------------------------------------------------------------------------------------ outputs vs inputs

PathArgument = tuple[str, "str | Path | None"]  # (how the command line names it: "--output", "MODEL"; the path)


def refuse_outputs_over_inputs(outputs: Iterable[PathArgument], inputs: Iterable[PathArgument]) -> None:
    """:class:`OutputDirError` (one line) when a file or folder a command would write is one of the paths it reads,
    lies inside one it reads as a whole (a model folder, a dataset folder) or holds one: every command calls it
    with its outputs and inputs before it writes anything. An input folder whose own files are what is read (a
    folder of embedding shards, which keeps its indexes beside them) is given as those files instead, so that
    new files may go into it. Inputs that are no local path (Hub ids) are skipped; paths are compared resolved
    (links followed), and an existing output that is the same file as an input (a hard link) is that input."""
    outputs = [(name, Path(path).expanduser()) for name, path in outputs if path]
    inputs = [(name, Path(path).expanduser()) for name, path in inputs if path]
    inputs = [(name, path) for name, path in inputs if path.exists()]
    for output_name, output in outputs:
        for input_name, source in inputs:
            relation = _clash(output, source)
            if relation:
                raise OutputDirError(f"{output_name} {output} {relation} {input_name} {source}, which this command "
                                     f"reads: nothing was written; choose another {output_name}.")


def _clash(output: Path, source: Path) -> str | None:
    """How writing ``output`` would touch the existing input ``source``, or ``None``."""
    if output.exists() and os.path.samefile(output, source):
        return "is"
    written, read = output.resolve(), source.resolve()
    if written == read:
        return "is"
    if read in written.parents:
        return "lies inside"
    if written in read.parents:
        return "holds"
    return None


__all__ = [
    "DASHED_FLAGS",
    "TRAINER_FLAGS",
    "DiskFullError",
    "Flags",
    "OutputDirError",
    "atomic_write",
    "atomic_write_bytes",
    "clear_output_dir",
    "disk_full",
    "disk_full_as_one_line",
    "folder_entries",
    "is_inside",
    "listing",
    "process_is_gone",
    "prepare_new_output_dir",
    "read_json",
    "refuse_outputs_over_inputs",
    "refuse_unsafe_overwrite",
    "write_json",
]
