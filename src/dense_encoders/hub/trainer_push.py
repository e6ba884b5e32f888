"""Pushes from ``transformers.Trainer`` go through :func:`~dense_encoders.hub.push.push_to_hub`.

Our trainers mix :class:`HubPushMixin` in, so ``--push_to_hub`` uploads our model card instead of
the generic Trainer card, one commit per push, no pickles, and keeps the training state local.
"""

from __future__ import annotations

from pathlib import Path

from .cards import model_card
from .push import push_to_hub


class HubPushMixin:
    """Trainer pushes through :func:`dense_encoders.hub.push_to_hub`: our model card instead of the
    generic Trainer card, one commit per push, no pickles, training state kept local."""

    def create_model_card(self, *args, **kwargs) -> None:
        if self.is_world_process_zero() and (Path(self.args.output_dir) / "config.json").is_file():
            card = model_card(self.args.output_dir, repo_id=self.hub_model_id)
            card.save(Path(self.args.output_dir) / "README.md")

    def push_to_hub(self, commit_message: str | None = "End of training", blocking: bool = True, token=None,
                    revision: str | None = None, **kwargs):
        if self.hub_model_id is None:
            self.init_hf_repo(token=token)
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        self._finish_current_push()
        return push_to_hub(
            self.args.output_dir, self.hub_model_id, commit_message=commit_message,
            token=token or self.args.hub_token, revision=revision or self.args.hub_revision,
            private=self.args.hub_private_repo,
        )

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        if not self.is_world_process_zero() or str(self.args.hub_strategy) in ("end", "HubStrategy.END"):
            return
        push_to_hub(
            checkpoint_folder, self.hub_model_id, commit_message=f"Training in progress, step {self.state.global_step}",
            token=self.args.hub_token, revision=self.args.hub_revision, private=self.args.hub_private_repo,
        )


__all__ = ["HubPushMixin"]
