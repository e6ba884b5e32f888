"""The lock that makes a command's output folder one run's at a time: ``fcntl.flock`` on ``.<folder name>.lock``
beside the folder (never inside it), recording the holder. Training (``trainer.output_dir.output_dir_lock``, collective
under ``torchrun``) and ``encode`` take it before they look at the folder; a second run into the same folder is
refused with the first one's PID, and the kernel drops the lock when its process dies, so a killed run never blocks
the next one."""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import logging
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

from .files import TRAINER_FLAGS, Flags, OutputDirError

try:
    import fcntl
except ImportError:  # not a POSIX system: runs are not locked
    fcntl = None

logger = logging.getLogger(__name__)


def lock_file(output_dir: str | Path) -> Path:
    """The lock file of a run into ``output_dir``: ``.<name>.lock`` beside the folder (not inside it, where
    ``--overwrite_output_dir`` would delete it and ``push`` would see it), so that runs on other machines
    sharing the filesystem see it too; :func:`local_lock_file` where the folder's parent is not writable."""
    folder = Path(output_dir).resolve()
    parent = next((p for p in (folder.parent, *folder.parent.parents) if p.exists()), folder.parent)
    if not os.access(parent, os.W_OK):
        return local_lock_file(output_dir)
    return folder.parent / f".{folder.name or 'root'}.lock"


def local_lock_file(output_dir: str | Path) -> Path:
    """A lock file for ``output_dir`` in this machine's temporary folder, named after its resolved path."""
    folder = Path(output_dir).resolve()
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"dense-encoders-locks-{user}" / f"{folder.name or 'root'}-{digest}.lock"


# flock errors of a filesystem that cannot lock (some network or FUSE mounts): lock on this machine instead
_NO_LOCKING = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}


class OutputDirLock:
    """An exclusive lock on a run's output folder, held by one process: ``fcntl.flock`` on :func:`lock_file`,
    which records the holder (PID, host, start time). The kernel releases it when the process dies, however it
    dies, so a killed run never blocks the next; :meth:`release` also removes the file. Without ``fcntl`` (not
    POSIX) nothing is locked.

    The lock file is only ever written when this process has just made it (``O_CREAT | O_EXCL``, never through a
    link: ``O_NOFOLLOW``). A lock file a dead run left behind (a plain file holding a lock record, or nothing)
    is replaced by a new one, never truncated; anything else at the lock path (a symbolic or hard link, a
    folder, a FIFO, a file that is not a lock record) is refused with one line (:class:`OutputDirError`) and left
    as it is."""

    def __init__(self, output_dir: str | Path, flags: Flags = TRAINER_FLAGS):
        self.folder = Path(output_dir)
        self.path = lock_file(output_dir)
        self.flags = flags
        self._fd: int | None = None
        self._made: list[Path] = []  # folders made to hold the lock file, removed again when left empty

    def acquire(self) -> OutputDirLock:
        """Take the lock, or raise :class:`OutputDirError` naming the run that holds it."""
        if fcntl is None:
            return self
        try:
            fd = self._lock(self.path)
        except OSError as error:
            if error.errno not in _NO_LOCKING or self.path == local_lock_file(self.folder):
                raise
            logger.warning("%s cannot be locked (%s): locking %s instead, which only runs on this machine see",
                           self.path, error.strerror, local_lock_file(self.folder))
            self.path = local_lock_file(self.folder)
            fd = self._lock(self.path)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": datetime.datetime.now().isoformat(timespec="seconds")}).encode())
        self._fd = fd
        return self

    def _lock(self, path: Path) -> int:
        """A descriptor of ``path``, made by this call and holding its lock (the folders up to it made where
        missing)."""
        self._made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        try:
            if path == local_lock_file(self.folder):
                _private_lock_folder(path.parent)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd, made = self._open(path)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(fd)
                    os.close(fd)
                    raise OutputDirError(
                        f"{self.folder} is in use by another run ({holder}; lock file {path}): wait for it to end, "
                        f"or choose another {self.flags.output_dir}.") from None
                except BaseException:
                    os.close(fd)
                    if made:  # e.g. a filesystem that cannot lock: leave nothing behind
                        with contextlib.suppress(OSError):
                            path.unlink()
                    raise
                if not _same_file(fd, path):  # its holder removed the file as we opened it: lock the new one
                    os.close(fd)
                    continue
                if made:
                    return fd
                try:  # a dead run's lock file, locked by us now: replace it rather than write into it
                    if not _is_lock_record(os.pread(fd, 4096, 0)):
                        raise OutputDirError(self._refusal(path, "is not a lock file a run wrote"))
                    path.unlink()
                finally:
                    os.close(fd)
        except BaseException:
            self._remove_made()
            raise

    def _open(self, path: Path) -> tuple[int, bool]:
        """A descriptor of the plain file at ``path`` (never of what a link points to) and whether this call made
        it; :class:`OutputDirError` when something else is there."""
        flags = os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                pass
            try:
                status = os.lstat(path)
            except FileNotFoundError:  # removed by its holder in between: make it
                continue
            problem = _not_a_plain_file(status)
            if problem:
                raise OutputDirError(self._refusal(path, problem))
            try:
                fd = os.open(path, flags)
            except FileNotFoundError:
                continue
            except OSError as error:
                if error.errno == errno.ELOOP:  # replaced by a link since lstat
                    raise OutputDirError(self._refusal(path, "is a symbolic link")) from None
                raise
            problem = _not_a_plain_file(os.fstat(fd))
            if problem:
                os.close(fd)
                raise OutputDirError(self._refusal(path, problem))
            return fd, False

    def _refusal(self, path: Path, problem: str) -> str:
        return (f"{path}, the lock file of {self.folder}, {problem}: nothing was written to it; remove it if no run "
                f"of yours made it, or choose another {self.flags.output_dir}.")

    def release(self) -> None:
        """Remove the lock file and drop the lock (the file first, while it is still held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if _same_file(fd, self.path):
                self.path.unlink()
        finally:
            os.close(fd)
            self._remove_made()

    def _remove_made(self) -> None:
        for folder in self._made:  # innermost first; a folder something else was put in stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._made = []


def _not_a_plain_file(status: os.stat_result) -> str | None:
    """What keeps a file of this ``stat`` from being a lock file (a run makes its lock file: a plain file with one
    name), or ``None``."""
    if stat.S_ISLNK(status.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(status.st_mode):
        return "is not a regular file"
    if status.st_nlink != 1:
        return f"has {status.st_nlink} names (a hard link)"
    return None


def _is_lock_record(content: bytes) -> bool:
    """Whether ``content`` is what :meth:`OutputDirLock.acquire` writes (or nothing: a run killed before writing)."""
    if not content.strip():
        return True
    try:
        record = json.loads(content.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(record, dict) and set(record) == {"pid", "host", "started"}


def _private_lock_folder(folder: Path) -> None:
    """Make ``folder`` (in the shared temporary folder) this user's own, or refuse one another user could have
    planted there: a link, or a folder someone else owns or may write."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = os.lstat(folder)
    owner = os.getuid() if hasattr(os, "getuid") else status.st_uid
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != owner or status.st_mode & 0o022:
        raise OutputDirError(f"{folder}, where this machine's run locks live, is not a folder only this user can "
                             "write (a link, or another user's): remove it and run again.")


def _same_file(fd: int, path: Path) -> bool:
    try:
        opened, named = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def _holder(fd: int, attempts: int = 20) -> str:
    """Who holds the lock of ``fd``, as its lock file records it (a holder that has only just taken the lock
    may not have written it yet: read again for up to a second)."""
    for _ in range(attempts):
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if isinstance(record, dict) and "pid" in record:
            return (f"PID {record['pid']} on {record.get('host', 'an unknown host')}, started "
                    f"{record.get('started', 'at an unknown time')}")
        time.sleep(0.05)
    return "PID unknown"


__all__ = ["OutputDirLock", "local_lock_file", "lock_file"]
