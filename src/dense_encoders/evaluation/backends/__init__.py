"""The search backends, one file each, every one a :class:`~.base.SearchBackend`: ``exact``
(:mod:`.exact`: torch, block by block, in memory or shard by shard) and ``faiss`` (:mod:`.faiss`: an
``IndexFlatIP`` in memory, stored ``index_factory`` indexes over shards).

A new backend is one file in this folder (a :class:`~.base.SearchBackend` subclass with a ``name`` and the
``label`` a model card names it by) and one line in ``REGISTERED``; its name goes in
:data:`dense_encoders.vectors.SEARCH_BACKEND_NAMES` too, which ``evaluate --help`` reads without importing torch
(checked here at import). What every backend builds on (the prepared inputs, the scored blocks, the running top-k)
is :mod:`.core`, which imports none of them; :mod:`dense_encoders.evaluation.search` holds the entry points above.

A stored index has a record beside it (``<index>.json``, :func:`index_record_path`) naming the backend that
searches it (``backend``): :func:`stored_index_backend` reads it, and ``dense-encoders search`` asks that backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...data.embedding_shards import read_record
from ...vectors import SEARCH_BACKEND_NAMES
from .base import SearchBackend
from .exact import ExactSearch
from .faiss import FaissSearch

REGISTERED: tuple[type[SearchBackend], ...] = (
    ExactSearch,
    FaissSearch,
)

#: backend name -> class, in the order error messages list them
BACKENDS: dict[str, type[SearchBackend]] = {backend.name: backend for backend in REGISTERED}


#: the backend of an index record that names none: a record written before records named theirs (FAISS indexes
#: were the only stored ones then)
UNNAMED_INDEX_BACKEND = FaissSearch.name


def backend_class(name: str) -> type[SearchBackend]:
    """The class registered as ``name`` (its ``label`` is how a model card names it)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use one of {tuple(BACKENDS)}")
    return BACKENDS[name]


def get_backend(name: str, **options: Any) -> SearchBackend:
    """The backend registered as ``name``, built with ``options`` (its constructor's arguments)."""
    return backend_class(name)(**options)


def index_record_path(path: str | Path) -> Path:
    """The record written beside a stored index (``index-Flat.faiss`` -> ``index-Flat.json``)."""
    return Path(path).with_suffix(".json")


def stored_index_backend(path: str | Path) -> SearchBackend | None:
    """The backend that searches the stored index at ``path``, as the record beside it names it; None when
    ``path`` is no stored index (a folder, or neither a file nor a record is there: embedding shards, or nothing).
    A file without a record, or a record naming a backend this version does not know, is a one-line error naming
    the path and the fix."""
    path = Path(path)
    record_path = index_record_path(path)
    if path.is_dir() or not (path.is_file() or record_path.is_file()):
        return None
    record = read_record(record_path)
    if record is None:
        raise FileNotFoundError(f"{path} has no record {record_path.name} beside it: give an index built by "
                                "`dense-encoders index SHARDS --faiss ...` or a folder written by "
                                "`dense-encoders encode`")
    name = record.get("backend", UNNAMED_INDEX_BACKEND) if isinstance(record, dict) else None
    if not isinstance(name, str) or name not in BACKENDS:  # a damaged record may name a list or an object
        raise ValueError(f"{path}: its record {record_path.name} names the search backend {name!r}, which this "
                         f"version does not know (it knows {', '.join(BACKENDS)}): search it with the "
                         "dense-encoders version that built it, or build the index again with `dense-encoders index`")
    return BACKENDS[name]()


def _check_backend_names() -> None:
    """The registered backends are the ones :data:`dense_encoders.vectors.SEARCH_BACKEND_NAMES` lists."""
    if tuple(BACKENDS) != SEARCH_BACKEND_NAMES:
        raise ValueError(f"the registered search backends {tuple(BACKENDS)} are not "
                         f"dense_encoders.vectors.SEARCH_BACKEND_NAMES {SEARCH_BACKEND_NAMES}: list each there too")


_check_backend_names()

__all__ = ["BACKENDS", "REGISTERED", "UNNAMED_INDEX_BACKEND", "ExactSearch", "FaissSearch", "SearchBackend",
           "backend_class", "get_backend", "index_record_path", "stored_index_backend"]
