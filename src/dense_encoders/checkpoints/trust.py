"""Consent to run a checkpoint's own code: what code loading a folder or Hub id would run, refused unless trusted.

A checkpoint can name code that ``trust_remote_code=True`` runs while it loads: ``auto_map`` in its
``config.json`` (a ``modeling_*.py`` next to the weights, or in another Hub repository), an ``AutoTokenizer``
in ``tokenizer_config.json``, sentence-transformers module classes outside ``sentence_transformers`` in
``modules.json``, and activation functions outside ``torch`` (a ``Dense`` module's, a ``CrossEncoder``'s).
Without consent transformers either refuses in several lines or, for an architecture it knows itself, loads
that architecture without a word, while the folder's author meant other code to run; both are refused here
in one line naming the file and the flag (:func:`refuse_untrusted_code`), before anything is loaded.

Our own families (Condenser, TITE, the infused dual encoder) need no consent: importing ``dense_encoders``
registers their Auto classes, and transformers then uses the installed classes whatever code the folder
carries (a folder's ``modeling_condenser.py`` never runs). :data:`~.folder.OUR_AUTO_CLASSES` says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .folder import OUR_AUTO_CLASSES, sentence_transformers_settings
from .weights import loading_file

TRUST_FIX = "pass --trust-remote-code (trust_remote_code=True) to run it"
SENTENCE_TRANSFORMERS_PREFIX = "sentence_transformers."


class UntrustedCodeError(ValueError):
    """Loading a checkpoint would run code it carries (or names), and the caller did not consent."""


@dataclass(frozen=True)
class CheckpointCode:
    """One piece of code loading a checkpoint would run: ``source`` (the file that names it, e.g.
    ``FOLDER/config.json``) maps ``role`` (``AutoModel``, ``the module class``, ...) to ``reference`` (a
    dotted class or function), whose code is in ``location``."""

    source: str
    role: str
    reference: str
    location: str

    def describe(self) -> str:
        return f"{self.source} maps {self.role} to {self.reference} ({self.location})"


def _read_json(name_or_path: str, subfolder: str, filename: str):
    """A JSON file of the checkpoint, ``None`` when it has none (or an unreadable one: its reader says so)."""
    path = loading_file(name_or_path, subfolder, filename)
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _shown(name_or_path: str, subfolder: str, filename: str) -> str:
    """``FOLDER/sub/config.json`` for a folder, ``org/name: sub/config.json`` for a Hub id."""
    relative = f"{subfolder}/{filename}" if subfolder else filename
    return str(Path(name_or_path) / relative) if Path(name_or_path).is_dir() else f"{name_or_path}: {relative}"


def _code_location(name_or_path: str, subfolder: str, reference: str) -> str:
    """Where the code of an ``auto_map`` / module class reference lives: ``module.py`` in the folder or Hub
    repository (``repo--module.Class`` names another repository), else a module the checkpoint does not hold."""
    repository, _, dotted = reference.rpartition("--")
    module = dotted.rpartition(".")[0]
    if repository:
        return f"code in {module}.py of the Hub repository {repository}"
    if loading_file(name_or_path, subfolder, f"{module}.py") is not None:
        return f"code in {_shown(name_or_path, subfolder, module + '.py')}"
    return f"code of the module {module}, not in the checkpoint"


def _auto_map_code(name_or_path: str, subfolder: str, filename: str, model_type: str | None) -> list[CheckpointCode]:
    settings = _read_json(name_or_path, subfolder, filename)
    if not isinstance(settings, dict):
        return []
    auto_map = settings.get("auto_map") or {}
    if not isinstance(auto_map, dict):
        return []
    served = OUR_AUTO_CLASSES.get(model_type or settings.get("model_type"), ())
    found = []
    for auto_class, targets in sorted(auto_map.items()):
        if auto_class in served:
            continue  # the installed package's class is used, whatever the folder names
        for target in targets if isinstance(targets, (list, tuple)) else [targets]:
            if isinstance(target, str) and target:
                found.append(CheckpointCode(_shown(name_or_path, subfolder, filename), auto_class, target,
                                            _code_location(name_or_path, subfolder, target)))
    return found


def _activation(source: str, role: str, reference) -> list[CheckpointCode]:
    if isinstance(reference, str) and reference and not reference.startswith("torch."):
        return [CheckpointCode(source, role, reference, "code outside torch")]
    return []


def _transformer_code(name_or_path: str, subfolder: str) -> list[CheckpointCode]:
    """The code of a transformers folder (or a sentence-transformers Transformer module's folder)."""
    config = _read_json(name_or_path, subfolder, "config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    found = _auto_map_code(name_or_path, subfolder, "config.json", model_type)
    found += _auto_map_code(name_or_path, subfolder, "tokenizer_config.json", model_type)
    if isinstance(config, dict):  # a sentence-transformers CrossEncoder's activation
        source = _shown(name_or_path, subfolder, "config.json")
        settings = config.get("sentence_transformers")
        if isinstance(settings, dict):
            found += _activation(source, "the CrossEncoder activation", settings.get("activation_fn"))
        found += _activation(source, "the CrossEncoder activation", config.get("sbert_ce_default_activation_function"))
    return found


def tokenizer_code(name_or_path: str | Path) -> list[CheckpointCode]:
    """The code a tokenizer folder (or Hub id) names for ``AutoTokenizer`` in its ``tokenizer_config.json``. Without
    ``trust_remote_code`` transformers loads the stock class its ``tokenizer_class`` names instead, silently: a
    tokenizer other than the one the folder describes."""
    name_or_path = str(name_or_path)
    config = _read_json(name_or_path, "", "config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return [code for code in _auto_map_code(name_or_path, "", "tokenizer_config.json", model_type)
            if code.role == "AutoTokenizer"]


def checkpoint_code(name_or_path: str | Path) -> list[CheckpointCode]:
    """Every piece of code that loading ``name_or_path`` (a folder or Hub id; files from the cache or the Hub)
    with ``trust_remote_code=True`` would run beyond the installed packages' own classes (module doc). Its
    sentence-transformers files (the modules, the ``Dense`` activations) are read by
    :func:`~.folder.sentence_transformers_settings`."""
    name_or_path = str(name_or_path)
    declared = sentence_transformers_settings(name_or_path)
    if not declared:  # no modules.json
        return _transformer_code(name_or_path, "")
    found, transformer_seen = [], False
    for module in declared["modules"]:
        kind, subfolder = str(module.get("type") or ""), str(module.get("path") or "")
        if not kind.startswith(SENTENCE_TRANSFORMERS_PREFIX):
            found.append(CheckpointCode(_shown(name_or_path, "", "modules.json"), "the module class", kind,
                                        _code_location(name_or_path, "", kind)))
        elif kind.endswith(".Transformer"):
            transformer_seen = True
            found += _transformer_code(name_or_path, subfolder)
        elif kind.endswith(".Dense"):
            found += _activation(_shown(name_or_path, subfolder, "config.json"), "the Dense activation",
                                 declared["dense_activations"].get(subfolder))
    if not transformer_seen:
        found += _transformer_code(name_or_path, "")
    return found


def refuse_untrusted_code(name_or_path: str | Path, trust_remote_code: bool) -> None:
    """Raise :class:`UntrustedCodeError` (one line naming the file, the code and the flag) when loading
    ``name_or_path`` would run code of its own (:func:`checkpoint_code`) and ``trust_remote_code`` is not True."""
    if trust_remote_code is True:
        return
    found = checkpoint_code(name_or_path)
    if not found:
        return
    more = f" (and {len(found) - 1} more: {', '.join(code.reference for code in found[1:])})" if len(found) > 1 else ""
    raise UntrustedCodeError(
        f"{found[0].describe()}{more}: loading {name_or_path} runs that code, which needs your consent. Read it, "
        f"then {TRUST_FIX}, or use a checkpoint without code of its own."
    )


__all__ = ["TRUST_FIX", "CheckpointCode", "UntrustedCodeError", "checkpoint_code", "refuse_untrusted_code",
           "tokenizer_code"]
