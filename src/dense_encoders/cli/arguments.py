"""The conventions every subcommand shares: dashed flags with underscore aliases, and ``--config FILE``.

Every subcommand builds its parser with :func:`make_parser` (an ``argparse.ArgumentParser``, or
transformers' ``HfArgumentParser`` for the ``TrainingArguments`` commands) and reads its command
line with :func:`parse`, which does, in this order:

1. ``--config FILE`` (JSON or YAML mapping of flag names to values, ``args`` for positionals) becomes
   flags placed before the command line's own, so explicit flags win (:func:`expand_config_file`).
   A command without positional arguments also takes the file alone: ``dense-encoders distill run.yaml``.
2. ``--recipe NAME`` (on the command line or in the config file; commands that train) puts a paper's
   recipe (:mod:`dense_encoders.recipes`) before both, so the config file and the command line override
   it (:func:`expand_recipe`).
3. Flags are normalised to the spelling the parser knows (:func:`normalize_flags`): ``--output_dir``
   and ``--output-dir`` are the same flag for every subcommand, so ``TrainingArguments`` users keep
   their habits. ``--help`` shows the dashed spelling only.
4. The parser parses: a namespace, or the dataclasses of an ``HfArgumentParser``.

Every parser's help shows each flag once, dashed, with its default (:class:`DashedHelpFormatter`); an
``HfArgumentParser``'s ``--no-X`` switch says what it turns off, and ``TrainingArguments``' own ``debug`` field is
``--trainer-debug``, since ``--debug`` (anywhere on the command line) means full tracebacks
(:func:`finish_parser`). Nothing here imports transformers until a parser over dataclasses is built.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import textwrap
from enum import Enum
from pathlib import Path

import yaml

from ..recipes import load_recipe

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


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


class DashedHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that lists each flag once, dashed (``--output-dir``), although ``--output_dir`` is accepted too, and
    ends each flag's text with its default (``(default: 32)``) unless the text already speaks of its default or the
    flag is a switch (``store_true``: off unless given)."""

    def _format_action_invocation(self, action):
        if action.option_strings:
            action = copy.copy(action)
            action.option_strings = [option for option in action.option_strings
                                     if option == _dashed(option) or _dashed(option) not in action.option_strings]
        return super()._format_action_invocation(action)

    def _get_help_string(self, action):
        text = action.help or ""
        shown = None if action.nargs == 0 or not action.option_strings else shown_default(action.default)
        if shown is None or "default" in text.lower():
            return text
        return f"{text} (default: {shown.replace('%', '%%')})".lstrip()


def dashed_first(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Put each flag's dashed spelling first, which is the one usage lines show."""
    for action in parser._actions:
        action.option_strings.sort(key=lambda option: option != _dashed(option))
    return parser


def make_parser(prog: str, description: str, examples: str, dataclasses: tuple = (),
                usage: str | None = None) -> argparse.ArgumentParser:
    """A subcommand's parser: ``HfArgumentParser`` over ``dataclasses`` when given, else argparse's own;
    dashed help with defaults, and the ``--config`` and ``--debug`` conventions stated under the examples.
    ``usage`` replaces argparse's usage line (which would list every flag)."""
    epilog = examples.rstrip("\n") + (
        "\n\nEvery flag may also come from --config FILE (JSON or YAML: flag names to values, `args` for "
        "positionals);\nflags on the command line win. --foo-bar and --foo_bar are the same flag. --debug "
        "(anywhere on the\ncommand line) shows the full traceback of an error instead of its one-line message.\n"
    )
    if "\n" not in description:  # argparse prints a raw description as it is: one line per paragraph
        description = textwrap.fill(description, width=100, break_on_hyphens=False)
    settings = dict(prog=prog, description=description, epilog=epilog, formatter_class=DashedHelpFormatter,
                    usage=usage)
    if dataclasses:
        from transformers import HfArgumentParser  # imports transformers (not torch): only where dataclasses are

        return one_line_errors(finish_parser(HfArgumentParser(dataclasses, **settings)))
    return one_line_errors(argparse.ArgumentParser(**settings))


TRAINER_DEBUG_HELP = ("TrainingArguments' debug field, spelt --trainer-debug here because --debug shows full "
                      "tracebacks: ")


def finish_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """An ``HfArgumentParser``'s flags as the command line shows them (again after flags were added): the dashed
    spelling first; each ``--no-X`` switch saying that it turns ``--X`` off (transformers gives it ``--X``'s
    text); ``TrainingArguments.debug`` as ``--trainer-debug``, ``--debug`` being the command line's own."""
    dashed_first(parser)
    debug = parser._option_string_actions.get("--debug")
    if debug is not None and debug.dest == "debug":
        for option in debug.option_strings:
            del parser._option_string_actions[option]
        debug.option_strings = ["--trainer-debug", "--trainer_debug"]
        parser._option_string_actions.update(dict.fromkeys(debug.option_strings, debug))
        debug.help = TRAINER_DEBUG_HELP + (debug.help or "")
    for action in parser._actions:
        negated = next((option for option in action.option_strings if option.startswith("--no-")), None)
        if isinstance(action, argparse._StoreFalseAction) and negated and action.help != argparse.SUPPRESS:
            positive = parser._option_string_actions.get("--" + negated[len("--no-"):])
            if positive is not None and positive.dest == action.dest:
                action.help = f"Same as {positive.option_strings[0]} false."
    return parser


def _actions_by_dest(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions if action.option_strings}


def set_types(parser: argparse.ArgumentParser, parse_value, *dests: str) -> argparse.ArgumentParser:
    """Read the flags of the dataclass fields ``dests`` with ``parse_value`` (an argparse ``type`` such as
    :func:`~dense_encoders.cli.checks.positive_int`) instead of the field's type, so that a bad value is an
    argparse error naming the flag."""
    actions = _actions_by_dest(parser)
    for dest in dests:
        actions[dest].type = parse_value
    return parser


def adopt_flags(parser: argparse.ArgumentParser, add_flags,
                attributes: tuple[str, ...] = ("type", "metavar", "choices", "help")) -> argparse.ArgumentParser:
    """Give the flags of ``parser`` that ``add_flags(argparse_parser)`` also defines that definition's
    ``attributes`` (type, metavar, choices and help; e.g. :func:`~dense_encoders.cli.checks.add_graded_pair_flags`
    for the ``pair_threshold`` / ``pair_scale`` fields of a dataclass; only the help of a switch, whose dataclass
    field keeps HfArgumentParser's boolean parsing)."""
    reference = argparse.ArgumentParser(add_help=False)
    add_flags(reference)
    actions = _actions_by_dest(parser)
    for dest, model in _actions_by_dest(reference).items():
        for name in attributes:
            setattr(actions[dest], name, getattr(model, name))
    return parser


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Flag errors as one line (``prog: error: argument --k: ... (see --help)``, exit code 2), not the usage; a flag
    with both spellings is named by the dashed one."""

    def error(message: str):
        message = re.sub(r"^argument (--[\w-]+)(?:/--[\w-]+)+:", r"argument \1:", message)  # one spelling
        parser.exit(2, f"{parser.prog}: error: {message} (see --help)\n")

    parser.error = error
    return parser


def _known_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each flag of ``parser`` by its dashed spelling -> the spelling the parser registered (dashed when both)."""
    known: dict[str, str] = {}
    for option in parser._option_string_actions:
        if option.startswith("--"):
            key = _dashed(option)
            if key not in known or option == key:
                known[key] = option
    return known


def normalize_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with every ``--foo_bar`` / ``--foo-bar`` spelt as ``parser`` knows the flag (``--foo_bar=1``
    too); unknown flags, values and everything after ``--`` are left as they are."""
    known, normalized = _known_options(parser), []
    for index, token in enumerate(argv):
        if token == "--":
            return normalized + argv[index:]
        if token.startswith("--"):
            name, equals, value = token.partition("=")
            if name not in parser._option_string_actions and _dashed(name) in known:
                token = known[_dashed(name)] + equals + value
        normalized.append(token)
    return normalized


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


def config_flags(parser: argparse.ArgumentParser, settings: dict, source: str = "the config file",
                 strict: bool = True) -> list[str]:
    """Flags for a mapping of flag names (``batch_size`` or ``batch-size``) to values: ``true`` gives a bare
    flag, ``false`` omits a switch (``--bf16 False`` where the flag takes a value), ``null`` omits the flag,
    lists give several values, mappings a JSON value (``lr_scheduler_kwargs``). A key that is no flag of
    ``parser`` is an error naming ``source`` when ``strict`` (unless its value is ``false`` or ``null``), else
    passed on as a flag for the parser to refuse."""
    actions, known, flags = parser._option_string_actions, _known_options(parser), []
    for key, value in settings.items():
        flag = _dashed(f"--{key}")
        action = actions.get(known.get(flag, ""))
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


def _has_positionals(parser: argparse.ArgumentParser) -> bool:
    return any(not action.option_strings for action in parser._actions)


def expand_config_file(parser: argparse.ArgumentParser | str, argv: list[str], strict: bool = False) -> list[str]:
    """``argv`` with ``--config FILE`` replaced by the file's flags, placed after the command line's leading
    positionals and before its flags (so flags given on the command line win). ``parser`` may be a
    subcommand's name; ``strict`` refuses keys that are no flags of it (:func:`config_flags`)."""
    if isinstance(parser, str):
        from . import PARSERS  # import cycle: cli/__init__ imports this module

        parser = PARSERS[parser]()
    if len(argv) == 1 and argv[0].endswith(CONFIG_SUFFIXES) and not _has_positionals(parser):
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


def expand_recipe(parser: argparse.ArgumentParser, argv: list[str], command: str):
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


def parse(parser: argparse.ArgumentParser, argv: list[str], command: str | None = None):
    """Read a subcommand's command line: ``--config``, ``--recipe`` (when ``command`` names the subcommand
    being run), then either flag spelling, then the parser."""
    argv = expand_config_file(parser, argv, strict=True)
    recipe = None
    if command is not None:
        argv, recipe = expand_recipe(parser, normalize_flags(parser, argv), command)
    argv = normalize_flags(parser, argv)
    try:
        if hasattr(parser, "parse_args_into_dataclasses"):  # HfArgumentParser
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


__all__ = [
    "DashedHelpFormatter",
    "adopt_flags",
    "config_flags",
    "dashed_first",
    "expand_config_file",
    "expand_recipe",
    "finish_parser",
    "make_parser",
    "normalize_flags",
    "one_line_errors",
    "parse",
    "read_config",
    "set_types",
    "shown_default",
]
