"""``dense-encoders ... --help``: quick (no torch, no model code, no training or evaluation code imported) and
complete (every flag has a text and shows its default; no two flags read alike; the examples are valid commands;
``pretrain ARCHITECTURE`` shows that architecture's options first; the flags listed are those that parse)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, cpu_only_env

from dense_encoders import cli
from dense_encoders.cli.arguments import expand_recipe, normalize_flags, shown_default
from dense_encoders.settings.pretraining import (
    ARCHITECTURE_NAMES,
    ARCHITECTURES_OF_FIELD,
    PRESETS,
    preset_help,
    unread_fields,
)

# every help there is: the top level, each subcommand, and pre-training's per architecture
HELPS = [[]] + [[command] for command in cli.COMMANDS] + [["pretrain", name] for name in ARCHITECTURE_NAMES]
# of the package, what --help may import: the command line, the settings, and what they read without torch
ALLOWED_OF_THE_PACKAGE = re.compile(
    r"dense_encoders(\.cli(\.\w+)?|\.settings(\.\w+)?|\.recipes|\.vectors|\.models|\.models\.(tite|condenser)"
    r"|\.models\.(tite|condenser)\.presets)?")
# and of other packages: nothing that imports torch, reads weights, or trains
HEAVY = ("torch", "sentence_transformers", "scipy", "safetensors", "accelerate", "transformers.training_args",
         "transformers.trainer", "transformers.modeling_utils", "transformers.configuration_utils")


def imported_modules(argv: list[str], hf_home) -> set[str]:
    """The modules ``python -X importtime -m dense_encoders.cli ARGV --help`` imports (exit code 0)."""
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), HF_HOME=str(hf_home))
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "dense_encoders.cli", *argv, "--help"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout or "Subcommands:" in result.stdout
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


@pytest.fixture(scope="module")
def warm_hf_home(tmp_path_factory):
    """An HF_HOME where the TrainingArguments flags are already kept (the first TrainingArguments help of an
    installation reads them from transformers, torch included, and keeps them: see cli/training_arguments.py)."""
    home = tmp_path_factory.mktemp("hf-home")
    first = imported_modules(["distill"], home)
    assert "torch" in first  # the first one read the class (which imports torch) ...
    assert list((home / "dense-encoders").glob("training-arguments_*.json"))  # ... and kept its flags
    return home


@pytest.mark.parametrize("argv", HELPS, ids=lambda argv: " ".join(argv) or "top-level")
def test_help_imports_no_torch_no_model_and_no_training_or_evaluation_code(argv, warm_hf_home):
    modules = imported_modules(argv, warm_hf_home)
    ours = {name for name in modules if name.split(".")[0] == "dense_encoders"}
    assert ours and not {name for name in ours if not ALLOWED_OF_THE_PACKAGE.fullmatch(name)}
    heavy = {name for name in modules if any(name == h or name.startswith(h + ".") for h in HEAVY)}
    assert not heavy, sorted(heavy)


def test_the_kept_training_arguments_flags_are_the_class_flags(warm_hf_home):
    """What a fresh process reads from the file equals what TrainingArguments gives here."""
    from dense_encoders.cli import training_arguments

    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), HF_HOME=str(warm_hf_home))
    code = ("import json; from dense_encoders.cli.training_arguments import training_arguments_flags; "
            "print(json.dumps(training_arguments_flags()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == training_arguments._flags_of_the_class()


# ---------------------------------------------------------------------------- what help lists is what parses


def help_parser(argv: list[str]) -> argparse.ArgumentParser:
    return cli.help_parser(argv[0], argv[1:])


def shown(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    """Each flag help lists (by its dashed spelling): its spellings, text as printed, choices, number of values."""
    formatter = parser.formatter_class(parser.prog)
    listed = {}
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        text = formatter._get_help_string(action) % {"default": action.default, "prog": parser.prog}
        choices = list(action.choices) if action.choices is not None else None
        listed[action.option_strings[0]] = (sorted(action.option_strings), text, choices, action.nargs, action.dest)
    return listed


@pytest.mark.parametrize("command", ["pretrain", "distill"])
def test_help_lists_the_flags_the_command_parses_with_their_texts(command):
    """The help of the TrainingArguments commands (built without torch) lists exactly the parser's flags, with the
    same spellings, texts, defaults, choices and numbers of values."""
    assert shown(help_parser([command])) == shown(cli.PARSERS[command]())


@pytest.mark.parametrize("architecture", ARCHITECTURE_NAMES)
def test_pretrain_help_shows_the_architectures_own_options_first(architecture, capsys):
    assert cli.main(["pretrain", architecture, "--help"]) == 0
    out = capsys.readouterr().out
    own, _, training_arguments = out.partition("\nTrainingArguments options")
    assert training_arguments and own.startswith(f"usage: dense-encoders pretrain {architecture} ")
    assert f"\n{architecture} options:\n" in own
    everything = shown(cli.PARSERS["pretrain"]())
    listed = shown(help_parser(["pretrain", architecture]))
    hidden = {flag for flag, (_, _, _, _, dest) in everything.items() if dest in unread_fields(architecture)}
    assert set(listed) == set(everything) - hidden
    for flag, (_, _, _, _, dest) in everything.items():  # in the first part exactly when the architecture reads it
        read_here = architecture in ARCHITECTURES_OF_FIELD.get(dest, (architecture,))
        if dest in ARCHITECTURES_OF_FIELD:
            assert (f"\n  {flag} " in own or f"\n  {flag}\n" in own) == read_here, flag
    preset = listed["--preset"][1]
    assert preset == preset_help(architecture) and preset.startswith(f"Config preset: {architecture} ")
    foreign = {name for other in ARCHITECTURE_NAMES for name in PRESETS[other]} - set(PRESETS[architecture])
    assert not [name for name in foreign if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", preset)]


def test_the_three_architectures_print_three_helps(capsys):
    outs = []
    for architecture in ARCHITECTURE_NAMES:
        assert cli.main(["pretrain", architecture, "--help"]) == 0
        outs.append(capsys.readouterr().out.partition("\nTrainingArguments options")[0])
    assert len(set(outs)) == 3
    assert "--grad-cache-chunk-size" in outs[1] and "--grad-cache-chunk-size" not in outs[0] + outs[2]
    assert "--n-head-layers" in outs[0] and "--n-head-layers" not in outs[2]


# ---------------------------------------------------------------------------- every flag's text


@pytest.mark.parametrize("argv", [h for h in HELPS if h], ids=" ".join)
def test_every_flag_has_a_text_with_its_default_and_no_two_read_alike(argv):
    listed = shown(help_parser(argv))
    assert listed
    missing = [flag for flag, (_, text, *_) in listed.items() if not text.strip()]
    assert not missing, f"no help text: {missing}"
    parser = help_parser(argv)
    off_switches = [action for action in getattr(parser, "switches", []) if action.default is False]
    for action in parser._actions:  # every flag that takes a value (a switch off unless given takes none)
        if action.option_strings and action.help != argparse.SUPPRESS and action.nargs != 0:
            if shown_default(action.default) is not None and action not in off_switches:
                text = listed[action.option_strings[0]][1]
                assert "default" in text.lower(), (action.option_strings[0], text)
    by_text: dict[str, list[str]] = {}
    for flag, (_, text, *_) in listed.items():
        by_text.setdefault(text, []).append(flag)
    alike = {text: flags for text, flags in by_text.items() if len(flags) > 1}
    assert not alike, alike


def test_defaults_appear_in_the_printed_help(capsys):
    """The distill defaults the issue missed, as printed."""
    assert cli.main(["distill", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for flag, default in [("--losses", "margin_mse+kl+infonce"), ("--documents-per-query", "8"),
                          ("--sampling", "random"), ("--query-max-length", "32"), ("--document-max-length", "512")]:
        text = out.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert f"(default: {default})" in text, (flag, text)


@pytest.mark.parametrize("command", ["evaluate", "infuse", "distill", "pretrain"])
def test_boolean_fields_show_as_switches_and_still_take_a_value(command, capsys):
    """Each boolean field of the command's dataclasses is listed as a bare switch (``--no-progress``, not
    ``--no-progress [NO_PROGRESS]``), in the usage line too, and ``--x``, ``--x false`` and ``--x=true`` parse."""
    import dataclasses

    from dense_encoders.settings.distillation import DistillationSetup, DistillationTrainerFields
    from dense_encoders.settings.evaluation import EvaluationArguments
    from dense_encoders.settings.infusion import InfusionArguments
    from dense_encoders.settings.pretraining import PreTrainingSetup, PreTrainingTrainerFields

    classes = {"evaluate": (EvaluationArguments,), "infuse": (InfusionArguments,),
               "distill": (DistillationSetup, DistillationTrainerFields),
               "pretrain": (PreTrainingSetup, PreTrainingTrainerFields)}[command]
    booleans = {"--" + field.name.replace("_", "-") for cls in classes for field in dataclasses.fields(cls)
                if field.type in (bool, "bool")}
    assert booleans
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    shown = booleans | ({"--bf16", "--use-cpu"} if command in ("distill", "pretrain") else set())  # TrainingArguments'
    for flag in shown:
        assert f"{flag} [" not in out, flag  # no optional value shown, in the usage line nor in the list
        assert re.search(rf"\n  {flag}(  |\n)", out), flag  # listed bare: the text follows, or the next line
    parser = cli.PARSERS[command]()
    required = {"evaluate": ["m", "d"], "infuse": ["--cross-encoder", "c", "--train-data", "d", "--output-dir", "o"]}
    for flag in sorted(booleans):
        dest = flag[2:].replace("-", "_")
        for given, value in [([flag], True), ([flag, "false"], False), ([f"{flag}=true"], True), ([flag, "0"], False)]:
            namespace, _ = parser.parse_known_args([*required.get(command, []), *given])
            assert getattr(namespace, dest) is value, given


def test_no_late_mlm_says_what_it_turns_off():
    listed = shown(help_parser(["pretrain", "condenser"]))
    assert listed["--no-late-mlm"][1] == "Same as --late-mlm false."
    assert listed["--late-mlm"][1].startswith("Add the backbone's own MLM loss")


def test_convert_skip_from_states_the_default_the_converter_uses():
    from dense_encoders.checkpoints.condenser_reference import _resolve_skip_from

    text = shown(help_parser(["convert"]))["--skip-from"][1]
    assert "half the backbone's depth" in text and "default 6" not in text.lower()
    # the converter: half the depth when not given (6 of 12, 2 of 4), the value given otherwise
    assert [_resolve_skip_from(None, layers, REPO_ROOT) for layers in (12, 4)] == [6, 2]
    assert _resolve_skip_from(3, 12, REPO_ROOT) == 3


def test_convert_help_names_every_format_it_reads():
    from dense_encoders.checkpoints import SOURCE_FORMATS
    from dense_encoders.cli.convert import FORMAT_NAMES

    assert set(FORMAT_NAMES) == {source.name for source in SOURCE_FORMATS}
    description = " ".join(help_parser(["convert"]).description.split())
    assert all(name in description for name in FORMAT_NAMES)


def test_debug_is_the_command_lines_and_trainer_debug_is_training_arguments(capsys):
    """``--debug`` (anywhere) means full tracebacks: no subcommand has a flag of that name, every help says what it
    does; ``TrainingArguments.debug`` is ``--trainer-debug``, documented as such, and parses into ``args.debug``."""
    from dense_encoders.cli.arguments import parse

    for argv in [h for h in HELPS if h]:
        parser = help_parser(argv)
        assert "--debug" not in parser._option_string_actions, argv
        assert "--debug (anywhere on the\ncommand line) shows the full traceback" in parser.epilog, argv
    for command in ("pretrain", "distill"):
        text = shown(help_parser([command]))["--trainer-debug"][1]
        assert text.startswith("TrainingArguments' debug field") and "underflow_overflow" in text
    flags = ["--student", "s", "--train-file", "t", "--use-cpu", "--trainer_debug", "underflow_overflow"]
    _, args = parse(cli.PARSERS["distill"](), flags)
    assert [option.value for option in args.debug] == ["underflow_overflow"]
    # and --debug still shows a traceback instead of the one-line error
    assert cli.main(["evaluate", "no-such-model", "no-such-data"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(ValueError):
        cli.main(["evaluate", "no-such-model", "no-such-data", "--debug"])


# ---------------------------------------------------------------------------- the examples


def example_commands(epilog: str) -> list[str]:
    """The commands of an ``examples:`` section, continuation lines joined; a line ending in a backslash must be
    followed by an indented continuation."""
    lines = epilog.split("\n\nEvery flag may also come from")[0].splitlines()
    commands, current = [], None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if current is not None:
            assert line.startswith("      ") and stripped and not stripped.startswith("#"), (lines[number - 1], line)
            current += " " + stripped.removesuffix("\\").strip()
        elif stripped and not stripped.startswith("#") and not stripped.endswith(":"):
            current = stripped.removesuffix("\\").strip()
        else:
            continue
        if not stripped.endswith("\\"):
            commands.append(current)
            current = None
    assert current is None, f"the last example ends in a continuation: {current}"
    return commands


def dry_parse(command: str) -> None:
    """Parse an example with its subcommand's parser as the command line would (recipe, flag spellings), without
    building the settings (which would check files and devices)."""
    words = shlex.split(command, comments=True)
    program = "dense_encoders.cli" if "dense_encoders.cli" in words else "dense-encoders"
    name, argv = words[words.index(program) + 1], words[words.index(program) + 2:]
    parser = cli.PARSERS[name]()
    subcommand = name
    if name == "pretrain":
        subcommand, argv = f"pretrain {argv[0]}", argv[1:]
    if len(argv) == 1 and argv[0].endswith((".yaml", ".json")) and name != "recipes" or "--config" in argv:
        return  # a config file: read by the command line (tests/test_cli.py), not an example's syntax
    if name in ("pretrain", "distill", "infuse"):
        argv, _ = expand_recipe(parser, normalize_flags(parser, argv), subcommand)
    try:
        parser.parse_args(normalize_flags(parser, argv))
    except SystemExit as exit_:
        raise AssertionError(f"{command!r} does not parse") from exit_


@pytest.mark.parametrize("argv", [h for h in HELPS if h], ids=" ".join)
def test_every_example_is_one_valid_command(argv):
    epilog = help_parser(argv).epilog
    commands = example_commands(epilog)
    assert commands, argv
    for command in commands:
        # a lost continuation joins two lines: the second one's indentation stays inside the command
        assert not re.search(r"\S {2,}-", command.split("#")[0].rstrip()), command
        dry_parse(command)


# ---------------------------------------------------------------------------- import dense_encoders under --help


@pytest.mark.parametrize("argv, orig_argv, only_help", [
    (["/venv/bin/dense-encoders", "distill", "--help"], [], True),
    (["/venv/bin/dense-encoders"], [], True),
    (["/venv/bin/dense-encoders", "pretrain", "tite", "-h"], [], True),
    (["/venv/bin/dense-encoders", "distill", "--student", "s"], [], False),
    (["/venv/bin/dense-encoders", "search", "a", "b", "--", "--help"], [], False),  # after --: not a flag
    (["-m", "evaluate", "--help"], ["python", "-X", "importtime", "-m", "dense_encoders.cli", "evaluate", "--help"],
     True),
    (["-m", "evaluate", "m", "d"], ["python", "-m", "dense_encoders.cli", "evaluate", "m", "d"], False),
    (["-m", "--help"], ["python", "-m", "pytest", "--help"], False),  # another program's help
    (["train.py", "--help"], ["python", "train.py", "--help"], False),
    (["-c"], ["python", "-c", "import dense_encoders"], False),
])
def test_import_skips_the_auto_classes_only_for_the_commands_help(argv, orig_argv, only_help):
    import dense_encoders

    assert dense_encoders._prints_only_help(argv, orig_argv) is only_help


def test_a_help_process_still_gives_the_model_classes_and_registers_them_on_first_access(tmp_path):
    code = ("import sys; sys.argv = ['dense-encoders', '--help']; import dense_encoders; "
            "assert 'torch' not in sys.modules; from transformers import AutoConfig; "
            "config = dense_encoders.TiteConfig(); assert type(AutoConfig.for_model('tite')) is type(config); "
            "print(dense_encoders.TiteModel.__name__)")
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), HF_HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "TiteModel", result.stderr[-2000:]
