"""Publishing checkpoints on the Hugging Face Hub.

:func:`push_to_hub` uploads a checkpoint folder (or a model) in ONE commit: the files a model is made of
(:func:`dense_encoders.checkpoints.folder.model_file_kind`: safetensors weights, ``config.json`` with
``auto_map``, the remote-code files, tokenizer, sentence-transformers files and module folders) and a model
card generated from the folder's records (:func:`dense_encoders.hub.cards.model_card`); results JSONs for the
card whose ``model_fingerprint`` is not the folder's are refused (:func:`check_results`). Any other file is
refused by name unless ``include`` names it; the run's records the card summarises (``RECORD_FILES``),
training state (optimizer, scheduler, RNG states, pickled training arguments) and the folders of a run
(``checkpoint-N``, ``runs``, ``evaluation``, hidden ones) stay local. A symbolic link is followed only when it
resolves inside the folder, or when the folder is a snapshot of the Hugging Face cache and the link leads to
that repository's blob; any other link is refused by name. The upload is staged in a temporary folder (hard
links to, or copies of, the files' contents): the local folder is never modified, whatever happens. Pickled
weights are refused. Incomplete or mixed folders are refused
(:func:`dense_encoders.checkpoints.folder.publishing_problems`), and so is a folder that holds other models
(a subfolder with its own ``config.json`` and weights, such as ``infuse``'s ``random/`` and ``initial/``):
one model per repository, unless ``skip_nested_models`` leaves them local. One of our models' folders
without sentence-transformers files gets its native ones in the upload. Errors name the repository, say
that nothing local changed and repeat the whole command (never the token). A push whose files the revision
already holds makes no commit and opens no pull request: its :class:`PushResult` says ``changed=False``.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, constants

from ..checkpoints.folder import (
    WEIGHT_PATTERNS,
    missing_sentence_transformers_files,
    model_file_kind,
    publishing_problems,
    sentence_transformers_module_folders,
)
from ..data.run_records import RECORD_FILES, evaluation_results
from .cards import model_card

logger = logging.getLogger(__name__)

# files of a checkpoint that are training state, not the model: never uploaded
TRAINING_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|rng_state.*\.pth|training_args\.bin|scaler\.pt)$")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
SKIPPED_DIRECTORIES = re.compile(r"^(checkpoint-\d+|runs|\..*|__pycache__|evaluation)$")
# the repository's own file: the Hub writes one when it creates the repository
REPOSITORY_FILES = (".gitattributes",)
NAMED_IN_MESSAGES = 5  # a refusal names this many files, then counts the rest


class PushError(RuntimeError):
    """An upload failed; the message says why and how to retry (never the token)."""


@dataclass
class PushResult(CommitInfo):
    """huggingface_hub's :class:`~huggingface_hub.CommitInfo` of a push, and ``changed``: False when the revision
    already held exactly these files, so that no commit was made and no pull request opened (``commit_url`` and
    ``oid`` are then those of the revision's head, as huggingface_hub returns them)."""

    changed: bool = True

    @classmethod
    def of(cls, commit: CommitInfo, changed: bool) -> "PushResult":
        return cls(**{item.name: getattr(commit, item.name) for item in fields(commit) if item.init}, changed=changed)

    def __reduce__(self):
        constructor, arguments = super().__reduce__()
        return _push_result, (arguments, self.changed)


def _push_result(arguments: tuple, changed: bool) -> PushResult:
    return PushResult(*arguments, changed=changed)


def _scrub(text: str, token: str | None) -> str:
    text = re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)
    return text.replace(token, "***") if token else text


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_IN_MESSAGES])
    return shown + (f" and {len(names) - NAMED_IN_MESSAGES} more" if len(names) > NAMED_IN_MESSAGES else "")


def _cache_blobs_folder(folder: Path) -> Path | None:
    """The ``blobs`` folder of the Hugging Face cache repository whose snapshot (``models--org--name/
    snapshots/<revision>/``) holds ``folder`` (resolved), None when ``folder`` is not in a snapshot."""
    for path in (folder, *folder.parents):
        if (path.parent.name == "snapshots"
                and path.parent.parent.name.startswith(f"models{constants.REPO_ID_SEPARATOR}")):
            return path.parent.parent / "blobs"
    return None


def _folder_files(folder: Path) -> tuple[dict[PurePosixPath, Path], list[str]]:
    """``({path in the folder: the file holding its content}, refused links)`` of every file below ``folder``
    outside the skipped folders. Links are followed when they resolve inside the folder, or to the blob of
    the cache repository whose snapshot the folder is; any other link (also one that leads nowhere) is refused."""
    root = folder.resolve()
    blobs = _cache_blobs_folder(root)
    files, refused, visited = {}, [], set()

    def visit(directory: Path, relative: PurePosixPath) -> None:
        if directory.resolve() in visited:  # a link back up the tree
            return
        visited.add(directory.resolve())
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path, inside = Path(entry.path), relative / entry.name
            if entry.is_dir() and SKIPPED_DIRECTORIES.match(entry.name):
                continue
            if entry.is_symlink():
                target = path.resolve()
                if not target.exists():
                    refused.append(f"{inside} -> {os.readlink(path)} (missing)")
                    continue
                if not (target.is_relative_to(root) or (blobs is not None and target.parent == blobs)):
                    refused.append(f"{inside} -> {target}")
                    continue
                if target.is_dir():
                    visit(path, inside)
                elif target.is_file():
                    files[inside] = target
            elif entry.is_dir():
                visit(path, inside)
            elif entry.is_file():
                files[inside] = path

    visit(folder, PurePosixPath())
    return files, refused


def nested_model_folders(files, module_folders=()) -> list[PurePosixPath]:
    """The folders below the root (paths inside the folder) that hold a model of their own: ``config.json`` and
    weights (safetensors or a pickle) side by side, outside the sentence-transformers module folders
    ``module_folders`` (a ``2_Dense/`` has both and is part of the model); the outermost ones only. ``files``: the
    paths of the folder's files (:class:`~pathlib.PurePosixPath`, relative to it)."""
    files = [PurePosixPath(path) for path in files]
    configured = {path.parent for path in files if path.name == "config.json" and path.parent.parts}
    weighted = {path.parent for path in files
                if any(fnmatch.fnmatchcase(path.name, pattern) for pattern in WEIGHT_PATTERNS)
                or path.suffix in PICKLE_SUFFIXES}
    models = {folder for folder in configured & weighted
              if not any(folder.is_relative_to(module) for module in module_folders)}
    return sorted(folder for folder in models if not any(parent in models for parent in folder.parents))


def upload_files(folder: str | Path, include=(), *, skip_nested_models: bool = False) -> list[Path]:
    """The files of ``folder`` that make up the model, relative to it; ValueErrors for what cannot go up.

    Uploaded: what :func:`~dense_encoders.checkpoints.folder.model_file_kind` calls part of a model, and the
    other files a glob of ``include`` names (matched against the path inside the folder). Kept local: training
    state, pickles (refused when they are not training state; OpenVINO's ``openvino/openvino_model.bin`` is raw
    weights, no pickle), the run's records (``RECORD_FILES``: the card
    says what they record), ``.gitattributes`` and the skipped folders. Refused: links that lead outside the
    folder, and every other file. A folder holding other models (:func:`nested_model_folders`) is refused, one
    model going to one repository, unless ``skip_nested_models``, which leaves their folders local."""
    return list(_upload_sources(Path(folder), include, skip_nested_models))


def _upload_sources(folder: Path, include=(), skip_nested_models: bool = False) -> dict[Path, Path]:
    """``{path in the folder: the file holding its content}`` of the files to upload (:func:`upload_files`)."""
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} has no config.json: save the model with save_pretrained(folder) first")
    found, refused_links = _folder_files(folder)
    module_folders = sentence_transformers_module_folders(folder)
    nested = nested_model_folders(found, module_folders)
    if nested and not skip_nested_models:
        names = [f"{path}/" for path in nested]
        raise ValueError(
            f"{folder} holds other models: {_listed(names)} (each with its own config.json and weights); a "
            f"repository holds one model, nothing was uploaded. Push each of them to its own repository "
            f"(dense-encoders push {folder / nested[0]} --repo-id ...), and this folder's model without them "
            "with --skip-nested-models (skip_nested_models=True)."
        )
    if nested:
        logger.info("not uploading %s: models of their own (push each to its own repository)",
                    ", ".join(f"{path}/" for path in nested))
        found = {relative: source for relative, source in found.items()
                 if not any(relative.is_relative_to(model) for model in nested)}
    include = list(include or ())
    unused = set(include)
    files, pickled, others = {}, [], []
    for relative, source in found.items():
        name = relative.as_posix()
        if TRAINING_STATE.match(relative.name) or name in REPOSITORY_FILES:
            logger.info("not uploading %s (training state or the repository's own file)", name)
            continue
        kind = model_file_kind(folder, relative, module_folders=module_folders)
        if relative.suffix in PICKLE_SUFFIXES and kind != "backend export":  # OpenVINO's .bin: raw weights
            pickled.append(name)
            continue
        included = [pattern for pattern in include if fnmatch.fnmatchcase(name, pattern)]
        unused.difference_update(included)
        if kind is None and not included:
            if name in RECORD_FILES:
                logger.info("not uploading %s (a record of the run: the model card says what it records)", name)
            else:
                others.append(name)
            continue
        files[Path(relative)] = source
    if refused_links:
        raise ValueError(
            f"{folder} holds links that lead outside it, which are not followed: {_listed(refused_links)} "
            f"({len(refused_links)} in all). Copy what belongs to the model into the folder, or remove the links."
        )
    if pickled:
        raise ValueError(
            f"{folder} holds pickled files {pickled}: they are not uploaded (loading a pickle runs arbitrary code). "
            "Save the weights as safetensors (model.save_pretrained(folder)) and remove the pickles."
        )
    if unused:
        raise ValueError(f"--include {' '.join(sorted(unused))}: matches no file of {folder} that could be "
                         "uploaded (training state, pickles, the skipped folders and other models' folders never "
                         "are)")
    if others:
        raise ValueError(
            f"{folder} holds files that are not part of a model (weights, configs, tokenizer, remote code, "
            f"sentence-transformers modules, card): {_listed(others)} ({len(others)} in all); nothing was uploaded. "
            "Move them out of the folder, or name the ones that belong to the model with --include PATTERN."
        )
    if not any(f.suffix == ".safetensors" for f in files):
        raise ValueError(f"{folder} has no .safetensors weights: save the model with save_pretrained(folder)")
    problems = publishing_problems(folder)
    if problems:
        raise ValueError("\n".join(problems))
    return files


def _stage(folder: Path, files: dict[Path, Path], card_text: str | None) -> Path:
    """A scratch copy of ``files`` (``{path in the upload: the file holding its content}``; hard links to that
    file where possible, so a link's target, never the link), plus the card and the sentence-transformers files
    one of our models' folder lacks; new files only, so the local folder is never written through a link."""
    staging = Path(tempfile.mkdtemp(prefix="dense-encoders-push-"))
    for relative, text in missing_sentence_transformers_files(folder).items():
        logger.info("adding %s (the model's native sentence-transformers pipeline) to the upload", relative)
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for relative, source in files.items():
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target, follow_symlinks=False)  # no copy of large weights where the filesystem allows
        except OSError:
            shutil.copyfile(source, target)
    if card_text is not None:
        (staging / "README.md").write_text(card_text, encoding="utf-8")
    return staging


def check_results(folder: str | Path, results: list | None = None) -> None:
    """Refuse results the card of ``folder`` would report (``results`` and the folder's ``evaluation/*.json``,
    :func:`~dense_encoders.data.run_records.evaluation_results`) whose ``model_fingerprint`` is not the folder's: the
    :func:`~dense_encoders.checkpoints.loading.folder_fingerprint` of the model as evaluation loaded it (with the
    ``pooling`` the results record). The ValueError names both fingerprints."""
    loaded = evaluation_results(folder, results)
    if not loaded:
        return
    from ..checkpoints.loading import folder_fingerprint  # loads sentence-transformers: only when needed

    ours: dict[str | None, str] = {}
    for source, data in loaded:
        pooling = (data.get("settings") or {}).get("pooling")
        if pooling not in ours:
            ours[pooling] = folder_fingerprint(folder, pooling=pooling)
        theirs = data.get("model_fingerprint")
        if theirs != ours[pooling]:
            raise ValueError(
                f"{source} holds results of another model: its model_fingerprint is {theirs}, the fingerprint of "
                f"{folder} is {ours[pooling]}; nothing was uploaded. Evaluate this folder "
                f"(dense-encoders evaluate {folder} DATA --output FILE) and pass that file to --results.")


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
    include=(),
    skip_nested_models: bool = False,
) -> PushResult:
    """Upload a checkpoint folder (or a model, saved first with its ``tokenizer``) to ``repo_id`` in
    one commit, with a generated model card. Returns a :class:`PushResult` (huggingface_hub's ``CommitInfo``
    and ``changed``: False when the revision already held these files, so that no commit was made and no pull
    request opened).

    ``revision`` is a branch (created from ``main`` when missing); ``create_pr`` opens a pull request
    instead of committing to it; ``results`` are evaluation-harness results JSONs for the card, refused when they
    are another model's (:func:`check_results`); ``include``:
    globs of further files of the folder to upload (:func:`upload_files` says what goes up without them);
    ``skip_nested_models`` leaves the folders of other models inside ``folder`` local (refused otherwise).
    """
    with tempfile.TemporaryDirectory(prefix="dense-encoders-save-") as scratch:
        if isinstance(path_or_model, (str, os.PathLike)):
            folder = Path(path_or_model)
        else:
            folder = Path(scratch) / "model"
            path_or_model.save_pretrained(folder)
            if tokenizer is not None:
                tokenizer.save_pretrained(folder)
        files = _upload_sources(folder, include, skip_nested_models)
        if card:
            check_results(folder, results)
        card_text = str(model_card(folder, repo_id=repo_id, results=results, license=license)) if card else None
        files = {path: source for path, source in files.items() if not (card and path.as_posix() == "README.md")}
        staging = _stage(folder, files, card_text)
        if isinstance(path_or_model, (str, os.PathLike)):
            retry = "retry with: " + push_command(
                folder, repo_id, private=private, revision=revision, create_pr=create_pr,
                commit_message=commit_message, results=results, license=license, card=card, endpoint=endpoint,
                include=include, skip_nested_models=skip_nested_models)
        else:
            retry = "call push_to_hub again with the same arguments"
        try:
            api = HfApi(endpoint=endpoint, token=token)
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision and revision != "main" and not create_pr:
                api.create_branch(repo_id, branch=revision, exist_ok=True)
            # the head the commit builds on: huggingface_hub returns it unchanged when every file is already there
            head = api.repo_info(repo_id, revision=revision or constants.DEFAULT_REVISION).sha
            operations = [
                CommitOperationAdd(path_in_repo=path.relative_to(staging).as_posix(), path_or_fileobj=str(path))
                for path in sorted(staging.rglob("*")) if path.is_file()
            ]
            commit = api.create_commit(
                repo_id, operations=operations, revision=revision, create_pr=create_pr,
                commit_message=commit_message or f"Upload {Path(folder).name} with dense-encoders",
            )
            return PushResult.of(commit, changed=commit.pr_url is not None or commit.oid != head)
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


def push_command(folder, repo_id: str, *, private: bool | None = None, revision: str | None = None,
                 create_pr: bool = False, commit_message: str | None = None, results: list | None = None,
                 license: str | None = None, card: bool = True, endpoint: str | None = None, include=(),
                 skip_nested_models: bool = False) -> str:
    """The ``dense-encoders push`` command of these settings, every flag spelt out but the token (which
    comes from HF_TOKEN or the stored login). Results that are not files are left out."""
    argv = ["dense-encoders", "push", str(folder), "--repo-id", repo_id]
    if private is not None:
        argv.append("--private" if private else "--public")
    argv += ["--revision", revision] if revision else []
    argv += ["--create-pr"] if create_pr else []
    argv += ["--commit-message", commit_message] if commit_message else []
    files = [str(result) for result in results or () if isinstance(result, (str, os.PathLike))]
    argv += ["--results", *files] if files else []
    argv += ["--license", license] if license else []
    argv += [] if card else ["--no-card"]
    argv += [part for pattern in include or () for part in ("--include", pattern)]
    argv += ["--skip-nested-models"] if skip_nested_models else []
    argv += ["--endpoint", endpoint] if endpoint else []
    return shlex.join(argv)


__all__ = ["PushError", "PushResult", "check_results", "nested_model_folders", "push_command", "push_to_hub",
           "upload_files"]
