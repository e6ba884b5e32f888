"""The conventions every subcommand shares: dashed flags with underscore aliases, and ``--config FILE``.

Every subcommand's parser is a :class:`CommandParser` (built by :func:`make_parser`); a command whose settings are
dataclasses (:mod:`dense_encoders.settings`) gets a :class:`DataclassParser`, transformers' ``HfArgumentParser`` with
the same conventions, which declares the flags from the fields, their types and metadata; the fields' values are
checked in the dataclasses' ``__post_init__``. Each flag is declared once, dashed
(``--output-dir``); ``--output_dir`` is read as the same flag (:func:`normalize_flags`), so ``TrainingArguments``
users keep their habits. Each flag's help ends with its default; a boolean field shows as a switch
(``--no-progress``) although it also takes a value (``--bf16 False``); ``TrainingArguments``' own ``debug`` field
is ``--trainer-debug``, since ``--debug`` (anywhere on the command line) means full tracebacks. All of this goes
through the public API of argparse and ``HfArgumentParser``: ``add_argument``, the attributes of the actions it
returns, ``parse_known_args``, ``format_help`` and ``error``. A command without dataclasses imports no transformers:
``DataclassParser`` is defined when first asked for (:func:`dataclass_parser_class`). Both parser classes live here;
``dataclass_parser`` re-exports ``DataclassParser`` from this module and nothing here imports it back.

:func:`parse` reads a subcommand's command line, in this order:

1. ``--config FILE`` (JSON or YAML mapping of flag names to values, ``args`` for positionals) becomes
   flags placed before the command line's own, so explicit flags win (:func:`expand_config_file`).
   A command without positional arguments also takes the file alone: ``dense-encoders distill run.yaml``.
2. ``--recipe NAME`` (on the command line or in the config file; commands that train) puts a paper's
   recipe (:mod:`dense_encoders.recipes`) before both, so the config file and the command line override
   it (:func:`expand_recipe`).
3. The parser parses (either flag spelling): a namespace, or the dataclasses of the parser.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import textwrap
from collections.abc import Collection, Mapping
from enum import Enum
from pathlib import Path

import yaml

from ..recipes import load_recipe

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
# add_argument actions that take no value: their help shows no default (off unless given)
VALUELESS_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count", "help", "version")
TRAINER_DEBUG_FLAG = "--trainer-debug"
TRAINER_DEBUG_HELP = ("TrainingArguments' debug field, spelt --trainer-debug here because --debug shows full "
                      "tracebacks: ")


def _dashed(option: str) -> str:
    return "--" + option[2:].replace("_", "-") if option.startswith("--") else option


def shown_default(value) -> str | None:
    """How a flag's default reads in ``--help``; None where there is nothing to show (no default, an empty one)."""
    if value is None or value is argparse.SUPPRESS:
        return None
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return " ".join(str(item) for item in value) or None
    if isinstance(value, dict):
        return json.dumps(value) if value else None
    return str(value) if str(value) != "" else None


def help_with_default(text: str | None, keywords: Mapping, switch: bool = False) -> str | None:
    """A flag's help (``text``) ending with the default of the ``add_argument`` ``keywords`` (``(default: 32)``),
    unless the text already speaks of its default or the flag takes no value (``store_true``: off unless given),
    or is a ``switch`` that is off unless given (a boolean field whose default is false)."""
    if text == argparse.SUPPRESS:
        return text
    takes_value = keywords.get("action", "store") not in VALUELESS_ACTIONS and keywords.get("nargs") != 0
    if switch and keywords.get("default") is False:
        takes_value = False
    shown = shown_default(keywords.get("default")) if takes_value else None
    if shown is None or "default" in (text or "").lower():
        return text
    return f"{text or ''} (default: {shown.replace('%', '%%')})".lstrip()


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser, which declares every flag by its dashed spelling, reads the underscore spelling as the
    same flag, ends each flag's help with its default, shows boolean fields as switches, names
    ``TrainingArguments.debug`` ``--trainer-debug`` and reports errors in one line.

    ``hidden``: the fields (dests) whose flags parse but are not listed in ``--help``; ``help_texts``: dest -> the
    help to show instead of the field's own; ``group_title``: the title of the section listing the flags (default:
    argparse's ``options``). ``flags`` maps each flag (dashed) to its action, ``positionals`` lists the positional
    arguments and ``switches`` the boolean fields (``--x`` alone is true; ``--x false`` takes a value)."""

    def __init__(self, *args, hidden: Collection[str] = (), help_texts: Mapping[str, str] | None = None,
                 group_title: str | None = None, **settings):
        self.flags: dict[str, argparse.Action] = {}
        self.positionals: list[argparse.Action] = []
        self.switches: list[argparse.Action] = []
        self.hidden_dests, self.help_texts = frozenset(hidden), dict(help_texts or {})
        self.group_title, self.titled_group = group_title, None
        settings.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **settings)

    def add_argument(self, *names: str, group=None, **keywords) -> argparse.Action:
        """``argparse``'s ``add_argument`` (into ``group`` when given: an argument group of this parser), with the
        conventions of the command line: one dashed spelling per flag, ``--trainer-debug``, the help of a ``--no-X``
        switch, hidden flags, and the default in the help text."""
        optional = any(name.startswith("-") for name in names)
        if optional:
            names, keywords = self._spelled(names, keywords)
        if group is None and self.group_title is not None:
            if self.titled_group is None:
                self.titled_group = self.add_argument_group(self.group_title)
            group = self.titled_group
        add = super().add_argument if group is None else group.add_argument
        action = add(*names, **keywords)
        if not optional:
            self.positionals.append(action)
        elif keywords.get("action") not in ("help", "version"):
            self.flags.update(dict.fromkeys(action.option_strings, action))
            if self.is_switch(keywords):
                self.switches.append(action)
        return action

    def is_switch(self, keywords: Mapping) -> bool:
        """Whether ``add_argument(**keywords)`` declares a boolean that is shown as a switch although it takes an
        optional value (``HfArgumentParser``'s boolean fields: :class:`DataclassParser`)."""
        return False

    def _spelled(self, names: tuple[str, ...], keywords: dict) -> tuple[tuple[str, ...], dict]:
        keywords = dict(keywords)
        long_names = [name for name in names if name.startswith("--")]
        if long_names and "dest" not in keywords:  # argparse's dest: the first long spelling, as declared
            keywords["dest"] = long_names[0][2:].replace("-", "_")
        dest = keywords.get("dest")
        if "--debug" in names:  # TrainingArguments.debug: --debug is the command line's (full tracebacks)
            names = tuple(TRAINER_DEBUG_FLAG if name == "--debug" else name for name in names)
            keywords["help"] = TRAINER_DEBUG_HELP + (keywords.get("help") or "")
        names = tuple(dict.fromkeys(_dashed(name) for name in names))
        negated = next((name for name in names if name.startswith("--no-")), None)
        positive = self.flags.get("--" + negated[len("--no-"):]) if negated else None
        if keywords.get("action") == "store_false" and positive is not None and positive.dest == dest:
            keywords["help"] = f"Same as {positive.option_strings[0]} false."
        if dest in self.hidden_dests:
            keywords["help"] = argparse.SUPPRESS
        elif dest in self.help_texts:
            keywords["help"] = self.help_texts[dest]
        keywords["help"] = help_with_default(keywords.get("help"), keywords, self.is_switch(keywords))
        return names, keywords

    def parse_known_args(self, args=None, namespace=None):
        """argparse's ``parse_known_args``, reading ``--foo_bar`` as ``--foo-bar`` and a switch followed by anything
        but a boolean word as the switch alone (:func:`switches_alone`)."""
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(switches_alone(self, normalize_flags(self, args)), namespace)

    @contextlib.contextmanager
    def _switches_shown_bare(self):
        """While help is formatted: each boolean field as the switch it is used as (``--no-progress``), not with
        its optional value (``--no-progress [NO_PROGRESS]``)."""
        for action in self.switches:
            action.nargs = 0
        try:
            yield
        finally:
            for action in self.switches:
                action.nargs = "?"

    def format_usage(self) -> str:
        with self._switches_shown_bare():
            return super().format_usage()

    def format_help(self) -> str:
        with self._switches_shown_bare():
            return super().format_help()

    def error(self, message: str):
        """Flag errors as one line (``prog: error: argument --k: ... (see --help)``, exit code 2), not the usage."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


@functools.cache
def dataclass_parser_class() -> type[CommandParser]:
    """The class ``DataclassParser`` (also ``arguments.DataclassParser`` and ``dataclass_parser.DataclassParser``),
    defined on first call: it derives from transformers' ``HfArgumentParser``, whose import (transformers, not torch)
    only a command whose settings are dataclasses pays."""
    from transformers.hf_argparser import HfArgumentParser, string_to_bool

    class DataclassParser(CommandParser, HfArgumentParser):
        """``HfArgumentParser(dataclass_types, **settings)``: a flag per field of the dataclasses (help, metavar and
        choices from the field's metadata), parsed into the dataclasses by ``parse_args_into_dataclasses`` (whose
        ``__post_init__`` checks the values), declared and shown as :class:`CommandParser` declares flags. A boolean
        field is a switch in ``--help`` (``--no-progress``) and still takes a value (``--bf16 False``)."""

        def __init__(self, dataclass_types, **settings):
            super().__init__(tuple(dataclass_types), **settings)

        def is_switch(self, keywords: Mapping) -> bool:
            return keywords.get("type") is string_to_bool and keywords.get("nargs") == "?"

    DataclassParser.__qualname__ = "DataclassParser"  # as a module-level class: pickle and reprs find it here
    return DataclassParser


def __getattr__(name: str):
    """``DataclassParser`` (:func:`dataclass_parser_class`), defined when first imported or read."""
    if name == "DataclassParser":
        return dataclass_parser_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_parser(prog: str, description: str, examples: str, dataclasses: tuple = (),
                usage: str | None = None, **options) -> CommandParser:
    """A subcommand's parser: a :class:`DataclassParser` over ``dataclasses`` when given, else a
    :class:`CommandParser`, with the ``--config`` and ``--debug`` conventions stated under the examples. ``usage``
    replaces argparse's usage line (which would list every flag); ``options`` go to :class:`CommandParser`
    (``hidden``, ``help_texts``, ``group_title``)."""
    epilog = examples.rstrip("\n") + (
        "\n\nEvery flag may also come from --config FILE (JSON or YAML: flag names to values, `args` for "
        "positionals);\nflags on the command line win. --foo-bar and --foo_bar are the same flag. --debug "
        "(anywhere on the\ncommand line) shows the full traceback of an error instead of its one-line message.\n"
    )
    if "\n" not in description:  # argparse prints a raw description as it is: one line per paragraph
        description = textwrap.fill(description, width=100, break_on_hyphens=False)
    settings = dict(prog=prog, description=description, epilog=epilog, usage=usage, **options)
    if dataclasses:  # imports transformers (not torch): only where dataclasses are
        return dataclass_parser_class()(dataclasses, **settings)
    return CommandParser(**settings)


def normalize_flags(parser: CommandParser, argv: list[str]) -> list[str]:
    """``argv`` with every ``--foo_bar`` spelt as ``parser`` declares the flag, ``--foo-bar`` (``--foo_bar=1``
    too); unknown flags, values and everything after ``--`` are left as they are."""
    normalized = []
    for index, token in enumerate(argv):
        if token == "--":
            return normalized + argv[index:]
        if token.startswith("--"):
            name, equals, value = token.partition("=")
            if _dashed(name) in parser.flags:
                token = _dashed(name) + equals + value
        normalized.append(token)
    return normalized


# what a boolean field's flag reads as its value (transformers.hf_argparser.string_to_bool, any case)
BOOLEAN_WORDS = frozenset({"yes", "true", "t", "y", "1", "no", "false", "f", "n", "0"})


def switches_alone(parser: CommandParser, argv: list[str]) -> list[str]:
    """``argv`` with each switch that is not followed by a boolean word spelt ``--x=true``: a boolean field's flag
    takes an optional value (``--bf16 False``), and would otherwise take the positional argument after it
    (``encode --normalize MODEL TEXTS``) as that value. Everything after ``--`` is left as it is."""
    spelt = []
    for index, token in enumerate(argv):
        if token == "--":
            return spelt + argv[index:]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if parser.flags.get(token) in parser.switches and (following is None or following.lower() not in BOOLEAN_WORDS):
            token += "=true"
        spelt.append(token)
    return spelt


def read_config(path: str | Path) -> dict:
    """The mapping a JSON or YAML config file holds; errors name the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 (byte {error.object[error.start]:#04x}): save the file as "
                         "UTF-8") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            settings = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ValueError(f"{where}: not valid YAML ({problem})") from None
    else:
        try:
            settings = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg})") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path} must hold a mapping of flag names to values")
    return settings


def config_flags(parser: CommandParser, settings: dict, source: str = "the config file",
                 strict: bool = True) -> list[str]:
    """Flags for a mapping of flag names (``batch_size`` or ``batch-size``) to values: ``true`` gives a bare
    flag, ``false`` omits a switch (``--bf16 False`` where the flag takes a value), ``null`` omits the flag,
    lists give several values, mappings a JSON value (``lr_scheduler_kwargs``). A key that is no flag of
    ``parser`` is an error naming ``source`` when ``strict`` (unless its value is ``false`` or ``null``), else
    passed on as a flag for the parser to refuse."""
    flags = []
    for key, value in settings.items():
        flag = _dashed(f"--{key}")
        action = parser.flags.get(flag)
        switch = action is not None and action.nargs == 0  # store_true / store_false / store_const
        if value is None or (value is False and (action is None or switch)):
            continue
        if action is None and strict:
            raise ValueError(f"{source}: {key!r} is not a flag of {parser.prog} (see --help)")
        if value is True and (action is None or switch or action.nargs == "?"):
            flags.append(flag)
        elif isinstance(value, list):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


def expand_config_file(parser: CommandParser, argv: list[str], strict: bool = False) -> list[str]:
    """``argv`` with ``--config FILE`` replaced by the file's flags, placed after the command line's leading
    positionals and before its flags (so flags given on the command line win). ``strict`` refuses keys that are no
    flags of ``parser`` (:func:`config_flags`). By a subcommand's name instead of its parser:
    ``dense_encoders.cli.expand_config_file``."""
    if len(argv) == 1 and argv[0].endswith(CONFIG_SUFFIXES) and not parser.positionals:
        argv = ["--config", argv[0]]  # `dense-encoders distill run.yaml`
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise ValueError("--config needs a file: a JSON or YAML mapping of flag names to values")
    settings = read_config(argv[index + 1])
    rest = argv[:index] + argv[index + 2 :]
    positionals = [str(v) for v in settings.pop("args", None) or []]
    flags = config_flags(parser, settings, source=argv[index + 1], strict=strict)
    leading = 0  # positionals already on the command line (e.g. pretrain's architecture) stay first
    while leading < len(rest) and not rest[leading].startswith("-"):
        leading += 1
    return rest[:leading] + positionals + flags + rest[leading:]


def _recipe_name(argv: list[str]) -> str | None:
    """The value of the last ``--recipe`` in ``argv`` (either spelling of the flag is the same)."""
    name = None
    for index, token in enumerate(argv):
        if token == "--":
            break
        if token == "--recipe" and index + 1 < len(argv):
            name = argv[index + 1]
        elif token.startswith("--recipe="):
            name = token.partition("=")[2]
    return name


def expand_recipe(parser: CommandParser, argv: list[str], command: str):
    """``(argv, recipe)``: the recipe named by ``--recipe`` becomes flags placed after the leading positionals
    and before everything else, so ``--config`` and the command line override it. ``command`` is the
    subcommand being run (``pretrain tite``); a recipe written for another one is refused."""
    name = _recipe_name(argv)
    if name is None:
        return argv, None
    recipe = load_recipe(name)
    if recipe.command != command:
        raise ValueError(f"recipe {recipe.name} is written for `dense-encoders {recipe.command}`, not "
                         f"`dense-encoders {command}` (`dense-encoders recipes` lists each recipe's command)")
    flags = config_flags(parser, recipe.values(), source=f"recipe {recipe.name}", strict=True)
    leading = 0
    while leading < len(argv) and not argv[leading].startswith("-"):
        leading += 1
    return argv[:leading] + flags + argv[leading:], recipe


def parse(parser: CommandParser, argv: list[str], command: str | None = None):
    """Read a subcommand's command line: ``--config``, ``--recipe`` (when ``command`` names the subcommand
    being run), then the parser (either flag spelling): the parser's dataclasses (``__post_init__`` checks
    their values), followed by a namespace of the flags added besides them; a namespace where it has none."""
    argv = expand_config_file(parser, argv, strict=True)
    recipe = None
    if command is not None:
        argv, recipe = expand_recipe(parser, normalize_flags(parser, argv), command)
    try:
        if getattr(parser, "dataclass_types", None):  # a DataclassParser
            parsed = parser.parse_args_into_dataclasses(argv)
        else:
            parsed = parser.parse_args(argv)
    except ValueError as error:
        if "bf16/gpu" in str(error):  # TrainingArguments: --bf16 without a bf16 GPU and without --use_cpu
            from ..trainer.records import BF16_ADVICE

            by_recipe = recipe is not None and recipe.values().get("bf16") is True
            origin = f"--bf16 (recipe {recipe.name})" if by_recipe else "--bf16"
            raise ValueError(f"{origin}: there is no GPU with bf16 support here: {BF16_ADVICE}") from None
        raise
    parse.last = parsed  # what `cli.main` reads after an interrupt (the output folder to resume from)
    return parsed


parse.last = None


# DataclassParser is left out of __all__: `import *` would define it, importing transformers
__all__ = [
    "CommandParser",
    "config_flags",
    "dataclass_parser_class",
    "expand_config_file",
    "expand_recipe",
    "help_with_default",
    "make_parser",
    "normalize_flags",
    "parse",
    "read_config",
    "shown_default",
    "switches_alone",
]
