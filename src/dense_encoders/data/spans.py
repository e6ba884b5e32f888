"""coCondenser span data: split documents into spans and sample span pairs (Gao & Callan 2022).

coCondenser's corpus-aware contrastive loss needs, per document, two random spans; the
in-batch sibling of row ``i`` is row ``i ^ 1``. Documents are pre-split into random
non-overlapping consecutive spans (:func:`split_into_spans`, :func:`add_spans`); the
:class:`CoCondenserCollator` samples two distinct spans per document and whole-word masks each.
Randomness follows :mod:`~dense_encoders.data.masking`: with a ``seed``, span boundaries come from
per-document generators and span choice + masks from per-example, per-epoch generators, so
resumed runs see exactly the batches an uninterrupted run would; otherwise torch's global RNG.
"""

from __future__ import annotations

import logging
import numbers
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch

from .masking import EXAMPLE_INDEX, WholeWordMaskingCollator, example_generator

__all__ = ["split_into_spans", "add_spans", "CoCondenserCollator"]

logger = logging.getLogger(__name__)


def _check_span_bounds(min_span_tokens: Any, max_span_tokens: Any) -> None:
    for name, value in (("min_span_tokens", min_span_tokens), ("max_span_tokens", max_span_tokens)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if not 1 <= min_span_tokens <= max_span_tokens:
        raise ValueError(
            f"span lengths need 1 <= min_span_tokens <= max_span_tokens, got min_span_tokens={min_span_tokens}, "
            f"max_span_tokens={max_span_tokens}"
        )


def split_into_spans(
    token_ids: Sequence[int] | torch.Tensor,
    min_span_tokens: int = 80,
    max_span_tokens: int = 128,
    *,
    generator: Optional[torch.Generator] = None,
) -> list[list[int]]:
    """Split a document into consecutive, non-overlapping spans (coCondenser pre-processing).

    Span lengths are drawn uniformly from ``[min_span_tokens, max_span_tokens]``. A trailing
    remainder shorter than ``min_span_tokens`` is dropped so that every span has a useful
    length -- unless it is the only piece, so a document shorter than ``min_span_tokens``
    yields one (short) span (and an empty document yields none). The spans therefore
    concatenate to a prefix of ``token_ids``.
    """
    _check_span_bounds(min_span_tokens, max_span_tokens)
    ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else [int(i) for i in token_ids]
    spans: list[list[int]] = []
    start = 0
    while start < len(ids):
        length = int(torch.randint(min_span_tokens, max_span_tokens + 1, (1,), generator=generator))
        piece = ids[start : start + length]
        if len(piece) < min_span_tokens:
            if not spans:
                spans.append(piece)
            break
        spans.append(piece)
        start += length
    return spans


def _column_names(dataset) -> Optional[list[str]]:
    names = getattr(dataset, "column_names", None)
    return list(names) if names is not None else None


def add_spans(
    dataset,
    tokenizer,
    min_span_tokens: int = 80,
    max_span_tokens: int = 128,
    text_column: str = "text",
    drop_short: bool = True,
    seed: Optional[int] = None,
):
    """Tokenize ``text_column`` (no special tokens) into a ``spans`` column of span lists.

    Each row also gets ``example_index`` (its document's position), which the collator's
    ``seed`` uses; with ``seed`` given here, each document's span boundaries are drawn from its
    own generator, so they do not depend on the order or laziness of processing.

    Works on ``datasets.Dataset`` (eagerly) and ``datasets.IterableDataset`` (lazily; spans are
    drawn while iterating). With ``drop_short``, documents with fewer than 2 spans -- unusable for
    coCondenser's span pairs -- are filtered out.
    """
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    _check_span_bounds(min_span_tokens, max_span_tokens)
    columns = _column_names(dataset)
    if columns is not None and text_column not in columns:
        raise ValueError(
            f"text_column {text_column!r} is not a column of the dataset (columns: {columns}); "
            "pass text_column=<the column holding the documents>"
        )

    def _spans(texts, indices):
        encoded = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        generators = [example_generator(seed, i) if seed is not None else None for i in indices]
        return {
            "spans": [
                split_into_spans(ids, min_span_tokens, max_span_tokens, generator=g)
                for ids, g in zip(encoded, generators)
            ],
            EXAMPLE_INDEX: list(indices),
        }

    dataset = dataset.select_columns([text_column])
    if isinstance(dataset, datasets.Dataset):
        n_docs = len(dataset)
        # never reuse a cached result: spans are random, a cache hit would ignore the seed
        dataset = dataset.map(
            _spans,
            input_columns=text_column,
            with_indices=True,
            batched=True,
            remove_columns=[text_column],
            load_from_cache_file=False,
            new_fingerprint=f"add_spans-{uuid.uuid4().hex}",
            desc="splitting documents into spans",
        )
    else:
        n_docs = None
        dataset = dataset.map(
            _spans, input_columns=text_column, with_indices=True, batched=True, remove_columns=[text_column]
        )
    if drop_short:
        dataset = dataset.filter(lambda spans: [len(s) >= 2 for s in spans], input_columns="spans", batched=True)
        if n_docs is not None:
            dropped = n_docs - len(dataset)
            logger.info(
                "add_spans: dropped %d of %d documents with fewer than 2 spans (min_span_tokens=%d)",
                dropped,
                n_docs,
                min_span_tokens,
            )
    return dataset


@dataclass(eq=False)
class CoCondenserCollator(WholeWordMaskingCollator):
    """Sample two distinct spans per document and whole-word mask each (coCondenser batches).

    Each example has ``spans`` (>= 2 lists of token ids without special tokens). Rows are
    ordered ``[d1s1, d1s2, d2s1, d2s2, ...]`` -- the sibling of row ``i`` is row ``i ^ 1`` -- and
    the keys are those of :class:`WholeWordMaskingCollator`.
    """

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(examples) == 0:
            raise ValueError("CoCondenserCollator got an empty batch (no examples)")
        rows = []
        for i, example in enumerate(examples):
            if not isinstance(example, Mapping) or "spans" not in example:
                found = sorted(example) if isinstance(example, Mapping) else type(example).__name__
                raise ValueError(
                    f"example {i} has no 'spans' (found {found}); build spans with "
                    "dense_encoders.data.add_spans(dataset, tokenizer)"
                )
            spans = example["spans"]
            if len(spans) < 2:
                raise ValueError(
                    f"example {i} has {len(spans)} span(s) but coCondenser needs 2 per document; build spans with "
                    "add_spans(..., drop_short=True) to drop such documents, or lower min_span_tokens"
                )
            generator = self.generator_for(example)
            for j in torch.randperm(len(spans), generator=generator)[:2].tolist():
                if len(spans[j]) == 0:
                    raise ValueError(f"example {i}: span {j} is empty; spans must hold at least one token")
                rows.append(self.mask_tokens(spans[j], generator))
        return self._build_batch(rows)
