"""Embedding shards: a corpus (or a query set) encoded into fixed-size safetensors files, with a manifest.

Layout of an output folder::

    encoding.json                  what is being encoded how (written first; a resume must match it once
                                   a shard is written)
    shard-00000.safetensors        ``embeddings`` [rows, dim] (float16 or float32); float16 shards add ``scales``
                                   [rows] (float32 powers of two: a row is ``scales[i] * embeddings[i]``, see
                                   :func:`half_precision_rows`); metadata: rows, ids sha256
    shard-00000.ids                the rows' ids, one per line
    ...
    manifest.json                  written last: encoding.json + count, dimension, every shard's rows, bytes
                                   and sha256 (checked before a shard is used: EmbeddingShards.shards)

Shard ``i`` holds the texts ``[i * shard_size, (i + 1) * shard_size)`` of the source in file order, so
any process can encode any shard, and a shard is complete when its safetensors file exists (ids first,
then embeddings, each written atomically). Sources are read as streams: a BEIR ``corpus.jsonl`` or
``queries.jsonl`` (or a BEIR folder), a ``.tsv`` of ``id<TAB>text`` (MS MARCO's collection.tsv and
queries.tsv), or a ``.txt`` file with one text per line (ids: line numbers, from 1), each also gzip-compressed
(``.gz``); or the corpus (queries) of a Hub dataset by id (``BeIR/scifact``, at a revision:
:mod:`~dense_encoders.data.hub_datasets`), whose repository and commit the manifest records.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from ..vectors import refuse_non_finite_vectors
from .files import atomic_write, disk_full_as_one_line, read_json, write_json
from .format import (
    DataFormatError,
    UniqueIds,
    data_suffix,
    document_text,
    has_whitespace,
    is_blank,
    parquet_shards,
    records,
    text_lines,
)
from .hub_datasets import DatasetFiles, resolve_dataset
from .retrieval import beir_file, beir_ids, corpus_record, query_record

SETTINGS_FILE = "encoding.json"
MANIFEST_FILE = "manifest.json"
FORMAT = "dense-encoders-embeddings"
# version 2: float16 shards carry per-row scales (a version-1 reader would ignore them); version 1 is still read
VERSION = 2
READABLE_VERSIONS = (1, 2)
DTYPES = {"float16": np.float16, "float32": np.float32}
SHARD_METADATA = "dense_encoders_shard"
SIDES = ("document", "query")
# what fixes a damaged or missing shard: encode heals a finished folder as well as an unfinished one
REPAIR = "run the `dense-encoders encode` command that wrote the folder again to rebuild it"
SCALES = "scales"
# a float16 row is stored as row / scale with its largest magnitude in [2**14, 2**15): every component down to
# 2**-28 of the largest keeps float16's 11 significant bits, and nothing reaches float16's largest value (65504)
HALF_TOP_EXPONENT = 15
# the smallest scale: 2**-126, float32's smallest normal number (a smaller one would itself be rounded)
SMALLEST_SCALE_EXPONENT = -126
# float16's smallest normal number: an unscaled (version-1) float16 row below it lost precision, or all of it
HALF_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)
# the safetensors dtypes a shard holds, as numpy reads them (little-endian, as the format stores them)
SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2")}

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class TextSource:
    """A file of texts with ids: ``kind`` is ``beir`` (records, JSON lines or Parquet, read by
    :func:`~dense_encoders.data.retrieval.corpus_record` / ``query_record``), ``tsv`` or ``lines``; ``hub``: the
    Hub dataset it is part of (``repo_id``, ``revision``: the commit, ``layout``), None for a local file."""

    path: Path
    kind: str
    side: str
    hub: dict | None = None

    def describe(self) -> dict:
        # a Hub dataset's file by its place in the snapshot (resolving it would give the cache's blob, without a name)
        path = self.path.absolute() if self.hub else self.path.resolve()
        return {"path": str(path), "kind": self.kind, **({"hub": self.hub} if self.hub else {})}

    def files(self) -> list[Path]:
        """The files read: the file, or the shards of a Parquet folder."""
        return parquet_shards(self.path) if self.path.is_dir() else [self.path]


TEXT_KINDS = {".jsonl": "beir", ".parquet": "beir", ".tsv": "tsv", ".txt": "lines"}


def text_source(path: str | Path, side: str = "document", *, revision: str | None = None) -> TextSource:
    """The file to read for ``side``: a BEIR folder gives its corpus.jsonl (or queries.jsonl), a Hub dataset id its
    corpus (or queries) at ``revision`` (:func:`~dense_encoders.data.hub_datasets.resolve_dataset`); files may be
    gzip-compressed."""
    if side not in SIDES:
        raise ValueError(f"side={side!r}: choose one of {SIDES}")
    part = "corpus" if side == "document" else "queries"
    resolved = resolve_dataset(path, revision=revision, parts=(part,), split=None)
    if isinstance(resolved, DatasetFiles):
        return TextSource(Path(resolved.part(part)), "beir", side, hub=resolved.hub)
    path = resolved
    if path.is_dir():
        name = f"{part}.jsonl"
        path = beir_file(path, name)
        if not path.is_file():
            raise FileNotFoundError(f"{path.parent} has no {name}: give a BEIR folder, a .jsonl, a .tsv or a .txt "
                                    "file, or a Hub dataset id")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: give a BEIR folder, a .jsonl, a .tsv or a .txt file, or the "
                                "id of a Hub dataset (namespace/name)")
    if data_suffix(path) not in TEXT_KINDS:
        raise ValueError(f"{path}: texts come as .jsonl (BEIR, with _id or id), .tsv (id<TAB>text) or .txt (one per "
                         f"line), each also .gz, not {data_suffix(path) or 'a file without suffix'}")
    return TextSource(path, TEXT_KINDS[data_suffix(path)], side)


def iterate_texts(source: TextSource, *, allow_empty: bool = False) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of every text in file order, read as a stream. BEIR lines are read as
    :func:`~dense_encoders.data.retrieval.corpus_record` / ``query_record`` read them (documents are
    ``title + " " + text``); ids follow :class:`~dense_encoders.data.format.UniqueIds` (not empty, no
    whitespace, and, once the last text is read, no repeats); a blank text is a :class:`DataFormatError`
    naming file:line unless ``allow_empty``."""
    if source.kind == "beir":
        ids = beir_ids(source.path, source.side)
    else:
        ids = UniqueIds(source.path, f"{source.side} id",
                        lambda: ((number, identifier) for number, identifier, _ in _raw_texts(source)))
    for number, identifier, text in _raw_texts(source):
        yield _checked(source, number, ids.add(number, identifier), text, allow_empty)
    ids.check()


def _raw_texts(source: TextSource) -> Iterator[tuple[int, str, str]]:
    """``(line number, id, text)`` of every text of ``source``, ids not yet checked."""
    if source.kind == "beir":
        for number, record in records(source.path):
            if source.side == "document":
                identifier, document = corpus_record(source.path, number, record)
                yield number, identifier, document_text(document)
            else:
                yield number, *query_record(source.path, number, record)
        return
    for number, line in text_lines(source.path):
        if source.kind == "lines":
            yield number, str(number), line
        elif line.strip():
            identifier, tab, text = line.partition("\t")
            if not tab or not identifier.strip():
                raise DataFormatError(source.path, number, "expected 'id<TAB>text'")
            yield number, identifier, text


def _checked(source: TextSource, number: int, identifier: str, text: str, allow_empty: bool) -> tuple[str, str]:
    if is_blank(text) and not allow_empty:
        what = "document" if source.side == "document" else "query"
        raise DataFormatError(source.path, number, f"blank {what} {identifier!r}: remove it, or pass "
                              "--allow-empty-documents to encode it as the empty text")
    return identifier, text


def scan_source(source: TextSource, *, allow_empty: bool = False) -> dict:
    """One streamed pass: the number of texts and the file's sha256 (what the manifest pins the corpus by; of the
    shards one after the other for a folder of Parquet shards)."""
    digest = hashlib.sha256()
    for path in source.files():
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    count = sum(1 for _ in iterate_texts(source, allow_empty=allow_empty))
    if count == 0:
        raise ValueError(f"{source.path} holds no texts")
    return {**source.describe(), "sha256": digest.hexdigest(), "count": count}


# ------------------------------------------------------------------------------------------------ shards


def shard_file(folder: Path, index: int) -> Path:
    return Path(folder) / f"shard-{index:05d}.safetensors"


def ids_file(folder: Path, index: int) -> Path:
    return Path(folder) / f"shard-{index:05d}.ids"


def written_shards(folder: Path) -> list[Path]:
    """The shard files (embeddings, complete or not) in ``folder``: what a run has written that another must
    not mix with."""
    return sorted(Path(folder).glob("shard-*.safetensors"))


def shard_folder_files(path: str | Path) -> list[Path]:
    """What a command that reads embedding shards must not write over: every file of a shards folder (its manifest,
    shards and ids, its own record ``encoding.json``, the indexes and records kept beside them), or a FAISS index with
    its ``.json`` record and the shards folder it records. What is not such a folder or index is itself (a text file
    or folder read whole). New files may still go into a shards folder (an index, a run)."""
    path = Path(path)
    record_path = path.with_suffix(".json")
    record = None
    if path.is_file() and record_path.is_file() and record_path != path:
        try:
            record = read_record(record_path)
        except ValueError:  # a sibling that is no record: the path is not an index
            record = None
    # an index is known by the record `dense-encoders index` writes beside it (whatever its suffix)
    if path.suffix == ".faiss" or (isinstance(record, dict) and "shards" in record):
        record = record if record is not None else read_record(record_path)
        shards = record.get("shards") if isinstance(record, dict) else None
        if shards is not None and not isinstance(shards, str):
            raise ValueError(f"{record_path}: its field 'shards' is {shards!r}, not the path of the shards folder: "
                             "build the index again with `dense-encoders index SHARDS --faiss ...`")
        shards = shard_folder_files(shards) if shards else []
        return [path, record_path, *shards]
    if not (path / MANIFEST_FILE).is_file():
        return [path]
    return sorted(entry for entry in path.iterdir() if entry.is_file() or entry.is_symlink())


def shard_count(count: int, shard_size: int) -> int:
    return -(-count // shard_size)


def shard_rows(count: int, shard_size: int, index: int) -> int:
    return min(shard_size, count - index * shard_size)


def _ids_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


def half_precision_rows(embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(half, scales)``: float16 rows and float32 per-row powers of two with ``scales[:, None] * half`` equal to
    ``embeddings`` rounded to float16's 11 significant bits, whatever the rows' magnitudes. A plain float16 cast
    flushes values below 6.1e-5 to subnormals (a few bits) and below 6e-8 to zero, and turns values above 65504
    into inf: a model with small or large vectors then ranks at random. Each row is divided by the power of two
    that brings its largest magnitude into ``[2**14, 2**15)``; dividing and multiplying by a power of two are
    exact, so only the float16 rounding remains (its relative precision, 2**-11, applies to every score)."""
    rows = np.asarray(embeddings, dtype=np.float32)
    largest = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows), dtype=np.float32)
    _, exponent = np.frexp(largest)  # largest = m * 2**exponent with m in [0.5, 1); exponent 0 for 0
    exponent = np.where(largest > 0, np.maximum(exponent - HALF_TOP_EXPONENT, SMALLEST_SCALE_EXPONENT), 0)
    scales = np.ldexp(np.float32(1), exponent.astype(np.int32)).astype(np.float32)
    return (rows / scales[:, None]).astype(np.float16), scales


def write_shard(folder: Path, index: int, embeddings: np.ndarray, ids: list[str], dtype: str) -> None:
    """Shard ``index``: ids, then embeddings (the file whose presence marks the shard done), each atomic. A
    float16 shard stores per-row scales beside the rows (:func:`half_precision_rows`)."""
    if len(ids) != len(embeddings):
        raise ValueError(f"shard {index}: {len(ids)} ids for {len(embeddings)} embeddings")
    if any(has_whitespace(identifier) or not identifier for identifier in ids):
        raise ValueError(f"shard {index}: an id is empty or contains whitespace")
    refuse_non_finite_vectors(embeddings, lambda row: f"text {ids[row]!r}", f"shard {index}")
    folder = Path(folder)
    with disk_full_as_one_line(folder, embeddings.nbytes):  # about the shard's size (its ids are little beside it)
        _write_shard_files(folder, index, embeddings, ids, dtype)


def _write_shard_files(folder: Path, index: int, embeddings: np.ndarray, ids: list[str], dtype: str) -> None:
    atomic_write(ids_file(folder, index), lambda scratch: Path(scratch).write_text(
        "".join(identifier + "\n" for identifier in ids), encoding="utf-8"))
    if dtype == "float16":
        half, scales = half_precision_rows(embeddings)
        tensors = {"embeddings": np.ascontiguousarray(half), SCALES: np.ascontiguousarray(scales)}
    else:
        tensors = {"embeddings": np.ascontiguousarray(embeddings, dtype=DTYPES[dtype])}
    # one metadata key: safetensors writes a mapping's keys in an order that varies between processes, and a
    # resumed run must write the same bytes
    metadata = {SHARD_METADATA: json.dumps({"rows": len(ids), "ids_sha256": _ids_digest(ids), "shard": index},
                                           sort_keys=True)}
    atomic_write(shard_file(folder, index), lambda scratch: save_file(tensors, scratch, metadata=metadata))


def _shard_metadata(metadata: dict | None) -> dict:
    """Our record in a shard's safetensors metadata (rows, ids digest, shard index); empty when it is unreadable."""
    try:
        return json.loads((metadata or {}).get(SHARD_METADATA, "{}"))
    except json.JSONDecodeError:
        return {}


def read_file_bytes(path: Path) -> np.ndarray:
    """A file's bytes, in one read into a numpy buffer: numpy backs large arrays with transparent huge pages, so a
    38 MB shard is read in 8 ms where a ``bytearray`` (4 KB page faults) takes 25 ms, as safetensors' own copy
    out of its memory map does."""
    with open(path, "rb", buffering=0) as handle:
        data = np.empty(os.fstat(handle.fileno()).st_size, dtype=np.uint8)
        done = 0
        while done < len(data):
            read = handle.readinto(memoryview(data)[done:])
            if not read:
                return data[:done]  # the file shrank while it was read: its size or digest tells
            done += read
    return data


def safetensors_arrays(data: np.ndarray) -> tuple[dict, dict[str, np.ndarray]]:
    """``(metadata, tensors)`` of the bytes of a safetensors file, each tensor a view of ``data`` (no copy): the
    format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte range
    after the header (and ``__metadata__``), then the tensors' bytes. Only the dtypes a shard holds are read
    (:data:`SAFETENSORS_DTYPES`); anything else is a ValueError. The shards are written by safetensors' own
    writer; this reader saves the copy out of a memory map of a file just read whole to check its sha256."""
    if len(data) < 8:
        raise ValueError("shorter than a safetensors header")
    length = int(data[:8].view("<u8")[0])
    if length > len(data) - 8:
        raise ValueError("its header runs past the end of the file")
    header = json.loads(data[8 : 8 + length].tobytes())
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    metadata, body, tensors = header.pop("__metadata__", None) or {}, data[8 + length :], {}
    for name, entry in header.items():
        if entry.get("dtype") not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r} has dtype {entry.get('dtype')!r}")
        dtype, (begin, end), shape = SAFETENSORS_DTYPES[entry["dtype"]], entry["data_offsets"], entry["shape"]
        if not 0 <= begin <= end <= len(body) or end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"tensor {name!r} of shape {shape} does not fit bytes {begin} to {end}")
        array = body[begin:end].view(dtype).reshape(shape)
        tensors[name] = array if array.flags.aligned else array.copy()
    return metadata, tensors


def read_shard_ids(folder: Path, index: int) -> list[str]:
    return ids_file(folder, index).read_text(encoding="utf-8").splitlines()


def read_shard(folder: Path, index: int, *, data: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """``(embeddings as float32, ids)`` of a complete shard (a float16 shard's rows times their scales); a
    damaged one is a one-line error naming it (:meth:`EmbeddingShards.shards` verifies the shard against the
    manifest first, and passes the file's bytes it read for that as ``data``). An unscaled float16 shard
    (format version 1) with rows below float16's normal range is read with a warning: those rows lost precision
    when they were written."""
    path = shard_file(folder, index)
    try:
        header, tensors = safetensors_arrays(read_file_bytes(path) if data is None else data)
        metadata, embeddings, scales = _shard_metadata(header), tensors["embeddings"], tensors.get(SCALES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: {REPAIR}") from None
    except Exception as error:  # a damaged file
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path} cannot be read ({reason}): {REPAIR}") from None
    ids = read_shard_ids(folder, index)
    if not _ids_match(metadata, ids, len(embeddings)):
        raise ValueError(f"{ids_file(folder, index)} does not match {path.name}: {REPAIR}")
    if scales is not None:  # one pass, one array: the float16 rows widened and scaled as they are multiplied
        return np.multiply(embeddings, scales.astype(np.float32)[:, None], dtype=np.float32), ids
    if embeddings.dtype == np.float16 and len(embeddings):
        largest = np.abs(embeddings.astype(np.float32)).max(axis=1)
        small = int((largest < HALF_SMALLEST_NORMAL).sum())
        if small:
            logger.warning("%s: %d of %d rows lie below float16's normal range (%.2g; zero rows included), "
                           "stored without scales by an older version: they may have lost precision; encode the "
                           "texts again into a new --output (or with --dtype float32)", path, small, len(embeddings),
                           HALF_SMALLEST_NORMAL)
    return np.asarray(embeddings, dtype=np.float32), ids


def _ids_match(metadata: dict, ids: list[str], rows: int) -> bool:
    return len(ids) == rows == metadata.get("rows", rows) and metadata.get("ids_sha256") == _ids_digest(ids)


def _header(path: Path) -> dict | None:
    """The shard's metadata, None when its header cannot be read."""
    try:
        with safe_open(str(path), framework="np") as handle:
            return _shard_metadata(handle.metadata())
    except Exception:  # noqa: BLE001 - any unreadable file is an incomplete shard
        return None


def shard_is_complete(folder: Path, index: int, rows: int) -> bool:
    """Whether shard ``index`` exists with ``rows`` rows and ids that match it (a resume skips it)."""
    path = shard_file(folder, index)
    if not path.is_file() or not ids_file(folder, index).is_file():
        return False
    metadata = _header(path)
    return metadata is not None and _ids_match(metadata, read_shard_ids(folder, index), rows)


def shard_damage(folder: Path, index: int, entry: dict, *, data: np.ndarray | None = None) -> str | None:
    """What is wrong with shard ``index`` against its manifest ``entry``, None when nothing: a missing file,
    another size or sha256 than the manifest records, or an ids file that does not match the shard. Reads the
    whole shard (sha256 at about 1.8 GB/s on one core), or hashes ``data``, its bytes the caller read
    (:func:`read_file_bytes`) to use them next (:func:`read_shard`)."""
    path, ids_path = shard_file(folder, index), ids_file(folder, index)
    if not path.is_file():
        return "is missing"
    if not ids_path.is_file():
        return f"has no {ids_path.name}"
    size = path.stat().st_size if data is None else len(data)
    if "bytes" in entry and size != entry["bytes"]:
        return f"is {size} bytes, the manifest records {entry['bytes']}"
    digest = file_sha256(path) if data is None else hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        return "differs from the sha256 the manifest records"
    if not shard_is_complete(folder, index, entry["rows"]):
        return f"does not match {ids_path.name}"
    return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------------ records


def encode_command(folder: Path, settings: dict) -> str:
    """The ``dense-encoders encode`` command that continues, or repairs, the run ``settings`` describe: the
    recorded model and texts (a Hub dataset by its id at the recorded commit), and every setting that decides the
    embeddings spelt out."""
    source = settings["source"]
    hub = source.get("hub")
    texts = [hub["repo_id"], "--dataset-revision", hub["revision"]] if hub else [source["path"]]
    argv = ["dense-encoders", "encode", settings["model"], texts[0], "--output", str(folder), *texts[1:]]
    if settings["side"] == "query":
        argv.append("--queries")
    argv += ["--shard-size", str(settings["shard_size"]), "--dtype", settings["dtype"], "--prompt",
             settings["prompt"] or "", "--max-length", str(settings["max_length"])]
    if settings.get("pooling"):
        argv += ["--pooling", settings["pooling"]]
    if settings.get("normalize"):
        argv.append("--normalize")
    if settings.get("allow_empty"):
        argv.append("--allow-empty-documents")
    return shlex.join(argv)


def differing_settings(recorded: dict, wanted: dict) -> list[str]:
    """The keys whose values differ, as ``key: recorded -> wanted`` (nested mappings compared key by key)."""
    problems = []
    for key in sorted(set(recorded) | set(wanted)):
        if recorded.get(key) != wanted.get(key):
            if isinstance(recorded.get(key), dict) and isinstance(wanted.get(key), dict):
                problems += [f"{key}.{item}" for item in differing_settings(recorded[key], wanted[key])]
            else:
                problems.append(f"{key}: {_short(recorded.get(key))} -> {_short(wanted.get(key))}")
    return problems


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 24 else text[:12] + "..." + text[-8:]


def read_record(path: Path) -> dict | None:
    """The JSON object of an ``encoding.json`` or ``manifest.json`` (:func:`~dense_encoders.data.files.read_json`),
    None when the file is missing."""
    value = read_json(path, fix="delete the folder's files or choose another --output")
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{path} is not an embeddings record")
    return value


def write_manifest(folder: Path, settings: dict, num_shards: int) -> "EmbeddingShards":
    """``manifest.json`` of a folder whose ``num_shards`` shards are all complete (the last step of a run)."""
    folder = Path(folder)
    shards, dimension = [], None
    for index in range(num_shards):
        rows = shard_rows(settings["count"], settings["shard_size"], index)
        if not shard_is_complete(folder, index, rows):
            raise ValueError(f"{shard_file(folder, index)} is missing or incomplete: run the same command again")
        if dimension is None:
            with safe_open(str(shard_file(folder, index)), framework="np") as handle:
                dimension = int(handle.get_slice("embeddings").get_shape()[1])
        shards.append({"file": shard_file(folder, index).name, "ids": ids_file(folder, index).name, "rows": rows,
                       "bytes": shard_file(folder, index).stat().st_size,
                       "sha256": file_sha256(shard_file(folder, index))})
    write_json(folder / MANIFEST_FILE, {"format": FORMAT, "version": VERSION, "settings": settings,
                                        "count": settings["count"], "dimension": dimension, "shards": shards})
    return EmbeddingShards.open(folder)


def save_embedding_shards(folder: str | Path, embeddings: np.ndarray, ids: list[str], *, shard_size: int = 100_000,
                          dtype: str = "float32", settings: dict | None = None) -> "EmbeddingShards":
    """Embeddings computed elsewhere (``[N, dim]``, rows in ``ids`` order) as a finished shards folder, e.g. to
    search or index them with the same tools; ``settings`` are recorded (side ``document`` unless given)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty: give a new folder")
    if len(ids) != len(embeddings) or len(ids) == 0:
        raise ValueError(f"{len(ids)} ids for {len(embeddings)} embeddings: give one id per row, at least one")
    if len(set(ids)) != len(ids):
        raise ValueError("the ids repeat: give every row its own id")
    folder.mkdir(parents=True, exist_ok=True)
    recorded = {"format": FORMAT, "version": VERSION, "side": "document", "similarity": "dot", "normalize": False,
                **(settings or {}), "dtype": dtype, "shard_size": shard_size, "count": len(ids)}
    write_json(folder / SETTINGS_FILE, recorded)
    for index in range(shard_count(len(ids), shard_size)):
        rows = slice(index * shard_size, (index + 1) * shard_size)
        write_shard(folder, index, np.asarray(embeddings[rows]), list(ids[rows]), dtype)
    return write_manifest(folder, recorded, shard_count(len(ids), shard_size))


@dataclass(frozen=True)
class EmbeddingShards:
    """A finished folder of shards (its ``manifest.json``), read shard by shard."""

    folder: Path
    manifest: dict

    @classmethod
    def open(cls, folder: str | Path) -> "EmbeddingShards":
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} does not exist: give a folder written by `dense-encoders encode`")
        manifest = read_record(folder / MANIFEST_FILE)
        if manifest is None:
            hint = ("it is an unfinished run: run the same `dense-encoders encode` command again to finish it"
                    if (folder / SETTINGS_FILE).is_file() else "it was not written by `dense-encoders encode`")
            raise FileNotFoundError(f"{folder} has no {MANIFEST_FILE}: {hint}")
        if manifest.get("format") != FORMAT or manifest.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"{folder / MANIFEST_FILE} is not a {FORMAT} manifest of version "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}")
        return cls(folder, manifest)

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    @property
    def dimension(self) -> int:
        return int(self.manifest["dimension"])

    @property
    def side(self) -> str:
        return self.manifest["settings"]["side"]

    @property
    def settings(self) -> dict:
        return self.manifest["settings"]

    def __len__(self) -> int:
        return len(self.manifest["shards"])

    def damage(self, index: int) -> str | None:
        """What is wrong with shard ``index`` (:func:`shard_damage`), None when it is as the manifest records."""
        return shard_damage(self.folder, index, self.manifest["shards"][index])

    def repair(self) -> str:
        """The fix of a damaged or missing shard: the encode command that rebuilds it."""
        settings = self.settings
        if not settings.get("model") or not isinstance(settings.get("source"), dict):
            return "this folder was not written by `dense-encoders encode`: save the embeddings again"
        return f"rebuild it with `{encode_command(self.folder, settings)}`"

    def shards(self) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """``(offset of the shard's first row, embeddings as float32, ids)`` of every shard in order, each one
        verified against the manifest (size, sha256, ids) before it is used. Each shard file is read once: its
        bytes are hashed, then its arrays are views of them (a float32 shard is not copied). The generator lets go
        of a shard before it reads the next: a caller that does too holds one shard at a time."""
        offset = 0
        for index in range(len(self)):
            path = shard_file(self.folder, index)
            data = read_file_bytes(path) if path.is_file() else None
            problem = shard_damage(self.folder, index, self.manifest["shards"][index], data=data)
            if problem is not None:
                raise ValueError(f"{path} {problem}: {self.repair()}")
            embeddings, ids = read_shard(self.folder, index, data=data)
            yield offset, embeddings, ids
            offset += len(ids)
            del data, embeddings, ids  # the next shard is read into memory this one's arrays held

    def ids(self) -> Iterator[str]:
        """Every id in row order, each shard's ids checked against the digest its shard's header records."""
        for index in range(len(self)):
            yield from self._checked_ids(index)

    def _checked_ids(self, index: int) -> list[str]:
        """Shard ``index``'s ids, checked against the digest its header records."""
        path, entry = shard_file(self.folder, index), self.manifest["shards"][index]
        if not path.is_file() or not ids_file(self.folder, index).is_file():
            raise FileNotFoundError(f"{path if not path.is_file() else ids_file(self.folder, index)} is "
                                    f"missing: {self.repair()}")
        ids, metadata = read_shard_ids(self.folder, index), _header(path)
        if metadata is None or not _ids_match(metadata, ids, entry["rows"]):
            raise ValueError(f"{ids_file(self.folder, index)} does not match {path.name}: {self.repair()}")
        return ids

    def ids_at(self, positions) -> list[str]:
        """The ids at the given global row positions, in the order given (one pass over the ids files of the
        shards that hold them, each checked as :meth:`ids` checks it)."""
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        if positions.size and not 0 <= positions.min() <= positions.max() < self.count:
            raise IndexError(f"row positions {positions.min()} to {positions.max()}: {self.folder} holds {self.count}")
        order = np.argsort(positions, kind="stable")
        wanted = positions[order]
        found = np.empty(len(positions), dtype=object)
        offset = 0
        for index, entry in enumerate(self.manifest["shards"]):
            first, last = np.searchsorted(wanted, [offset, offset + entry["rows"]])
            if first < last:
                ids = np.empty(entry["rows"], dtype=object)
                ids[:] = self._checked_ids(index)
                found[order[first:last]] = ids[wanted[first:last] - offset]
            offset += entry["rows"]
        return found.tolist()

__all__ = [
    "DTYPES",
    "EmbeddingShards",
    "MANIFEST_FILE",
    "shard_folder_files",
    "REPAIR",
    "SAFETENSORS_DTYPES",
    "SETTINGS_FILE",
    "TextSource",
    "differing_settings",
    "encode_command",
    "file_sha256",
    "half_precision_rows",
    "ids_file",
    "iterate_texts",
    "read_file_bytes",
    "read_record",
    "read_shard",
    "read_shard_ids",
    "safetensors_arrays",
    "save_embedding_shards",
    "scan_source",
    "shard_count",
    "shard_damage",
    "shard_file",
    "shard_is_complete",
    "shard_rows",
    "text_source",
    "write_manifest",
    "write_shard",
    "written_shards",
]
