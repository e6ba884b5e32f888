"""What every data file of the package shares: the error for a bad line, the JSON-lines reader, field
checks, and :func:`document_text`, the one place where a document (title + text) becomes a string.

Training (pre-training corpora, distillation files) and evaluation (BEIR folders, pairs, runs) read
their files through these helpers, so a malformed line raises the same :class:`DataFormatError`
(a ``ValueError``) naming ``file:line``, and a document is the same string for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path


class DataFormatError(ValueError):
    """A malformed line in a data file; the message starts with ``file:line``."""

    def __init__(self, path: str | Path, line_number: int, problem: str):
        super().__init__(f"{path}:{line_number}: {problem}")
        self.path = str(path)
        self.line_number = line_number


def document_text(document: Mapping[str, str]) -> str:
    """A document as one string: ``title + " " + text`` of the stripped title and text, the text alone
    when there is no title (BEIR / MTEB convention). A title that is not a string counts as none."""
    title, text = document.get("title"), document.get("text")
    title = title.strip() if isinstance(title, str) else ""
    text = (text or "").strip()
    return f"{title} {text}" if title else text


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-empty line of a jsonl file; DataFormatError for bad lines."""
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFormatError(path, line_number, f"not valid JSON ({error.msg} at column {error.colno})") from None
            if not isinstance(record, dict):
                problem = f"expected a JSON object per line, got {type(record).__name__}"
                raise DataFormatError(path, line_number, problem)
            yield line_number, record


def is_json_number(value) -> bool:
    """A JSON number (int or float; ``true`` / ``false`` are not numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parses_as_number(text: str) -> bool:
    """A column of a text file (qrels, runs) that reads as a number."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def string_field(path: Path, line_number: int, record: dict, *names: str, required: bool = True) -> str | None:
    """The first of ``names`` present in ``record`` as a string (a JSON number is written as one)."""
    for name in names:
        if name in record and record[name] is not None:
            value = record[name]
            if is_json_number(value):
                value = str(value)
            if not isinstance(value, str):
                raise DataFormatError(path, line_number, f"field {name!r} must be a string, got {type(value).__name__}")
            return value
    if required:
        raise DataFormatError(path, line_number, f"missing field {' or '.join(repr(n) for n in names)}")
    return None


__all__ = [
    "DataFormatError",
    "document_text",
    "is_json_number",
    "json_lines",
    "parses_as_number",
    "require_file",
    "string_field",
]
