"""Checking what comes down from the Hub: a checkpoint's remote code against the installed package."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from .. import __version__

logger = logging.getLogger(__name__)

# the marker every modeling_*.py of ours carries: the dense-encoders release that wrote it
CODE_VERSION = re.compile(r'^DENSE_ENCODERS_CODE_VERSION\s*=\s*"([^"]+)"', re.MULTILINE)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check_remote_code(path_or_repo: str | Path, revision: str | None = None, token: str | None = None) -> list[str]:
    """Check a checkpoint's remote-code files against the installed package before loading it.

    Raises a ValueError when a file named by ``auto_map`` is missing; returns warnings (also logged)
    when the files were written by an older dense-encoders than the one installed.
    """
    def fetch(name: str) -> Path | None:
        if Path(path_or_repo).is_dir():
            path = Path(path_or_repo) / name
            return path if path.is_file() else None
        try:
            return Path(hf_hub_download(str(path_or_repo), name, revision=revision, token=token))
        except EntryNotFoundError:
            return None

    config_path = fetch("config.json")
    if config_path is None:
        raise ValueError(f"{path_or_repo} has no config.json")
    warnings = []
    auto_map = json.loads(config_path.read_text()).get("auto_map") or {}
    modules = {}  # one check per file, however many auto classes it serves
    for target in sorted(set(auto_map.values())):
        modules.setdefault(str(target).split("--")[-1].rsplit(".", 1)[0] + ".py", target)
    for module, target in modules.items():
        path = fetch(module)
        if path is None:
            raise ValueError(
                f"{path_or_repo} names {target!r} in auto_map but has no {module}: its remote code is incomplete. "
                "Load it with the installed package instead (import dense_encoders, then AutoModel.from_pretrained "
                "without trust_remote_code), or re-upload it with `dense-encoders push`."
            )
        if not module.startswith("modeling_"):
            continue  # configuration files carry no version marker
        found = CODE_VERSION.search(path.read_text())
        written_by = found.group(1) if found else "0.0.0"
        if _version_tuple(written_by) < _version_tuple(__version__):
            warnings.append(
                f"{module} in {path_or_repo} was written by dense-encoders {written_by if found else '(unknown)'}, "
                f"older than the installed {__version__}: trust_remote_code=True runs the checkpoint's older code. "
                "To use the installed code, import dense_encoders and load without trust_remote_code; to update the "
                "checkpoint, load and save_pretrained it again."
            )
    for message in warnings:
        logger.warning(message)
    return warnings


__all__ = ["check_remote_code"]
