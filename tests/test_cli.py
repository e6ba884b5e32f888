"""The dense-encoders command line: shared conventions (flag spellings, config files, help, errors, memory hints)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, cpu_only_env

from dense_encoders import cli
from dense_encoders.cli.arguments import normalize_flags, parse


def test_config_file_becomes_flags_that_the_command_line_overrides(tmp_path):
    yaml_file = tmp_path / "evaluate.yaml"
    yaml_file.write_text("args: [model-dir, data-dir]\nbatch_size: 8\nno_progress: true\nquiet: false\n")
    argv = cli.expand_config_file("evaluate", ["--config", str(yaml_file), "--batch-size", "4"])
    assert argv == ["model-dir", "data-dir", "--batch-size", "8", "--no-progress", "--batch-size", "4"]
    json_file = tmp_path / "distill.json"
    json_file.write_text(json.dumps({"student": "s", "losses": "kl", "use_cpu": True, "bf16": False,
                                     "report_to": ["none"]}))
    argv = cli.expand_config_file("distill", ["--config", str(json_file)])
    assert argv == ["--student", "s", "--losses", "kl", "--use-cpu", "--bf16", "False", "--report-to", "none"]
    # a leading positional of the command line (pretrain's architecture) stays first
    assert cli.expand_config_file("pretrain", ["tite", "--config", str(json_file)])[0] == "tite"


def test_config_file_errors_name_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: 8\nlayers: [1\n")
    assert cli.main(["evaluate", "--config", str(bad)]) == 2
    # one line: file, line and column (1-based) where the parser stopped, and its problem
    assert capsys.readouterr().err == (f"dense-encoders evaluate: error: {bad}:3:1: not valid YAML (expected ',' or "
                                       "']', but got '<stream end>')\n")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n "batch_size": 8,\n}\n')
    assert cli.main(["layerwise", "--config", str(bad_json)]) == 2
    assert f"{bad_json}:3:1: not valid JSON" in capsys.readouterr().err
    assert cli.main(["evaluate", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_out_of_memory_names_the_flag_to_lower(monkeypatch, capsys):
    def exhausted(argv):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setitem(cli.COMMANDS, "evaluate", exhausted)
    assert cli.main(["evaluate", "m", "d"]) == 3
    assert "out of memory" in (err := capsys.readouterr().err) and "--batch-size" in err

    def other_failure(argv):
        raise RuntimeError("something else")

    monkeypatch.setitem(cli.COMMANDS, "evaluate", other_failure)
    with pytest.raises(RuntimeError, match="something else"):
        cli.main(["evaluate", "m", "d"])


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_subcommand_has_help_with_examples(command, capsys):
    try:
        code = cli.main([command, "--help"])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 0
    assert "example" in capsys.readouterr().out.lower()


def test_unknown_command_and_listing(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert cli.main([]) == 0
    listing = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert command in listing


# ---------------------------------------------------------------------------- one flag convention


def underscored(argv: list[str]) -> list[str]:
    """``argv`` with every flag spelt as TrainingArguments spells it (``--output_dir``)."""
    return [token.replace("-", "_").replace("__", "--", 1) if token.startswith("--") else token for token in argv]


def comparable(parsed):
    """A parse result as plain data (TrainingArguments through to_dict)."""
    if isinstance(parsed, tuple):
        return [item.to_dict() if hasattr(item, "to_dict") else vars(item) for item in parsed]
    return vars(parsed)


SPELLING_CASES = {
    "pretrain": ["--max-seq-length", "48", "--output-dir", "runs/x", "--per-device-train-batch-size", "3",
                 "--no-late-mlm", "--use-cpu", "--lr-scheduler-kwargs", '{"min_lr_rate": 0.02}'],
    "distill": ["--student", "s", "--train-file", "t.jsonl", "--documents-per-query", "4", "--output-dir", "runs/x",
                "--query-max-length=16", "--overwrite-output-dir", "--report-to", "none"],
    "evaluate": ["model", "data", "--batch-size", "4", "--query-max-length", "8", "--no-progress", "--rerank-top-k=7"],
    "infuse": ["--cross-encoder", "ce", "--train-data", "d", "--output-dir", "runs/x", "--num-copied-layers", "2",
               "--also-random"],
}


@pytest.mark.parametrize("command", sorted(SPELLING_CASES))
def test_dashed_and_underscored_flags_parse_to_the_same_values(command):
    dashed = SPELLING_CASES[command]
    assert underscored(dashed) != dashed
    first, second = parse(cli.PARSERS[command](), dashed), parse(cli.PARSERS[command](), underscored(dashed))
    assert comparable(first) == comparable(second)
    if command == "pretrain":
        setup, args = first
        assert (setup.max_seq_length, setup.late_mlm, args.per_device_train_batch_size) == (48, False, 3)
        assert args.lr_scheduler_kwargs == {"min_lr_rate": 0.02} and args.output_dir == "runs/x"
    elif command == "distill":
        setup, args = first
        assert (setup.documents_per_query, setup.query_max_length, args.overwrite_output_dir) == (4, 16, True)
    elif command == "evaluate":
        args, positionals = first
        assert (args.batch_size, args.query_max_length, args.no_progress, args.rerank_top_k) == (4, 8, True, 7)
        assert (positionals.model, positionals.data) == ("model", "data")
    else:
        (args,) = first
        assert (args.num_copied_layers, args.also_random, args.output_dir) == (2, True, "runs/x")


def test_a_switch_before_a_positional_argument_leaves_it_positional():
    """A boolean field's flag takes an optional value (``--normalize false``), but a positional argument after it
    stays one: ``encode --normalize MODEL TEXTS`` (a ``store_true`` flag before the settings were dataclasses)."""
    options, positionals = parse(cli.PARSERS["encode"](), ["--normalize", "model", "texts", "--output", "o"])
    assert options.normalize is True and (positionals.model, positionals.texts) == ("model", "texts")
    options, positionals = parse(cli.PARSERS["encode"](), ["--normalize", "No", "model", "texts", "--output", "o"])
    assert options.normalize is False and (positionals.model, positionals.texts) == ("model", "texts")
    args, positionals = parse(cli.PARSERS["evaluate"](), ["--no-progress", "m", "d", "--trust-remote-code"])
    assert (args.no_progress, args.trust_remote_code, positionals.model, positionals.data) == (True, True, "m", "d")
    _, args = parse(cli.PARSERS["distill"](), ["--student", "s", "--train-file", "t", "--use-cpu", "--bf16", "False"])
    assert (args.use_cpu, args.bf16) == (True, False)


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_flag_of_every_subcommand_takes_both_spellings(command):
    parser = cli.PARSERS[command]()
    flags = {option: action for option, action in parser._option_string_actions.items() if option.startswith("--")}
    for option, action in flags.items():
        for spelling in (option.replace("-", "_").replace("__", "--", 1), "--" + option[2:].replace("_", "-")):
            (normalized,) = normalize_flags(parser, [spelling])
            assert parser._option_string_actions.get(normalized) is action, (option, spelling)
            assert normalize_flags(parser, [f"{spelling}=1"]) == [f"{normalized}=1"]
    # values and whatever follows `--` are never rewritten
    assert normalize_flags(parser, ["--", "--batch_size"]) == ["--", "--batch_size"]


def test_pretrain_help_lists_every_architecture_and_dashed_flags(capsys):
    from dense_encoders.trainer.pretraining import ARCHITECTURES

    assert cli.main(["pretrain", "--help"]) == 0
    out = capsys.readouterr().out
    assert "{" + ",".join(ARCHITECTURES) + "}" in out and "tite" in ARCHITECTURES
    assert "--output-dir OUTPUT_DIR" in out and "--per-device-train-batch-size" in out
    assert not re.search(r"--[a-z]+_[a-z_]+ [A-Z_]+", out)  # no underscored flag listed


def test_distill_help_shows_dashed_flags(capsys):
    assert cli.main(["distill", "--help"]) == 0  # help is printed by `main` (tests/test_cli_help.py), no SystemExit
    out = capsys.readouterr().out
    assert "--train-file TRAIN_FILE" in out and "--train_file TRAIN_FILE" not in out


# ---------------------------------------------------------------------------- one way to read --config


def write_config(path: Path, settings: dict) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(settings))
    else:
        import yaml

        path.write_text(yaml.safe_dump(settings))
    return path


CONFIG_CASES = {
    # a TrainingArguments command: underscore and dashed keys, a mapping value, a bool flag set false
    "distill": ({"student": "s", "train_file": "t.jsonl", "documents-per-query": 4, "per_device_train_batch_size": 2,
                 "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "remove_unused_columns": False, "report_to": ["none"],
                 "use_cpu": True, "resume_from_checkpoint": None},
                ["--student", "s", "--train-file", "t.jsonl", "--documents-per-query", "4",
                 "--per-device-train-batch-size", "2", "--lr-scheduler-kwargs", '{"min_lr_rate": 0.1}',
                 "--remove-unused-columns", "False", "--report-to", "none", "--use-cpu"]),
    # an argparse command: positionals under `args`, a switch on and one off
    "evaluate": ({"args": ["model", "data"], "batch_size": 8, "query-max-length": 16, "no_progress": True,
                  "allow_missing_weights": False, "layers": None},
                 ["model", "data", "--batch-size", "8", "--query-max-length", "16", "--no-progress"]),
}


@pytest.mark.parametrize("command", sorted(CONFIG_CASES))
def test_json_and_yaml_configs_read_the_same_as_flags(tmp_path, command):
    settings, flags = CONFIG_CASES[command]
    expected = comparable(parse(cli.PARSERS[command](), flags))
    for suffix in (".json", ".yaml", ".yml"):
        path = write_config(tmp_path / f"{command}{suffix}", settings)
        assert comparable(parse(cli.PARSERS[command](), ["--config", str(path)])) == expected, suffix
    # the command line wins over the file
    path = write_config(tmp_path / f"{command}-override.yaml", settings)
    parsed = parse(cli.PARSERS[command](), ["--config", str(path), "--batch_size" if command == "evaluate" else
                                            "--per_device_train_batch_size", "5"])
    assert (parsed[0].batch_size if command == "evaluate" else parsed[1].per_device_train_batch_size) == 5


def test_a_lone_config_file_is_the_config_of_a_command_without_positionals(tmp_path):
    settings, flags = CONFIG_CASES["distill"]
    path = write_config(tmp_path / "distill.yaml", settings)
    parser = cli.PARSERS["distill"]
    assert comparable(parse(parser(), [str(path)])) == comparable(parse(parser(), flags))
    # evaluate takes positionals: a lone .yaml is its MODEL, not a config
    assert cli.expand_config_file("evaluate", ["model.yaml"]) == ["model.yaml"]


def test_config_keys_that_are_no_flags_are_refused(tmp_path, capsys):
    path = write_config(tmp_path / "typo.yaml", {"args": ["m", "d"], "batch_sise": 8})
    assert cli.main(["evaluate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'batch_sise' is not a flag" in err


def test_python_dash_m_runs_the_command_line(tmp_path):
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"))
    result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "score-teacher" in result.stdout and "--output-dir" in result.stdout
