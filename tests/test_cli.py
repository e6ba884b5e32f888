"""The dense-encoders command line: shared conventions (config files, help, errors, memory hints)."""

from __future__ import annotations

import json

import pytest
import torch

from dense_encoders import cli


def test_config_file_becomes_flags_that_the_command_line_overrides(tmp_path):
    yaml_file = tmp_path / "evaluate.yaml"
    yaml_file.write_text("args: [model-dir, data-dir]\nbatch_size: 8\nno_progress: true\nquiet: false\n")
    argv = cli.expand_config_file("evaluate", ["--config", str(yaml_file), "--batch-size", "4"])
    assert argv == ["model-dir", "data-dir", "--batch-size", "8", "--no-progress", "--batch-size", "4"]
    json_file = tmp_path / "distill.json"
    json_file.write_text(json.dumps({"student": "s", "losses": "kl", "use_cpu": True, "bf16": False,
                                     "report_to": ["none"]}))
    argv = cli.expand_config_file("distill", ["--config", str(json_file)])
    assert argv == ["--student", "s", "--losses", "kl", "--use_cpu", "--bf16", "False", "--report_to", "none"]
    # a leading positional of the command line (pretrain's architecture) stays first
    assert cli.expand_config_file("pretrain", ["tite", "--config", str(json_file)])[0] == "tite"


def test_config_file_errors_name_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: 8\nlayers: [1\n")
    assert cli.main(["evaluate", "--config", str(bad)]) == 2
    assert f"{bad}:" in capsys.readouterr().err
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n "batch_size": 8,\n}\n')
    assert cli.main(["layerwise", "--config", str(bad_json)]) == 2
    assert f"{bad_json}:3: not valid JSON" in capsys.readouterr().err
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
