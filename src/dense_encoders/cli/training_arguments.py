"""transformers' ``TrainingArguments`` flags in ``--help``, without importing torch.

``pretrain`` and ``distill`` take every ``TrainingArguments`` flag, and their help lists them after the command's
own. Importing ``TrainingArguments`` imports torch (about 2 s of CPU), which printing help does not otherwise
need; so the flags, as transformers' ``HfArgumentParser`` defines them (spellings, text, default, choices, number
of values), are read from ``TrainingArguments`` once per installed transformers / torch / accelerate / Python and
kept as JSON in ``HF_HOME/dense-encoders/`` (:func:`cache_file`), from where every later help reads them. Where
``TrainingArguments`` is already imported (a Python session, the tests), they are read from it directly. The
parser that parses a command line is always built from ``TrainingArguments`` itself; ``tests/test_cli_help.py``
checks that both list the same flags with the same text. The flags are kept as a
:class:`~.dataclass_parser.DataclassParser` declares them (dashed, ``--trainer-debug``, help with the default), and
declared again from there.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from enum import Enum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .arguments import CommandParser

FORMAT = "dense-encoders/training-arguments-flags/3"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "none"


def cache_file() -> Path:
    """Where the flags of the installed ``TrainingArguments`` are kept: ``HF_HOME/dense-encoders/``, one file per
    version of what defines them (transformers, torch, accelerate: some defaults depend on the latter two)."""
    from huggingface_hub import constants

    versions = "_".join(f"{name}-{_version(name)}" for name in ("transformers", "torch", "accelerate"))
    name = f"training-arguments_{versions}_python-{platform.python_version()}.json"
    return Path(constants.HF_HOME) / "dense-encoders" / name


def _plain(value):
    """``value`` as JSON keeps it for the help text (:func:`~.arguments.shown_default` shows both alike)."""
    if isinstance(value, Enum):
        return value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def _flags_of_the_class() -> list[dict]:
    from transformers import TrainingArguments

    from .dataclass_parser import DataclassParser

    parser, flags = DataclassParser((TrainingArguments,)), []
    for action in dict.fromkeys(parser.flags.values()):
        if action.nargs == 0:  # store_true / store_false: the only switches HfArgumentParser declares
            kind = "store_true" if action.const is True else "store_false"
        else:
            kind = "store"
        flags.append({"option_strings": list(action.option_strings), "dest": action.dest, "action": kind,
                      "switch": action in parser.switches, "nargs": action.nargs,
                      "const": _plain(action.const), "default": _plain(action.default),
                      "choices": [_plain(choice) for choice in action.choices] if action.choices else None,
                      "required": action.required, "help": action.help, "metavar": action.metavar})
    return flags


def training_arguments_flags() -> list[dict]:
    """Each flag of ``HfArgumentParser(TrainingArguments)`` as a mapping of its ``add_argument`` keywords (plus
    ``option_strings``): from ``TrainingArguments`` itself where it is imported, else from :func:`cache_file`
    (written on first use; a folder that cannot be written only means reading the class next time too)."""
    if "transformers.training_args" in sys.modules:
        return _flags_of_the_class()
    path = cache_file()
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") == FORMAT:
            return record["flags"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    flags = _flags_of_the_class()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                         encoding="utf-8") as stream:
            json.dump({"format": FORMAT, "flags": flags}, stream)
        os.replace(stream.name, path)
    except OSError:
        pass
    return flags


def add_training_arguments(parser: CommandParser) -> CommandParser:
    """``parser`` (built from our settings dataclasses) with a group of every ``TrainingArguments`` flag that it does
    not define itself (its own replace transformers' of the same name), for printing help only."""
    from transformers.hf_argparser import string_to_bool  # the parser is a DataclassParser: transformers is imported

    defined = {action.dest for action in parser.flags.values()}
    group = parser.add_argument_group(
        f"TrainingArguments options (transformers {_version('transformers')}; every flag of "
        "transformers.TrainingArguments, those above replacing its own)")
    for flag in training_arguments_flags():
        if flag["dest"] in defined:
            continue
        keywords = {key: flag[key] for key in ("dest", "default", "required", "help")}
        if flag["action"] == "store":
            keywords.update({key: flag[key] for key in ("nargs", "const", "choices", "metavar")})
            if flag["switch"]:
                keywords["type"] = string_to_bool  # a boolean field: shown as a switch
        parser.add_argument(*flag["option_strings"], group=group, action=flag["action"], **keywords)
    return parser


__all__ = ["add_training_arguments", "cache_file", "training_arguments_flags"]
