"""What ``dense-encoders push`` (:func:`dense_encoders.hub.push_to_hub`) takes besides the folder (its positional
argument): :class:`PushSettings`. ``--private`` / ``--public`` (one field, two exclusive flags) and the repeatable
``--include`` are declared by the command line itself: ``HfArgumentParser`` declares one flag per field, taking one
or several values at once."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(kw_only=True)
class PushSettings:
    """Where a checkpoint folder goes on the Hub, how it is committed, and what its card says."""

    repo_id: str = field(metadata={"help": "user/name or org/name."})
    revision: str | None = field(default=None, metadata={
        "help": "Branch to commit to (created from main when missing)."})
    create_pr: bool = field(default=False, metadata={"help": "Open a pull request instead of committing."})
    commit_message: str | None = field(default=None, metadata={
        "help": "Message of the commit (default: 'Upload FOLDER with dense-encoders')."})
    results: list[str] | None = field(default=None, metadata={
        "help": "Results JSONs of `dense-encoders evaluate` of this folder, for the card; a file whose "
        "model_fingerprint is another model's is refused."})
    license: str | None = field(default=None, metadata={"help": "License id for the card metadata, e.g. apache-2.0."})
    no_card: bool = field(default=False, metadata={"help": "Upload the folder's own README.md instead."})
    skip_nested_models: bool = field(default=False, metadata={
        "help": "Leave the folders of other models inside FOLDER local (e.g. infuse's random/ and initial/: push each "
        "to its own repository); without it such a folder is refused."})
    token: str | None = field(default=None, metadata={"help": "Hub token (default: HF_TOKEN or the stored login)."})
    endpoint: str | None = field(default=None, metadata={
        "help": "Hub URL (default: HF_ENDPOINT or https://huggingface.co)."})


__all__ = ["PushSettings"]
