"""A resumed run ends where the uninterrupted run ends: no optimizer step past ``max_steps``.

``transformers.Trainer`` decides that a run is done only after an optimizer step
(``DefaultFlowCallback.on_step_end``: ``global_step >= max_steps``). A run resumed from a checkpoint
that already holds all ``max_steps`` steps (killed right after its last save) starts the epoch the
checkpoint lies in, skips the batches trained before and, unless ``max_steps`` ended that epoch,
trains the next batch: a step past ``max_steps``. A streamed corpus (no length: one "epoch" of
``max_steps`` steps) starts a new epoch and does the same. :class:`StopAtMaxStepsMixin` draws no
batch once the steps are spent, so the resumed run trains nothing and ends with the checkpoint's
weights and state, which are the uninterrupted run's.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


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


__all__ = ["StopAtMaxStepsMixin"]
