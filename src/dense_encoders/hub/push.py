"""Publishing checkpoints on the Hugging Face Hub.

:func:`push_to_hub` uploads a checkpoint folder (or a model) in ONE commit: safetensors weights,
``config.json`` with ``auto_map``, the remote-code files, tokenizer, sentence-transformers files and
a model card generated from the folder's records (:func:`dense_encoders.hub.cards.model_card`).
The upload is staged in a temporary folder: the local folder is never modified, whatever happens.
Pickled weights are refused; training state (optimizer, scheduler, RNG states, pickled training
arguments) is never uploaded. Incomplete or mixed folders are refused
(:func:`dense_encoders.checkpoints.folder.publishing_problems`); one of our models' folders without
sentence-transformers files gets its native ones in the upload. Errors name the repository, say that
nothing local changed and how to retry, and never contain the token.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, constants

from ..checkpoints.folder import missing_sentence_transformers_files, publishing_problems
from .cards import model_card

logger = logging.getLogger(__name__)

# files of a checkpoint that are training state, not the model: never uploaded
TRAINING_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|rng_state.*\.pth|training_args\.bin|scaler\.pt)$")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
SKIPPED_DIRECTORIES = re.compile(r"^(checkpoint-\d+|runs|\..*|__pycache__|evaluation)$")


class PushError(RuntimeError):
    """An upload failed; the message says why and how to retry (never the token)."""


def _scrub(text: str, token: str | None) -> str:
    text = re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)
    return text.replace(token, "***") if token else text


def upload_files(folder: str | Path) -> list[Path]:
    """The files of ``folder`` that make up the model, relative to it; ValueErrors for what cannot go up."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} has no config.json: save the model with save_pretrained(folder) first")
    files, pickled = [], []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or any(SKIPPED_DIRECTORIES.match(part) for part in relative.parts[:-1]):
            continue
        if TRAINING_STATE.match(path.name):
            logger.info("not uploading training state %s", relative)
            continue
        if path.suffix in PICKLE_SUFFIXES:
            pickled.append(str(relative))
            continue
        files.append(relative)
    if pickled:
        raise ValueError(
            f"{folder} holds pickled files {pickled}: they are not uploaded (loading a pickle runs arbitrary code). "
            "Save the weights as safetensors (model.save_pretrained(folder)) and remove the pickles."
        )
    if not any(f.suffix == ".safetensors" for f in files):
        raise ValueError(f"{folder} has no .safetensors weights: save the model with save_pretrained(folder)")
    problems = publishing_problems(folder)
    if problems:
        raise ValueError("\n".join(problems))
    return files


def _stage(folder: Path, files: list[Path], card_text: str | None) -> Path:
    """A scratch copy (hard links where possible) of ``files``, plus the card and the sentence-transformers
    files one of our models' folder lacks; new files only, so the local folder is never written through a link."""
    staging = Path(tempfile.mkdtemp(prefix="dense-encoders-push-"))
    for relative, text in missing_sentence_transformers_files(folder).items():
        logger.info("adding %s (the model's native sentence-transformers pipeline) to the upload", relative)
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for relative in files:
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(folder / relative, target)  # no copy of large weights where the filesystem allows
        except OSError:
            shutil.copy2(folder / relative, target)
    if card_text is not None:
        (staging / "README.md").write_text(card_text, encoding="utf-8")
    return staging


def push_to_hub(
    path_or_model,
    repo_id: str,
    *,
    tokenizer=None,
    private: bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    results: list | None = None,
    license: str | None = None,
    card: bool = True,
    endpoint: str | None = None,
):
    """Upload a checkpoint folder (or a model, saved first with its ``tokenizer``) to ``repo_id`` in
    one commit, with a generated model card. Returns huggingface_hub's ``CommitInfo``.

    ``revision`` is a branch (created from ``main`` when missing); ``create_pr`` opens a pull request
    instead of committing to it; ``results`` are evaluation-harness results JSONs for the card.
    """
    with tempfile.TemporaryDirectory(prefix="dense-encoders-save-") as scratch:
        if isinstance(path_or_model, (str, os.PathLike)):
            folder = Path(path_or_model)
        else:
            folder = Path(scratch) / "model"
            path_or_model.save_pretrained(folder)
            if tokenizer is not None:
                tokenizer.save_pretrained(folder)
        files = upload_files(folder)
        card_text = str(model_card(folder, repo_id=repo_id, results=results, license=license)) if card else None
        files = [f for f in files if not (card and f.as_posix() == "README.md")]
        staging = _stage(folder, files, card_text)
        retry = f"retry with: dense-encoders push {folder} --repo-id {repo_id}" + (f" --revision {revision}"
                                                                                    if revision else "")
        try:
            api = HfApi(endpoint=endpoint, token=token)
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision and revision != "main" and not create_pr:
                api.create_branch(repo_id, branch=revision, exist_ok=True)
            operations = [
                CommitOperationAdd(path_in_repo=path.relative_to(staging).as_posix(), path_or_fileobj=str(path))
                for path in sorted(staging.rglob("*")) if path.is_file()
            ]
            return api.create_commit(
                repo_id, operations=operations, revision=revision, create_pr=create_pr,
                commit_message=commit_message or f"Upload {Path(folder).name} with dense-encoders",
            )
        except Exception as error:  # network, auth, conflicts: one message, nothing local touched
            status = getattr(getattr(error, "response", None), "status_code", None)
            hint = {401: "the token is missing or invalid (set HF_TOKEN or run `hf auth login`)",
                    403: "the token may not write to this repository",
                    409: "the repository or branch changed concurrently; pull the new state and push again",
                    }.get(status, "")
            url = f"{(endpoint or constants.ENDPOINT).rstrip('/')}/{repo_id}"
            message = (f"push of {folder} to {url} failed: {type(error).__name__}: {error}"
                       + (f" ({hint})" if hint else "") + f". Nothing local was changed; {retry}")
            raise PushError(_scrub(message, token or os.environ.get("HF_TOKEN"))) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)


__all__ = ["PushError", "push_to_hub", "upload_files"]
