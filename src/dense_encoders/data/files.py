"""Files written whole or not at all, and JSON records read back: the one place every layer (trainer,
evaluation, hub, data) writes a file atomically and reads a JSON file.

:func:`atomic_write` writes through a scratch file in the target's folder and ``os.replace``, so a reader
(or a run that is resumed after a crash) sees the old file or the new one, never a part of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def write_json(path: str | Path, value: Any, *, durable: bool = False) -> None:
    """``value`` as indented JSON with sorted keys and a final line break, written by :func:`atomic_write`."""
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
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


__all__ = ["atomic_write", "atomic_write_bytes", "read_json", "write_json"]
