"""Distillation data: teacher-scored candidate lists and the collator that samples and tokenizes them.

Training file format (jsonl, one query per line; see :mod:`dense_encoders.trainer.teacher`, which
writes it from a run and a cross-encoder)::

    {"query_id": "q1", "query": "query text", "document_ids": ["d3", "d7"], "scores": [8.21, 1.5]}

``"documents"`` (texts) may be inlined instead of or next to ``"document_ids"``; with ids only, a
corpus resolves them. ``"scores"`` are raw teacher scores, one per document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .masking import EXAMPLE_INDEX, example_generator

SAMPLING_STRATEGIES = ("random", "top", "log-random")


def sample_documents(
    scores: Sequence[float], k: int, strategy: str = "random", generator: torch.Generator | None = None
) -> list[int]:
    """Indices of ``k`` of a query's documents, always including the teacher's best.

    ``top``: the teacher's k best. ``random``: the best plus k-1 drawn uniformly from the rest.
    ``log-random``: the best plus k-1 drawn without replacement with probability proportional to
    1 / (teacher rank - 1) (ranks 2, 3, ...), i.e. uniform over log-rank: hard negatives are likely,
    the tail is still seen. Fewer than k documents: all of them. Returned in teacher order.
    """
    if strategy not in SAMPLING_STRATEGIES:
        raise ValueError(f"sampling strategy {strategy!r}: choose one of {SAMPLING_STRATEGIES}")
    if k < 1:
        raise ValueError(f"documents per query must be at least 1, got {k}")
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))  # teacher ranking
    if len(order) <= k:
        return order
    if strategy == "top":
        return order[:k]
    rest = order[1:]
    if strategy == "random":
        weights = torch.ones(len(rest))
    else:
        weights = 1.0 / torch.arange(1, len(rest) + 1, dtype=torch.float64)
    picked = torch.multinomial(weights, k - 1, replacement=False, generator=generator).tolist()
    chosen = [order[0]] + [rest[i] for i in picked]
    rank = {index: position for position, index in enumerate(order)}
    return sorted(chosen, key=rank.__getitem__)


class DistillationCollator:
    """Sample ``documents_per_query`` documents per query and tokenize queries and documents.

    Queries and documents have their own max lengths (32 / 512 by default, TITE's fine-tuning
    setup). Queries with fewer documents than asked get padded slots: a one-token placeholder with
    ``document_mask`` False, which every loss ignores. Sampling is seeded by (seed, epoch, example
    index) when examples carry ``example_index``, so a resumed run sees the same documents.

    Batch: ``query_input_ids`` / ``query_attention_mask`` [Q, Lq], ``document_input_ids`` /
    ``document_attention_mask`` [Q*K, Ld], ``teacher_scores`` and ``document_mask`` [Q, K].
    """

    def __init__(
        self,
        tokenizer,
        *,
        documents_per_query: int = 8,
        sampling: str = "random",
        query_max_length: int = 32,
        document_max_length: int = 512,
        min_documents: int = 1,
        query_prefix: str = "",
        document_prefix: str = "",
        seed: int | None = None,
    ):
        if sampling not in SAMPLING_STRATEGIES:
            raise ValueError(f"sampling={sampling!r}: choose one of {SAMPLING_STRATEGIES}")
        if documents_per_query < min_documents:
            raise ValueError(
                f"documents_per_query={documents_per_query} but the configured losses need at least {min_documents}"
            )
        for name, value in (("query_max_length", query_max_length), ("document_max_length", document_max_length)):
            if value < 2:
                raise ValueError(f"{name}={value}: must leave room for at least one token besides the specials")
        self.tokenizer = tokenizer
        self.documents_per_query = documents_per_query
        self.sampling = sampling
        self.query_max_length = query_max_length
        self.document_max_length = document_max_length
        self.min_documents = min_documents
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.seed = seed
        self.epoch = 0
        self.generator = torch.Generator().manual_seed(seed if seed is not None else 0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _generator_for(self, example: Mapping[str, Any]) -> torch.Generator:
        if self.seed is not None and EXAMPLE_INDEX in example:
            return example_generator(self.seed, self.epoch, int(example[EXAMPLE_INDEX]))
        return self.generator

    def __call__(self, examples: list[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("empty batch")
        k = self.documents_per_query
        queries, documents, teacher, mask = [], [], [], []
        for example in examples:
            scores = [float(s) for s in example["scores"]]
            texts = example["documents"]
            where = f"query {example.get('query_id', '?')!r}"
            if len(scores) != len(texts):
                raise ValueError(f"{where}: {len(scores)} teacher scores for {len(texts)} documents")
            if not all(math.isfinite(s) for s in scores):
                raise ValueError(f"{where}: teacher scores must be finite, got {scores}")
            if len(texts) < self.min_documents:
                raise ValueError(
                    f"{where} has {len(texts)} document(s) but the configured losses need at least {self.min_documents}"
                )
            chosen = sample_documents(scores, k, self.sampling, self._generator_for(example))
            queries.append(self.query_prefix + example["query"])
            documents.extend(self.document_prefix + texts[i] for i in chosen)
            teacher.append([scores[i] for i in chosen] + [0.0] * (k - len(chosen)))
            mask.append([True] * len(chosen) + [False] * (k - len(chosen)))
            documents.extend([""] * (k - len(chosen)))  # placeholders, masked out
        query_batch = self.tokenizer(
            queries, padding=True, truncation=True, max_length=self.query_max_length, return_tensors="pt"
        )
        document_batch = self.tokenizer(
            documents, padding=True, truncation=True, max_length=self.document_max_length, return_tensors="pt"
        )
        return {
            "query_input_ids": query_batch["input_ids"],
            "query_attention_mask": query_batch["attention_mask"],
            "document_input_ids": document_batch["input_ids"],
            "document_attention_mask": document_batch["attention_mask"],
            "teacher_scores": torch.tensor(teacher, dtype=torch.float32),
            "document_mask": torch.tensor(mask, dtype=torch.bool),
        }


def training_records_to_dataset(records: list[dict]):
    """Records of :func:`~dense_encoders.trainer.teacher.read_training_file` as a ``datasets.Dataset``
    with ``query``, ``documents``, ``scores``, ``query_id`` and ``example_index`` columns."""
    import datasets

    if not records:
        raise ValueError("no training records")
    return datasets.Dataset.from_dict(
        {
            "query_id": [str(r.get("query_id", i)) for i, r in enumerate(records)],
            "query": [r["query"] for r in records],
            "documents": [list(r["documents"]) for r in records],
            "scores": [[float(s) for s in r["scores"]] for r in records],
            EXAMPLE_INDEX: list(range(len(records))),
        }
    )


__all__ = ["SAMPLING_STRATEGIES", "DistillationCollator", "sample_documents", "training_records_to_dataset"]
