"""What a training run records next to its checkpoint, so model cards can say it without guessing."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch


def training_environment(trainer) -> dict[str, str | int]:
    """Hardware and precision of a ``transformers.Trainer`` run."""
    args = trainer.args
    device = args.device
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine() or "cpu"
        name = f"{name} CPU, {torch.get_num_threads()} threads"
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    return {"device": name, "processes": args.world_size, "precision": precision, "torch": torch.__version__}


def write_training_environment(trainer, output_dir: str | Path) -> Path:
    path = Path(output_dir) / "training_environment.json"
    path.write_text(json.dumps(training_environment(trainer), indent=2) + "\n")
    return path


class HubPushMixin:
    """Trainer pushes through :func:`dense_encoders.hub.push_to_hub`: our model card instead of the
    generic Trainer card, one commit per push, no pickles, training state kept local."""

    def create_model_card(self, *args, **kwargs) -> None:
        from ..hub_cards import model_card

        if self.is_world_process_zero() and (Path(self.args.output_dir) / "config.json").is_file():
            card = model_card(self.args.output_dir, repo_id=self.hub_model_id)
            card.save(Path(self.args.output_dir) / "README.md")

    def push_to_hub(self, commit_message: str | None = "End of training", blocking: bool = True, token=None,
                    revision: str | None = None, **kwargs):
        from ..hub import push_to_hub

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
        from ..hub import push_to_hub

        if not self.is_world_process_zero() or str(self.args.hub_strategy) in ("end", "HubStrategy.END"):
            return
        push_to_hub(
            checkpoint_folder, self.hub_model_id, commit_message=f"Training in progress, step {self.state.global_step}",
            token=self.args.hub_token, revision=self.args.hub_revision, private=self.args.hub_private_repo,
        )


__all__ = ["HubPushMixin", "training_environment", "write_training_environment"]
