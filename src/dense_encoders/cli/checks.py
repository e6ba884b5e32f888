"""Checks the command line runs before any model loads: model paths, devices, positive numbers.

Each raises ``ValueError`` with one line naming the value, the flag and the fix; ``cli.main`` prints it
(exit code 2) unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from huggingface_hub import constants

DEVICE_CHOICES = "cpu, cuda, cuda:N, mps"
# what huggingface_hub accepts as a repository id: `name` or `namespace/name`
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


def _offline() -> bool:
    if constants.HF_HUB_OFFLINE:
        return True
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")


def _in_hub_cache(repo_id: str) -> bool:
    cache = Path(constants.HF_HUB_CACHE)
    names = [repo_id] + ([f"sentence-transformers/{repo_id}", f"cross-encoder/{repo_id}"] if "/" not in repo_id else [])
    return any((cache / ("models--" + name.replace("/", "--"))).is_dir() for name in names)


def check_model(value: str | None, flag: str = "model") -> None:
    """A local model folder with ``config.json`` (or a sentence-transformers ``modules.json``) and its tokenizer,
    or a string that can be a Hub id (passed on to the Hub logic; offline, it must be in the Hub cache)."""
    if value is None:
        return
    from ..checkpoints import find_format  # slow to import (torch): only when a command runs
    from ..checkpoints.folder import refuse_folder_without_tokenizer

    path = Path(value).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise ValueError(f"{value} has no config.json: it is not a saved model (save it with save_pretrained)")
        foreign = find_format(path)
        if foreign is not None and not foreign.loads_as_is:
            raise ValueError(f"{flag} {value} is a folder of {foreign.description}, in another layout than ours: "
                             f"convert it once with `dense-encoders convert {value} OUT` and pass OUT")
        refuse_folder_without_tokenizer(value, flag)
        return
    if path.exists():
        raise ValueError(f"{flag} {value}: a file, not a model folder; pass a local checkpoint folder or a "
                         "Hub id like org/name")
    hint = "pass a local checkpoint folder or a Hub id like org/name"
    if not _HUB_ID.match(value) or value.endswith((".", "-")) or ".." in value:
        raise ValueError(f"{flag} {value}: no such folder; {hint}")
    if _offline() and not _in_hub_cache(value):
        raise ValueError(f"{flag} {value}: no such folder, and no Hub model of that id in the cache (offline "
                         f"mode, HF_HUB_OFFLINE); {hint}")


def check_device(value: str | None, flag: str = "--device") -> None:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and present on this machine."""
    if value is None:
        return
    import torch  # slow to import: only when a command runs

    try:
        device = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{flag} {value}: not a device; choose one of {DEVICE_CHOICES}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{flag} {value}: CUDA is not available on this machine (torch "
                             f"{torch.__version__}, {torch.cuda.device_count()} GPUs); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{flag} {value}: there are {torch.cuda.device_count()} GPUs (cuda:0 to "
                             f"cuda:{torch.cuda.device_count() - 1})")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"{flag} {value}: MPS is not available on this machine; use --device cpu")


def _checked(text: str, read, problem, kind: str):
    """argparse ``type``: ``text`` read by ``read`` and checked by a settings ``problem`` function
    (:mod:`dense_encoders.settings.values`, which the settings dataclasses check with)."""
    try:
        value = read(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
    found = problem(value)
    if found is not None:
        raise argparse.ArgumentTypeError(found)
    return value


def positive_int(text: str) -> int:
    """argparse ``type``: an integer >= 1."""
    from ..settings.values import positive_integer_problem

    return _checked(text, int, positive_integer_problem, "an integer")


def pair_threshold(text: str) -> float:
    """argparse ``type`` of ``--pair-threshold``: a fraction of the score scale in (0, 1]."""
    from ..settings.values import pair_threshold_problem

    return _checked(text, float, pair_threshold_problem, "a number")


def pair_scale(text: str) -> float:
    """argparse ``type`` of ``--pair-scale``: the largest possible score (1, 5 for STSB), a positive number."""
    from ..settings.datasets import whole_scale
    from ..settings.values import pair_scale_problem

    return whole_scale(_checked(text, float, pair_scale_problem, "a number"))


def add_trust_remote_code_flag(parser: argparse.ArgumentParser) -> None:
    """``--trust-remote-code``: consent to run code a model folder or Hub repository carries or names, on every
    command that loads a model (the commands built on dataclasses declare the field with
    :func:`~dense_encoders.settings.models.trust_remote_code_field`, the same flag and help)."""
    from ..settings.models import TRUST_REMOTE_CODE_HELP

    parser.add_argument("--trust-remote-code", action="store_true", help=TRUST_REMOTE_CODE_HELP)


def add_dataset_revision_flag(parser: argparse.ArgumentParser) -> None:
    """``--dataset-revision``: the revision of a dataset named by Hub id, on every command that takes a dataset (the
    commands built on dataclasses declare the field with
    :func:`~dense_encoders.settings.datasets.dataset_revision_field`, the same flag and help)."""
    from ..settings.datasets import DATASET_REVISION_FLAG, DATASET_REVISION_HELP

    parser.add_argument(DATASET_REVISION_FLAG, dest="dataset_revision", metavar="REV", help=DATASET_REVISION_HELP)


def add_graded_pair_flags(parser: argparse.ArgumentParser) -> None:
    """``--pair-threshold`` and ``--pair-scale``: how a graded pairs file (sentence1, sentence2, score) becomes a
    retrieval task. Both default to None (threshold 0.5, scale inferred) so that other data can refuse them (the
    commands built on dataclasses declare the fields with :func:`~dense_encoders.settings.datasets.pair_threshold_field`
    and :func:`~dense_encoders.settings.datasets.pair_scale_field`)."""
    from ..settings.datasets import PAIR_SCALE_HELP, PAIR_THRESHOLD_HELP

    parser.add_argument("--pair-threshold", type=pair_threshold, metavar="FRACTION", help=PAIR_THRESHOLD_HELP)
    parser.add_argument("--pair-scale", type=pair_scale, metavar="MAX", help=PAIR_SCALE_HELP)


__all__ = ["DEVICE_CHOICES", "add_dataset_revision_flag", "add_graded_pair_flags", "add_trust_remote_code_flag",
           "check_device", "check_model", "pair_scale", "pair_threshold", "positive_int"]
