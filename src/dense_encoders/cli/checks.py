"""Checks the command line runs before any model loads, of what a value alone does not tell: model paths (a folder
here, or a Hub id), devices (present on this machine) and outputs (none of them an input, inside an input folder
or holding an input). The values themselves are checked by the settings dataclasses (:mod:`dense_encoders.settings`).
Each raises ``ValueError`` with one line naming the value, the flag and the fix; ``cli.main`` prints it (exit code 2)
unless ``--debug`` is given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from huggingface_hub import constants

DEVICE_CHOICES = "cpu, cuda, cuda:N, mps"
PathValues = str | Path | list | tuple | None  # a flag's path, or its paths
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


def check_outputs(outputs: dict[str, PathValues], inputs: dict[str, PathValues],
                  shards: dict[str, PathValues] | None = None) -> None:
    """Nothing a command writes (``outputs``: flag -> path) is, lies inside or holds what it reads (``inputs``:
    flag -> path, or a list of them; ``shards``: embedding shards or a FAISS index, whose folder may receive new
    files beside the ones read): :func:`~dense_encoders.data.files.refuse_outputs_over_inputs`, before anything
    is written."""
    from ..data.embedding_shards import shard_folder_files
    from ..data.files import refuse_outputs_over_inputs

    read = [(flag, path) for flag, paths in inputs.items() for path in _listed(paths)]
    read += [(flag, file) for flag, paths in (shards or {}).items() for path in _listed(paths)
             for file in shard_folder_files(path)]
    refuse_outputs_over_inputs([(flag, path) for flag, paths in outputs.items() for path in _listed(paths)], read)


def _listed(paths: PathValues) -> list:
    return [p for p in (paths if isinstance(paths, (list, tuple)) else [paths]) if p]


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


__all__ = ["DEVICE_CHOICES", "check_device", "check_model", "check_outputs"]
