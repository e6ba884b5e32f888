"""The search backends, one file each, every one a :class:`~.base.SearchBackend`: ``exact``
(:mod:`.exact`: torch, block by block, in memory or shard by shard) and ``faiss`` (:mod:`.faiss`: an
``IndexFlatIP`` in memory, stored ``index_factory`` indexes over shards).

A new backend is one file in this folder (a :class:`~.base.SearchBackend` subclass with a ``name``) and one
line in ``REGISTERED``; its name goes in :data:`dense_encoders.vectors.SEARCH_BACKEND_NAMES` too, which
``evaluate --help`` reads without importing torch (checked here at import).
"""

from __future__ import annotations

from typing import Any

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


def get_backend(name: str, **options: Any) -> SearchBackend:
    """The backend registered as ``name``, built with ``options`` (its constructor's arguments)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use one of {tuple(BACKENDS)}")
    return BACKENDS[name](**options)


def _check_backend_names() -> None:
    """The registered backends are the ones :data:`dense_encoders.vectors.SEARCH_BACKEND_NAMES` lists."""
    if tuple(BACKENDS) != SEARCH_BACKEND_NAMES:
        raise ValueError(f"the registered search backends {tuple(BACKENDS)} are not "
                         f"dense_encoders.vectors.SEARCH_BACKEND_NAMES {SEARCH_BACKEND_NAMES}: list each there too")


_check_backend_names()

__all__ = ["BACKENDS", "REGISTERED", "ExactSearch", "FaissSearch", "SearchBackend", "get_backend"]
