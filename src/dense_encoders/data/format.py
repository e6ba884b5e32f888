"""What every data file of the package shares: the error for a bad line, the line and JSON-lines readers,
field and id checks, and :func:`document_text`, the one place where a document (title + text) becomes a string.
Every reader opens its file through :func:`open_data_file`: a name ending in ``.gz`` is gzip-compressed
(``corpus.jsonl.gz``, ``qrels/test.tsv.gz``; one cut off or damaged is the same DataFormatError, naming the file
and line, in every reader and command), and :func:`records` reads JSON lines and Parquet files alike
(the layout of Hub datasets, :mod:`.hub_datasets`).

Training (pre-training corpora, distillation files) and evaluation (BEIR folders, pairs, runs, embedding
shards) read their files through these helpers, so a malformed line raises the same :class:`DataFormatError`
(a ``ValueError``) naming ``file:line``, an id follows the same rules (:func:`check_id`, :class:`UniqueIds`),
and a document is the same string for both. Text files are UTF-8; a byte order mark at the start is skipped.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import unicodedata
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np


class DataFormatError(ValueError):
    """A malformed line in a data file; the message starts with ``file:line``."""

    def __init__(self, path: str | Path, line_number: int, problem: str):
        super().__init__(f"{path}:{line_number}: {problem}")
        self.path = str(path)
        self.line_number = line_number


# what BERT's tokenizer drops: control and format characters (zero-width spaces and joiners, byte order marks),
# nonspacing combining marks (stripped with the accents) and the replacement character U+FFFD (removed with invalid
# characters); an enclosing or spacing mark becomes [UNK], a token
_DROPPED_CATEGORIES = ("Cc", "Cf", "Mn")


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing a tokenizer keeps: whitespace, control and format characters, nonspacing
    combining marks and U+FFFD only, which BERT's tokenizer drops, so the text would be encoded as the empty text.
    Every reader refuses such a text where it refuses a blank one."""
    return all(character.isspace() or character == "\ufffd" or unicodedata.category(character) in _DROPPED_CATEGORIES
               for character in text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate_field(record: Mapping) -> str | None:
    """The first field of a JSON object whose strings (nested ones too) hold a lone surrogate: a ``\\ud800``-
    ``\\udfff`` escape that is half of a UTF-16 pair, no character, which no tokenizer and no UTF-8 file takes."""
    def holds(value) -> bool:
        if isinstance(value, str):
            return _LONE_SURROGATE.search(value) is not None
        if isinstance(value, Mapping):
            return any(holds(key) or holds(item) for key, item in value.items())
        if isinstance(value, list):
            return any(holds(item) for item in value)
        return False

    return next((str(key) for key, value in record.items() if holds(key) or holds(value)), None)


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


GZIP_SUFFIX = ".gz"
PARQUET_SUFFIX = ".parquet"
# what a name starting with this is: a file of a Hub dataset read remotely (huggingface_hub.HfFileSystem)
HF_URL_PREFIX = "hf://"


def data_suffix(path: str | Path) -> str:
    """The format suffix of a data file's name, in lower case, without a trailing ``.gz``: ``.jsonl`` for
    ``corpus.jsonl`` and ``corpus.jsonl.gz``, ``.tsv`` for ``test.tsv.gz``, ``""`` for a name without one."""
    name = str(path).replace("\\", "/").rsplit("/", 1)[-1].lower()
    name = name.removesuffix(GZIP_SUFFIX)
    return "." + name.rsplit(".", 1)[1] if "." in name.strip(".") else ""


def is_gzip(path: str | Path) -> bool:
    return str(path).lower().endswith(GZIP_SUFFIX)


def is_parquet(path: str | Path) -> bool:
    """A Parquet file (``.parquet``, also ``.parquet.gz``), or a folder of Parquet shards (a part of a Hub dataset,
    :func:`records`)."""
    if str(path).lower().removesuffix(GZIP_SUFFIX).endswith(PARQUET_SUFFIX):
        return True
    return not str(path).startswith(HF_URL_PREFIX) and Path(path).is_dir() and bool(parquet_shards(Path(path)))


def parquet_shards(folder: Path) -> list[Path]:
    """The ``.parquet`` files of ``folder``, sorted by name (the order of ``-00000-of-00002`` shards)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(PARQUET_SUFFIX))


@contextlib.contextmanager
def open_data_file(path: str | Path):
    """``path`` opened for reading bytes: decompressed when its name ends in ``.gz``; an ``hf://`` URL (a file of a
    Hub dataset, read as a stream) through ``huggingface_hub.HfFileSystem``."""
    with contextlib.ExitStack() as stack:
        if str(path).startswith(HF_URL_PREFIX):
            from huggingface_hub import HfFileSystem, constants  # only for a remote file

            # by endpoint: fsspec keeps one instance per set of arguments, and the endpoint is read when it is made
            handle = stack.enter_context(HfFileSystem(endpoint=constants.ENDPOINT).open(str(path), "rb"))
        else:
            handle = stack.enter_context(open(path, "rb"))
        if is_gzip(path):
            handle = stack.enter_context(gzip.GzipFile(fileobj=handle, mode="rb"))
        yield handle


def _decompression_error(path, line_number: int, error: Exception) -> DataFormatError:
    problem = str(error).rstrip(".") or type(error).__name__
    return DataFormatError(path, line_number, f"not readable as gzip ({problem}): its name ends in {GZIP_SUFFIX}, so "
                           "it must be gzip-compressed and complete; compress it again or drop the .gz")


def _decompressed(path, handle) -> io.BytesIO:
    """The whole of a gzip-compressed file opened by :func:`open_data_file`, in memory (Parquet is read by seeking);
    damaged gzip data is the DataFormatError of a text file's, at its first record."""
    try:
        return io.BytesIO(handle.read())
    except (OSError, EOFError, zlib.error) as error:
        raise _decompression_error(path, 1, error) from None


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its line break) of a UTF-8 text file, lines ending at ``\\n``; a name
    ending in ``.gz`` is read decompressed (:func:`open_data_file`). A byte order mark at the start is skipped;
    bytes that are not UTF-8 are a DataFormatError naming the line, and so is gzip data that is damaged."""
    with open_data_file(path) as handle:
        line_number, lines = 0, iter(handle)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError, zlib.error) as error:
                if not is_gzip(path):
                    raise
                raise _decompression_error(path, line_number + 1, error) from None
            line_number += 1
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataFormatError(path, line_number, f"not UTF-8 (byte {raw[error.start]:#04x} at byte "
                                      f"{error.start + 1} of the line): save the file as UTF-8") from None
            yield line_number, line.rstrip("\r\n")


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-empty line of a jsonl file; DataFormatError for bad lines."""
    for line_number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, line_number, f"not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            problem = f"expected a JSON object per line, got {type(record).__name__}"
            raise DataFormatError(path, line_number, problem)
        if "\\u" in line and (field := lone_surrogate_field(record)) is not None:  # only JSON escapes make them
            raise DataFormatError(path, line_number, f"field {field!r} holds a lone surrogate (an escape such as "
                                  "\\ud800 that is half of a UTF-16 pair, not a character): fix the text, e.g. by "
                                  "writing the file again from its source")
        yield line_number, record


def records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(number, record) of every record of a data file: JSON lines (``.jsonl``, also ``.jsonl.gz``; the number is
    the line, :func:`json_lines`) or Parquet (a ``.parquet`` file, also ``.parquet.gz``, or a folder of ``.parquet``
    shards read in name order; the number is the row, from 1, counted across the shards). Each record is a dict of
    its columns."""
    if not is_parquet(path):
        yield from json_lines(path)
        return
    import pyarrow.parquet as pq  # installed with datasets; only for Parquet files

    shards = parquet_shards(Path(path)) if not str(path).startswith(HF_URL_PREFIX) and Path(path).is_dir() else [path]
    number = 0
    for shard in shards:
        with open_data_file(shard) as handle:
            if is_gzip(shard):
                handle = _decompressed(shard, handle)
            try:
                table = pq.ParquetFile(handle)
            except Exception as error:  # noqa: BLE001 - pyarrow's errors have no common base: name the file
                raise DataFormatError(shard, 1, f"not a Parquet file ({str(error).splitlines()[0]})") from None
            for batch in table.iter_batches(batch_size=4096):
                for record in batch.to_pylist():
                    number += 1
                    yield number, record


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


DOCUMENT_ID_FIELDS = ("_id", "id", "docid")
DOCUMENT_TEXT_FIELDS = ("text", "contents")


def document_record(path: Path, line_number: int, record: dict, *, text_fields: tuple[str, ...] = DOCUMENT_TEXT_FIELDS,
                    title_field: str | None = "title", hint: str = "") -> dict[str, str]:
    """``{"title", "text"}`` of one JSON line of a corpus: the one reader of a document record, for
    evaluation (BEIR ``corpus.jsonl``), encoding (embedding shards) and pre-training corpora alike.

    The text is the first of ``text_fields`` present (``text``, else ``contents`` as Pyserini writes it) and
    must be a JSON string; the title (``title_field``, none when None) is optional, a JSON number is written
    as a string. A missing text is a DataFormatError naming the line and the record's fields, then ``hint``.
    """
    present = next((name for name in text_fields if record.get(name) is not None), None)
    if present is None:
        names = " or ".join(repr(name) for name in text_fields)
        raise DataFormatError(path, line_number, f"missing field {names} (fields: {sorted(record)}){hint}")
    text = record[present]
    if not isinstance(text, str):
        raise DataFormatError(path, line_number, f"field {present!r} must be a string, got {type(text).__name__}")
    title = string_field(path, line_number, record, title_field, required=False) if title_field else None
    return {"title": title or "", "text": text}


_WHITESPACE = re.compile(r"\s")


def has_whitespace(text: str) -> bool:
    """Whether ``text`` holds a character that ``str.split()`` (and so every reader of TREC runs and qrels)
    splits on: spaces, tabs, line breaks and the other Unicode whitespace."""
    return _WHITESPACE.search(text) is not None


def check_id(path: str | Path, line_number: int, identifier: str, what: str = "id") -> str:
    """``identifier`` as every id must be: not empty, without whitespace (TREC runs and qrels are columns
    separated by whitespace, and ids files hold one id per line); else a DataFormatError naming the line."""
    if identifier == "":
        raise DataFormatError(path, line_number, f"empty {what}: give every line an id")
    found = _WHITESPACE.search(identifier)
    if found is not None:
        raise DataFormatError(path, line_number, f"{what} {identifier!r} contains whitespace ({found.group()!r}), "
                              "which would split it in a TREC run: remove it from the id")
    return identifier


class UniqueIds:
    """The ids of one file as it is read: each passes :func:`check_id`, and :meth:`check` (after the last)
    refuses a repeated id naming both lines. Holds a 64-bit hash per id (8 bytes, not the ids), so a corpus
    of millions of texts is checked in little memory; when two hashes agree, ``reread`` (the file's
    ``(line number, id)`` pairs again, in order) tells a repeat from a collision and finds its lines."""

    def __init__(self, path: str | Path, what: str, reread: Callable[[], Iterable[tuple[int, str]]]):
        self.path, self.what, self._reread = path, what, reread
        self._hashes = array("q")

    def add(self, line_number: int, identifier: str) -> str:
        self._hashes.append(hash(check_id(self.path, line_number, identifier, self.what)))
        return identifier

    def check(self) -> None:
        hashes = np.sort(np.frombuffer(self._hashes, dtype=np.int64)) if len(self._hashes) else np.empty(0)
        suspects = set(hashes[1:][hashes[1:] == hashes[:-1]].tolist())
        if not suspects:
            return
        first: dict[str, int] = {}
        for line_number, identifier in self._reread():
            if hash(identifier) in suspects:
                if identifier in first:
                    raise DataFormatError(self.path, line_number, f"duplicate {self.what} {identifier!r} (first at "
                                          f"{self.path}:{first[identifier]}): give each line its own id")
                first[identifier] = line_number


__all__ = [
    "DOCUMENT_ID_FIELDS",
    "DOCUMENT_TEXT_FIELDS",
    "DataFormatError",
    "GZIP_SUFFIX",
    "HF_URL_PREFIX",
    "document_record",
    "UniqueIds",
    "data_suffix",
    "is_blank",
    "is_gzip",
    "is_parquet",
    "open_data_file",
    "parquet_shards",
    "records",
    "check_id",
    "has_whitespace",
    "document_text",
    "is_json_number",
    "json_lines",
    "lone_surrogate_field",
    "parses_as_number",
    "require_file",
    "string_field",
    "text_lines",
]
