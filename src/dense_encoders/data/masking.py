"""Whole-word masking collator for Condenser MLM pre-training.

Implements BERT's whole-word masking as in Google's ``create_pretraining_data.py``
(Devlin et al. 2019): a budget of ``max(1, round(n * mlm_probability))`` tokens, whole words
picked in random order and skipped when they would overflow the budget, and per chosen token
80% ``[MASK]`` / 10% random token / 10% unchanged. Unlike the Condenser reference collator
(Gao & Callan 2021), which cropped the tokens and the mask at two *different* random
offsets, a long example is cropped exactly once and the mask is computed on the cropped tokens.

Randomness: with ``seed`` set and examples that carry an ``example_index`` (as the datasets of
:func:`~dense_encoders.data.tokenize_for_condenser` and :func:`~dense_encoders.data.add_spans`
do), each example's crop and mask come from a generator seeded by ``(seed, epoch, example_index)``.
Masks are then a pure function of the example and the epoch: a run resumed from a checkpoint, a
different number of processes or data-loader workers, or the Trainer's one-batch prefetch cannot
change them (the Trainer restores its RNG only *after* prefetching the next batch, so global-RNG
masks would differ after a resume). Otherwise torch's global RNG (or ``generator``) is used. The
epoch lives in shared memory (:class:`SharedEpoch`), so persistent data-loader workers, which keep
the copy of the collator they got at the first epoch, draw with the epoch the Trainer set last.
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import torch

from ..tokenization.wordpiece import word_ids

__all__ = ["WholeWordMaskingCollator", "PerEpochDraws", "SharedEpoch", "example_generator", "EXAMPLE_INDEX"]

IGNORE_INDEX = -100
EXAMPLE_INDEX = "example_index"


def example_generator(seed: int, *keys: int) -> torch.Generator:
    """A generator seeded by ``seed`` and integer ``keys`` (e.g. epoch, example index)."""
    value = int(seed) & 0x7FFFFFFF
    for key in keys:
        value = (value * 1_000_003 + int(key) + 1) % (2**61 - 1)
    generator = torch.Generator()
    generator.manual_seed(value)
    return generator


class SharedEpoch:
    """The epoch that a collator's per-epoch draws are seeded with (:func:`example_generator`), held in shared
    memory.

    A ``DataLoader`` with workers hands each worker process a copy of its collator when an epoch's iterator
    starts; with ``persistent_workers`` that copy is made once, at the first epoch, and kept. An epoch held as a
    plain attribute would then stay 0 in the workers whatever the Trainer sets: every epoch would draw the first
    epoch's documents or masks, and a run resumed in a later epoch (whose workers start afresh) would draw others
    than the uninterrupted run. A shared-memory tensor is the same memory in the main process and in every worker,
    forked or spawned, so the workers read the epoch set last."""

    def __init__(self, epoch: int = 0):
        self._value = torch.zeros((), dtype=torch.int64).share_memory_()
        self.set(epoch)

    def set(self, epoch: int) -> None:
        self._value.fill_(int(epoch))

    def __int__(self) -> int:
        return int(self._value)

    def __repr__(self) -> str:
        return f"SharedEpoch({int(self)})"


class _GeneratorState(bytes):
    """A ``torch.Generator``'s state, as it is pickled (:meth:`PerEpochDraws.__getstate__`)."""


class PerEpochDraws:
    """Base of the collators whose draws are seeded per epoch (whole-word masks, distillation samples): the epoch
    the Trainer sets (:class:`SharedEpoch`, in ``self._epoch``, which the collator creates), and pickling for
    spawned data-loader workers (macOS's default start method): torch cannot pass a ``torch.Generator``'s state
    tensor to another process, so a generator attribute travels as its state's bytes."""

    _epoch: SharedEpoch

    @property
    def epoch(self) -> int:
        """The epoch the draws are made for: the same in every data-loader worker."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Give each epoch fresh draws (called by the Trainers at every epoch start)."""
        self._epoch.set(epoch)

    def __getstate__(self) -> dict:
        return {name: _GeneratorState(bytes(value.get_state().numpy())) if isinstance(value, torch.Generator)
                else value for name, value in self.__dict__.items()}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            if isinstance(value, _GeneratorState):
                state[name] = torch.Generator()
                state[name].set_state(torch.frombuffer(bytearray(value), dtype=torch.uint8))
        self.__dict__.update(state)


def _check_probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


@dataclass(eq=False)
class WholeWordMaskingCollator(PerEpochDraws):
    """Crop, whole-word mask (80/10/10) and pad examples of ``input_ids`` without special tokens.

    Each example is a mapping with ``input_ids`` (list of ints or 1-D tensor, no ``[CLS]``/``[SEP]``).
    The batch gets ``[CLS] ... [SEP]`` added and is padded to the longest row (optionally rounded
    up to ``pad_to_multiple_of``). Returns long tensors ``input_ids``, ``attention_mask``,
    ``token_type_ids`` (zeros) and ``labels`` (original id at masked positions, -100 elsewhere).

    ``mlm_probability=0`` disables masking (all labels -100); any positive value masks at least
    one token per example, as in Google's BERT.
    """

    tokenizer: Any
    max_length: int = 128
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    pad_to_multiple_of: Optional[int] = None
    generator: Optional[torch.Generator] = None
    seed: Optional[int] = None
    _epoch: SharedEpoch = field(init=False, repr=False)
    _random_token_ids: torch.Tensor = field(init=False, repr=False)
    _never_mask_ids: frozenset = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._epoch = SharedEpoch(0)
        max_length = self.max_length
        if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral) or max_length < 3:
            raise ValueError(
                f"max_length must be an integer >= 3 (room for [CLS], [SEP] and one token), got {self.max_length!r}"
            )
        self.max_length = int(self.max_length)
        self.mlm_probability = _check_probability("mlm_probability", self.mlm_probability)
        self.mask_replace_prob = _check_probability("mask_replace_prob", self.mask_replace_prob)
        self.random_replace_prob = _check_probability("random_replace_prob", self.random_replace_prob)
        if self.mask_replace_prob + self.random_replace_prob > 1.0 + 1e-9:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob must be <= 1, got {self.mask_replace_prob} + "
                f"{self.random_replace_prob} = {self.mask_replace_prob + self.random_replace_prob}; "
                "lower one of them (BERT uses 0.8 and 0.1)"
            )
        if self.pad_to_multiple_of is not None and (
            isinstance(self.pad_to_multiple_of, bool)
            or not isinstance(self.pad_to_multiple_of, numbers.Integral)
            or self.pad_to_multiple_of < 1
        ):
            raise ValueError(f"pad_to_multiple_of must be None or a positive integer, got {self.pad_to_multiple_of!r}")
        for attr in ("cls_token_id", "sep_token_id", "mask_token_id", "pad_token_id"):
            if getattr(self.tokenizer, attr, None) is None:
                raise ValueError(
                    f"the tokenizer has no {attr[:-3]} ({attr} is None); use a BERT-style WordPiece tokenizer, "
                    "e.g. dense_encoders.tokenization.load_tokenizer()"
                )
        self._vocab_size = len(self.tokenizer)
        special = set(int(i) for i in self.tokenizer.all_special_ids)
        non_special = [i for i in range(self._vocab_size) if i not in special]
        self._random_token_ids = torch.tensor(non_special, dtype=torch.long)
        if self._random_token_ids.numel() == 0:
            raise ValueError("the tokenizer vocabulary has no non-special tokens to draw random replacements from")
        # [UNK] is a real (unknown) word and may be masked; [CLS]/[SEP]/[PAD]/[MASK] never are.
        self._never_mask_ids = frozenset(special - {self.tokenizer.unk_token_id})

    # ------------------------------------------------------------------ helpers
    def generator_for(self, example: Mapping[str, Any]) -> Optional[torch.Generator]:
        """The example's own generator (``seed`` + ``example_index``), else ``self.generator``."""
        if self.seed is not None and isinstance(example, Mapping) and EXAMPLE_INDEX in example:
            return example_generator(self.seed, self.epoch, int(example[EXAMPLE_INDEX]))
        return self.generator

    def _as_id_list(self, token_ids: Any, where: str) -> list[int]:
        if isinstance(token_ids, torch.Tensor):
            if token_ids.dim() != 1:
                raise ValueError(f"{where}: input_ids must be 1-D, got a tensor of shape {tuple(token_ids.shape)}")
            ids = token_ids.tolist()
        elif hasattr(token_ids, "tolist"):  # numpy arrays
            ids = token_ids.tolist()
        elif isinstance(token_ids, Sequence) and not isinstance(token_ids, (str, bytes)):
            ids = list(token_ids)
        else:
            raise ValueError(f"{where}: input_ids must be a list of token ids, got {type(token_ids).__name__}")
        try:
            ids = [operator.index(i) for i in ids]
        except TypeError:
            raise ValueError(f"{where}: input_ids must contain integer token ids, got {ids[:8]!r}...") from None
        bad = [i for i in ids if not 0 <= i < self._vocab_size]
        if bad:
            raise ValueError(
                f"{where}: token id {bad[0]} is outside the tokenizer vocabulary [0, {self._vocab_size}); "
                "tokenize with the same tokenizer that is passed to the collator"
            )
        return ids

    def mask_tokens(
        self, token_ids: Sequence[int] | torch.Tensor, generator: Optional[torch.Generator] = None
    ) -> tuple[list[int], list[int]]:
        """Crop (one random offset) and whole-word mask one example; no special tokens are added.

        Returns ``(input_ids, labels)`` of equal length with ``labels`` = original id at the
        chosen positions and -100 elsewhere. ``generator`` defaults to ``self.generator``.
        """
        generator = generator if generator is not None else self.generator
        ids = self._as_id_list(token_ids, "mask_tokens")
        if not ids:
            raise ValueError("mask_tokens got an empty token list; drop empty documents before masking")
        window = self.max_length - 2
        if len(ids) > window:
            offset = int(torch.randint(0, len(ids) - window + 1, (1,), generator=generator))
            ids = ids[offset : offset + window]
        n = len(ids)

        # whole words (lists of positions) that may be masked
        words: list[list[int]] = []
        for pos, w in enumerate(word_ids(self.tokenizer.convert_ids_to_tokens(ids))):
            if w == len(words):
                words.append([pos])
            else:
                words[w].append(pos)
        candidates = [w for w in words if not any(ids[p] in self._never_mask_ids for p in w)]

        budget = max(1, round(n * self.mlm_probability)) if self.mlm_probability > 0 else 0
        chosen: list[int] = []
        for wi in torch.randperm(len(candidates), generator=generator).tolist():
            if len(chosen) >= budget:
                break
            if len(chosen) + len(candidates[wi]) > budget:
                continue  # skip words that would overflow the budget (Google's BERT)
            chosen.extend(candidates[wi])
        chosen.sort()

        input_ids = list(ids)
        labels = [IGNORE_INDEX] * n
        if chosen:
            k = len(chosen)
            draw = torch.rand(k, generator=generator).tolist()
            random_ids = self._random_token_ids[
                torch.randint(0, len(self._random_token_ids), (k,), generator=generator)
            ].tolist()
            mask_id = self.tokenizer.mask_token_id
            for j, pos in enumerate(chosen):
                labels[pos] = ids[pos]
                if draw[j] < self.mask_replace_prob:
                    input_ids[pos] = mask_id
                elif draw[j] < self.mask_replace_prob + self.random_replace_prob:
                    input_ids[pos] = random_ids[j]
                # else: keep the original token
        return input_ids, labels

    def _build_batch(self, rows: Sequence[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        """Add ``[CLS]``/``[SEP]`` to masked rows and pad them into long tensors."""
        cls_id, sep_id, pad_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.tokenizer.pad_token_id
        width = max(len(ids) for ids, _ in rows) + 2
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            width = (width + m - 1) // m * m
        batch = {
            "input_ids": torch.full((len(rows), width), pad_id, dtype=torch.long),
            "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
            "token_type_ids": torch.zeros((len(rows), width), dtype=torch.long),
            "labels": torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long),
        }
        for r, (ids, labels) in enumerate(rows):
            length = len(ids) + 2
            batch["input_ids"][r, :length] = torch.tensor([cls_id, *ids, sep_id], dtype=torch.long)
            batch["attention_mask"][r, :length] = 1
            batch["labels"][r, 1 : length - 1] = torch.tensor(labels, dtype=torch.long)
        return batch

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(examples) == 0:
            raise ValueError("WholeWordMaskingCollator got an empty batch (no examples)")
        rows = []
        for i, example in enumerate(examples):
            if not isinstance(example, Mapping) or "input_ids" not in example:
                found = sorted(example) if isinstance(example, Mapping) else type(example).__name__
                raise ValueError(
                    f"example {i} has no 'input_ids' (found {found}); tokenize the corpus first, "
                    "e.g. with dense_encoders.data.tokenize_for_condenser"
                )
            ids = self._as_id_list(example["input_ids"], f"example {i}")
            if not ids:
                raise ValueError(
                    f"example {i} has 0 tokens (empty input_ids); drop empty documents before collating "
                    "(tokenize_for_condenser does)"
                )
            rows.append(self.mask_tokens(ids, self.generator_for(example)))
        return self._build_batch(rows)
