"""A resumed run ends where the uninterrupted run ends: no optimizer step past ``max_steps``.

``transformers.Trainer`` decides that a run is done only after an optimizer step
(``DefaultFlowCallback.on_step_end``: ``global_step >= max_steps``). A run resumed from a checkpoint
that already holds all ``max_steps`` steps (killed right after its last save) starts the epoch the
checkpoint lies in, skips the batches trained before and, unless ``max_steps`` ended that epoch,
trains the next batch: a step past ``max_steps``. A streamed corpus (no length: one "epoch" of
``max_steps`` steps) starts a new epoch and does the same. :class:`StopAtMaxStepsMixin` draws no
batch once the steps are spent, so the resumed run trains nothing and ends with the checkpoint's
weights and state, which are the uninterrupted run's.

What an epoch draws must not depend on where the run started either. A collator or sampler with
``set_epoch`` hears each epoch's number from :class:`SetEpochCallback`, also in the epoch a run resumes
in. ``--train_sampling_strategy group_by_length`` makes the Trainer's ``LengthGroupedSampler``, which
draws each epoch's order from the global RNG when the epoch's iterator starts: a run resumed in its
second epoch starts that iterator before the Trainer restores the checkpoint's RNG state, so it trains
on another order than the uninterrupted run. :class:`EpochSeededSamplingMixin` draws that order from
the data seed and the epoch instead (:class:`LengthGroupedEpochSampler`).
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

logger = logging.getLogger(__name__)


class SetEpochCallback(TrainerCallback):
    """Calls ``set_epoch(epoch)`` of the collator and the sampler as each epoch begins: the epoch the run is in,
    also the one a run resumes in (``state.epoch`` then holds the checkpoint's fraction of it). Either may be
    None; the sampler is given when the Trainer builds it, as training starts."""

    def __init__(self, collator=None, sampler=None):
        self.collator = collator
        self.sampler = sampler

    def on_epoch_begin(self, args, state, control, **kwargs):
        for target in (self.collator, self.sampler):
            if target is not None:
                target.set_epoch(int(state.epoch or 0))


class LengthGroupedEpochSampler(LengthGroupedSampler):
    """The Trainer's ``group_by_length`` order (transformers' ``get_length_grouped_indices``: a random
    permutation cut into megabatches of 50 batches, each sorted by length, the longest batch first), with
    each epoch's permutation drawn from ``seed + epoch`` rather than from the global RNG: the same in an
    uninterrupted run and in one resumed in that epoch, and on every process of a torchrun."""

    def __init__(self, batch_size: int, lengths: list[int], seed: int):
        super().__init__(batch_size, lengths=lengths)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


class EpochSeededSamplingMixin:
    """Trainer mixin: every epoch draws what the uninterrupted run draws in it. A collator with ``set_epoch``
    (fresh masks or document samples each epoch) is told each epoch by a :class:`SetEpochCallback`, and so is
    the sampler of ``--train_sampling_strategy group_by_length``, :class:`LengthGroupedEpochSampler` (seeded by
    ``data_seed``, else ``seed``). The other strategies are the Trainer's own: 'random' (accelerate's sampler
    seeded per epoch), 'sequential', and 'batch_rebalance' (seeded per epoch)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        collator = self.data_collator if hasattr(self.data_collator, "set_epoch") else None
        self.epoch_callback = SetEpochCallback(collator)
        self.add_callback(self.epoch_callback)

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if type(sampler) is LengthGroupedSampler:
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            sampler = LengthGroupedEpochSampler(sampler.batch_size, sampler.lengths, seed)
            self.epoch_callback.sampler = sampler
        return sampler


class StopAtMaxStepsMixin:
    """Trainer mixin: no batch is drawn, and so no step taken, once ``global_step`` has reached ``max_steps``
    (also the step count of an epoch-based run), whatever the epoch and batch the run resumed at."""

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        if 0 < self.state.max_steps <= self.state.global_step:
            if not self.control.should_training_stop:
                logger.warning("Step %d of max_steps %d reached: nothing left to train", self.state.global_step,
                               self.state.max_steps)
            self.control.should_training_stop = True  # the Trainer leaves the epoch and the run
            return [], None
        return super().get_batch_samples(epoch_iterator, num_batches, device)


__all__ = ["EpochSeededSamplingMixin", "LengthGroupedEpochSampler", "SetEpochCallback", "StopAtMaxStepsMixin"]
