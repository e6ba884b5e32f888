"""The interface every search backend implements: :class:`SearchBackend`.

A backend finds the ``k`` best documents of every query. It answers ``(scores, indices)`` of shape
``[Q, min(k, D)]`` (float32, int64), best first, among equal scores the lower document index first
(a backend that approximates says which documents it may miss). The documents are a ``[D, dim]`` matrix in
memory (:meth:`SearchBackend.search`) or embedding shards on disk, searched one shard at a time
(:meth:`SearchBackend.search_shards`; a backend that cannot refuses in one line). A backend that stores indexes
opens and searches them (:meth:`SearchBackend.open_index`, :meth:`SearchBackend.search_index`): the record written
beside an index names its backend (``backend``), which ``dense-encoders search`` looks up in the registry. Its
options (block sizes, device, progress bar, ...) are its constructor's arguments.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ...data.embedding_shards import EmbeddingShards
from ...vectors import SIMILARITIES


class SearchBackend(ABC):
    """One way of searching dense embeddings, registered under :attr:`name` in
    :mod:`dense_encoders.evaluation.backends`."""

    #: the name ``evaluate --backend`` takes and a results JSON records as ``settings.search_backend``
    name: ClassVar[str]
    #: how a model card's results table names the search (its ``search`` column): a results JSON records it as
    #: ``settings.search_backend_label``, which the card reads (so a new backend needs no edit of the card)
    label: ClassVar[str]
    #: why :meth:`search_shards` is refused (None: the backend searches shards)
    shards_refusal: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A backend that gives no :attr:`label` is labelled by its :attr:`name`."""
        super().__init_subclass__(**kwargs)
        if "label" not in vars(cls) and "name" in vars(cls):
            cls.label = cls.name

    @abstractmethod
    def search(self, queries: Any, documents: Any, k: Any, *, similarity: str = "cosine"
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` of every row of ``queries`` (``[Q, dim]``) among the rows of ``documents`` (``[D, dim]``),
        both tensors or arrays; ``k`` is clamped to ``D``; ``similarity`` ``"cosine"`` or ``"dot"``."""

    def search_shards(self, queries: np.ndarray, documents: EmbeddingShards, k: Any, *,
                      similarity: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` of every query among the rows of the shards (global row indices, in the shards' order), in
        memory bounded by one shard; ``similarity`` None: the shards' own."""
        raise ValueError(self.shards_refusal or f"the {self.name} backend does not search embedding shards")

    def open_index(self, path: str | Path) -> tuple[Any, dict, EmbeddingShards]:
        """``(index, its record, the shards it indexes)`` of an index this backend stored at ``path``."""
        raise ValueError(f"{path}: the {self.name} backend stores no indexes; search the embedding shards folder, "
                         "or build an index with `dense-encoders index`")

    def search_index(self, index: Any, record: dict, queries: np.ndarray, k: int, **options: Any
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of every query in an index from :meth:`open_index`: ``(scores, global row indices)``, ``-1``
        where an index returns fewer; ``options`` are the backend's search settings (e.g. ``nprobe``)."""
        raise ValueError(f"the {self.name} backend stores no indexes")


def shards_similarity(documents: EmbeddingShards, similarity: str | None) -> str:
    """``similarity``, or the one the shards' model declares, or cosine; an unknown name is refused."""
    similarity = similarity or documents.settings.get("similarity") or "cosine"
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r}: choose cosine or dot")
    return similarity


__all__ = ["SearchBackend", "shards_similarity"]
