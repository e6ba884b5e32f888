"""Detect the format of a checkpoint folder written by another implementation, and convert it.

Each source format is one module of this package exposing a :class:`~.source_format.SourceFormat`;
adding a format means writing that module and listing it in :data:`SOURCE_FORMATS`. A format's ``detect`` looks at the
folder only (``config.json`` keys, file names, tensor names in file headers); its ``convert`` writes our folder
and returns the facts recorded in ``conversion.json`` (which the model card reports).

The output folder is the user's: :func:`check_output` refuses, before any work, an ``OUT`` that is a file
or a symbolic link, that is or holds the current directory, and (``--overwrite``) one that no earlier
conversion wrote (no ``conversion.json``), the home folder or a filesystem root. The conversion is
written into a hidden staging folder beside ``OUT`` (:class:`Staging`, ``.OUT.converting-PID-*``, locked
while its run lives) and renamed into place when complete; it is removed on every failure, SIGTERM and
SIGHUP included, and a later conversion into the same folder removes those of runs that were killed.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import re
import shutil
import signal
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout
from huggingface_hub import snapshot_download

from ..data.files import process_is_gone
from ..data.run_records import CONVERSION, read_record, write_record
from .condenser_reference import CONDENSER_REFERENCE
from .folder import source_reference
from .lightning_ir import LIGHTNING_IR, trainer_output_hint
from .source_format import ConversionError, SourceFormat
from .tite_authors import TITE_AUTHORS

# Lightning IR first: its folders hold a TITE backbone too
SOURCE_FORMATS: tuple[SourceFormat, ...] = (LIGHTNING_IR, TITE_AUTHORS, CONDENSER_REFERENCE)


def find_format(folder: str | Path) -> SourceFormat | None:
    """The :class:`SourceFormat` of a folder another implementation wrote; ``None`` for any other folder."""
    folder = Path(folder)
    return next((f for f in SOURCE_FORMATS if folder.is_dir() and f.detect(folder)), None)


def detect_format(source: str | Path) -> SourceFormat:
    """The :class:`SourceFormat` of ``source``, or a :class:`ConversionError` naming what was looked for."""
    if not Path(source).is_dir():
        raise ConversionError(f"{source} is not a folder: give the checkpoint folder to convert.")
    found = find_format(source)
    if found is not None:
        return found
    if hint := trainer_output_hint(source):
        raise ConversionError(hint)
    for source_format in SOURCE_FORMATS:
        if source_format.incomplete is not None and (missing := source_format.incomplete(Path(source))):
            raise ConversionError(missing)
    known = "; ".join(f"{f.name} ({f.description})" for f in SOURCE_FORMATS)
    raise ConversionError(f"{source} is in none of the formats `dense-encoders convert` reads: {known}.")


def resolve_source(source: str | Path) -> tuple[Path, dict]:
    """(local folder, how ``conversion.json`` and the card name it) of a folder or a Hub id (downloaded with
    huggingface_hub, or found in its cache when offline). A Hub source, or a folder inside the Hub cache, is
    named by its repository and revision; another folder by its name only (no local path is recorded)."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        if hint := trainer_output_hint(folder):
            raise ConversionError(hint)
        if folder.exists() or str(source).count("/") != 1:
            raise ConversionError(f"{source} is not a folder: give the checkpoint folder (or a Hub id org/name).")
        try:
            folder = Path(snapshot_download(str(source)))
        except Exception as error:  # offline and not cached, no such repository, no network: one line
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ConversionError(f"{source}: no such folder, and the Hub repository could not be fetched ({reason}); "
                                  "download it first (hf download ORG/NAME) and convert the folder.") from None
    reference = source_reference(folder)
    if reference["hub"]:
        return folder, {"source": reference["name"], "source_revision": reference["revision"]}
    return folder, {"source": reference["name"]}


# ------------------------------------------------------------------------------------------------ output


def _listing(folder: Path, limit: int = 4) -> str:
    """A few entries of ``folder`` (folders with a trailing ``/``) and how many there are."""
    names = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in folder.iterdir())
    return ", ".join(names[:limit]) + (f", ... ({len(names)} entries)" if len(names) > limit else "")


def _written_by_a_conversion(folder: Path) -> bool:
    """Whether ``folder`` holds the ``conversion.json`` that :func:`convert_checkpoint` writes."""
    try:
        record = read_record(folder, CONVERSION)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("source_format") in {f.name for f in SOURCE_FORMATS}


def check_output(output: str | Path, *, overwrite: bool = False) -> Path:
    """Refuse an output folder the conversion must not write or replace (reading only; before any work).

    Refused always: a file, a symbolic link (the conversion replaces ``OUT`` as a whole and would not write
    through the link), the current directory or a folder holding it. A non-empty folder is replaced only
    with ``overwrite``, and only when an earlier conversion wrote it (its ``conversion.json``), and never
    the home folder (or one holding it) or a filesystem root. Each refusal is one line naming a few of the
    files that would be deleted. Returns ``output`` as a path.
    """
    output = Path(output)
    if output.is_symlink():
        raise ConversionError(f"{output} is a symbolic link (to {os.readlink(output)}): the conversion replaces OUT "
                              "as a whole and does not write through links; give the real folder, or a new one.")
    if output.exists() and not output.is_dir():
        raise ConversionError(f"{output} is a file, not a folder: give a new folder for the converted checkpoint.")
    resolved, here = output.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        what = "is the current directory" if resolved == here else f"holds the current directory {here}"
        raise ConversionError(f"{output} {what}: the conversion replaces OUT as a whole; give a new folder for it, "
                              "e.g. ./converted.")
    if output.name in ("", ".."):  # "x/..": the folder's own name is needed for the staging folder
        output = resolved
    if not output.is_dir() or not any(output.iterdir()):
        return output
    converted = _written_by_a_conversion(output)
    if not overwrite:
        hint = "pass --overwrite to replace that conversion" if converted else "no conversion wrote it"
        raise ConversionError(f"{output} exists and is not empty ({_listing(output)}; {hint}): choose a new folder"
                              f"{'' if converted else ' (--overwrite replaces only an earlier conversion)'}.")
    home = Path.home().resolve()
    if resolved == home or resolved in home.parents or os.path.ismount(resolved):
        what = "is the home folder or holds it" if resolved == home or resolved in home.parents \
            else "is the root of a filesystem"
        raise ConversionError(f"--overwrite would delete everything in {output} ({_listing(output)}), which {what}: "
                              "give a new folder for the converted checkpoint.")
    if not converted:
        raise ConversionError(f"--overwrite would delete what {output} holds ({_listing(output)}), and no earlier "
                              "`dense-encoders convert` wrote it (it has no conversion.json): give a new folder, or "
                              "empty this one yourself.")
    return output


# ------------------------------------------------------------------------------------------------ staging

STAGING_LOCK = ".lock"


def _staging_pattern(name: str) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(name)}\.converting-(\d+)-[^/]+$")


def remove_stale_staging(output: Path) -> list[Path]:
    """Remove the staging folders of conversions into ``output`` whose run is gone (killed, e.g. by SIGKILL,
    before it could clean up); returns them. A live run holds the lock file in its staging folder (the OS
    releases it when the process dies, however it dies); a folder with no lock file yet counts as gone when
    the PID in its name is."""
    pattern, removed = _staging_pattern(output.name), []
    if not output.parent.is_dir():
        return removed
    for folder in output.parent.iterdir():
        match = pattern.match(folder.name)
        if not match or folder.is_symlink() or not folder.is_dir():
            continue
        if (folder / STAGING_LOCK).is_file():
            lock = FileLock(folder / STAGING_LOCK)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue  # a live conversion
            lock.release()
        elif not process_is_gone(int(match.group(1))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


class _Terminated(BaseException):
    """SIGTERM or SIGHUP arrived while converting (raised so that the staging folder is removed)."""


class _Terminations:
    """While active, SIGTERM and SIGHUP (where their handler is the default, which ends the process at once)
    raise :class:`_Terminated`, so that clean-ups run; when it exits the process ends by the same signal, as
    it would have. Inside :meth:`held_back` (creating or removing the staging folder) the signal is only
    noted, and raised when the block ends. Handlers other than the default, and threads other than the
    main one, are left as they are."""

    def __init__(self):
        self.received: int | None = None
        self.raised = False
        self.held = 0
        self.previous: dict = {}

    def _handler(self, signum, frame):
        if self.received is None:  # once: a second signal must not cut the clean-up short
            self.received = signum
            if not self.held:
                self.raised = True
                raise _Terminated(signum)

    @contextlib.contextmanager
    def held_back(self):
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            if not self.held and self.received is not None and not self.raised:
                self.raised = True
                raise _Terminated(self.received)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if number is not None and signal.getsignal(number) is signal.SIG_DFL:
                    self.previous[number] = signal.signal(number, self._handler)
        return self

    def __exit__(self, kind, error, traceback):
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        if self.received is not None:
            signal.raise_signal(self.received)  # the default handler again: the process ends by this signal
        return kind is _Terminated


class Staging:
    """The hidden folder ``.OUT.converting-PID-*`` beside ``OUT`` in which a conversion is written.

    It holds ``converted/`` (the new folder, renamed to ``OUT`` by :meth:`commit`), ``replaced/`` (an earlier
    conversion, moved aside at commit) and the lock file its run holds while it lives. :meth:`remove` (every
    failure, and after a commit) deletes it whole.
    """

    def __init__(self, output: Path, terminations: _Terminations):
        self.output = output
        self.terminations = terminations
        self.folder = Path(tempfile.mkdtemp(prefix=f".{output.name}.converting-{os.getpid()}-", dir=output.parent))
        self.lock = FileLock(self.folder / STAGING_LOCK)
        self.lock.acquire(timeout=0)
        self.converted = self.folder / "converted"
        self.converted.mkdir()

    def commit(self) -> None:
        """Put the converted folder in place of ``OUT`` (an earlier one moved aside first, put back on failure)."""
        replaced = self.folder / "replaced"
        if self.output.exists():
            self.output.rename(replaced)
        try:
            self.converted.rename(self.output)
        except BaseException:
            if replaced.exists() and not self.output.exists():
                replaced.rename(self.output)
            raise

    def remove(self) -> None:
        with self.terminations.held_back():
            self.lock.release()
            shutil.rmtree(self.folder, ignore_errors=True)


def _is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is a full disk or quota: ``OSError`` ENOSPC / EDQUOT, or the text
    the Rust writers (safetensors, tokenizers) put in their own error types."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return True
        if any(text in str(error) for text in ("No space left on device", "os error 28", "Disk quota exceeded")):
            return True
        error = error.__cause__ or error.__context__
    return False


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.0f} MB" if size >= 2**20 else f"{size / 2**20:.1f} MB"


def _disk_full(output: Path, source: Path) -> ConversionError:
    weights = [p for p in source.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt")]
    needed = sum(p.stat().st_size for p in weights)
    try:
        free = f", {_megabytes(shutil.disk_usage(output.parent).free)} free"
    except OSError:
        free = ""
    return ConversionError(
        f"no space left on the device of {output.parent.resolve()} while writing {output} (the weights need about "
        f"{_megabytes(needed)}{free}); nothing was left behind: free space there or choose another OUT, and convert "
        "again."
    )


# ------------------------------------------------------------------------------------------------ conversion


def _refuse_overlap(source: Path, output: Path) -> None:
    """``output`` must be neither the source, nor inside it, nor a folder holding it."""
    source, target = source.resolve(), output.resolve()
    if target == source or source in target.parents or target in source.parents:
        raise ConversionError(f"{output} overlaps the source {source}: write the conversion to a separate folder, "
                              "so the original stays as it is.")


def convert_checkpoint(source: str | Path, output: str | Path, *, overwrite: bool = False, **options) -> Path:
    """Convert ``source`` (any format of :data:`SOURCE_FORMATS`; a folder or a Hub id) into our checkpoint
    folder ``output``.

    ``output`` is checked first (:func:`check_output`: a non-empty one is replaced only with ``overwrite``
    and only when an earlier conversion wrote it). The folder is written into a staging folder beside
    ``output`` and renamed into place when complete, so an interrupted or failed conversion (SIGTERM
    included) leaves nothing half-written; staging folders of killed runs are removed. ``options`` are the
    format's own (``skip_from`` for Condenser folders); ``None`` means the format's default, and an option
    the format does not take is refused. Returns ``output``.
    """
    # imported here: hub's cards build on this package's folder contract (.folder), and importing hub
    # at the top would make the two packages' __init__ modules import each other
    from ..hub.cards import model_card  # import cycle: hub.cards imports checkpoints

    output = Path(output)
    if Path(source).expanduser().is_dir():  # a local source: the overlap is the first thing to say
        _refuse_overlap(Path(source).expanduser(), output)
    output = check_output(output, overwrite=overwrite)
    source, named = resolve_source(source)
    _refuse_overlap(source, output)
    source_format = detect_format(source)
    options = {name: value for name, value in options.items() if value is not None}
    accepted = inspect.signature(source_format.convert).parameters
    for name in options:
        if name not in accepted:
            raise ConversionError(f"--{name.replace('_', '-')} does not apply to {source} ({source_format.name}); "
                                  "leave it out.")
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(output)
    with _Terminations() as terminations:
        staging = None
        try:
            with terminations.held_back():  # a signal held back here arrives once the staging folder is known
                staging = Staging(output, terminations)
            facts = source_format.convert(source, staging.converted, **options)
            record = {
                "source_format": source_format.name,
                "source_description": source_format.description,
                **named,
                "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **facts,
            }
            write_record(staging.converted, CONVERSION, record)
            model_card(staging.converted, output.name).save(staging.converted / "README.md")
            staging.commit()
        except Exception as error:
            if _is_disk_full(error):
                raise _disk_full(output, source) from None
            raise
        finally:
            if staging is not None:
                staging.remove()
    return output


__all__ = ["SOURCE_FORMATS", "check_output", "convert_checkpoint", "detect_format", "find_format",
           "remove_stale_staging", "resolve_source"]
