"""One run per output folder: refusing a used folder, --overwrite_output_dir, resuming, JSON training arguments."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from dense_encoders.cli import main
from dense_encoders.trainer.output_dir import (
    DASHED_FLAGS,
    OutputDirError,
    check_output_dir,
    missing_resume_state,
    prepare_output_dir,
)


@pytest.fixture
def student_folder(tmp_path, tok):
    torch.manual_seed(0)
    folder = tmp_path / "student"
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def pretrain_argv(corpus, output, *extra, steps=2):
    return ["pretrain", "condenser", "--corpus", str(corpus), "--output_dir", str(output), "--max_steps", str(steps),
            "--per_device_train_batch_size", "2", "--save_strategy", "steps", "--save_steps", "1", "--use_cpu",
            "--report_to", "none", "--max_seq_length", "32", "--logging_steps", "1", "--disable_tqdm", "True", *extra]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_json_args_and_no_pickle(folder: Path, learning_rate: float) -> None:
    saved = json.loads((folder / "training_args.json").read_text())
    assert saved["learning_rate"] == learning_rate
    assert not (folder / "training_args.bin").exists()


def test_pretrain_refuses_a_used_folder_then_overwrites_it(tmp_path, small_corpus, capsys):
    output = tmp_path / "run"
    assert main(pretrain_argv(small_corpus, output, steps=3)) == 0
    assert {"checkpoint-1", "checkpoint-2", "checkpoint-3"} <= {p.name for p in output.iterdir()}
    assert_json_args_and_no_pickle(output, 1e-4)
    for checkpoint in ("checkpoint-1", "checkpoint-3"):
        assert_json_args_and_no_pickle(output / checkpoint, 1e-4)
    (output / "modeling_tite.py").write_text("# a remote-code file of an earlier TITE run\n")
    before = snapshot(output)

    # a second run into the used folder stops with a message before loading anything, the folder untouched
    capsys.readouterr()
    assert main(pretrain_argv(small_corpus, output, "--learning_rate", "3e-4", steps=2)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "Traceback" not in err
    assert f"{output} is not empty" in err and "--overwrite_output_dir" in err
    assert f"--resume_from_checkpoint {output / 'checkpoint-3'}" in err
    assert snapshot(output) == before

    # --overwrite_output_dir: no stale checkpoint or remote code of the earlier run survives
    assert main(pretrain_argv(small_corpus, output, "--learning_rate", "3e-4", "--overwrite_output_dir", steps=2)) == 0
    names = {p.name for p in output.iterdir()}
    assert {"checkpoint-1", "checkpoint-2", "modeling_condenser.py"} <= names
    assert "checkpoint-3" not in names and "modeling_tite.py" not in names
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 2
    assert_json_args_and_no_pickle(output, 3e-4)


def test_a_refused_run_creates_nothing(tmp_path, small_corpus, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "elsewhere" / "checkpoint-1"
    elsewhere.mkdir(parents=True)
    (elsewhere / "trainer_state.json").write_text("{}")
    # resuming another folder's checkpoint into a used folder would mix two runs
    assert main(pretrain_argv(small_corpus, used, "--resume_from_checkpoint", str(elsewhere))) == 2
    assert "lies outside it" in capsys.readouterr().err
    assert [p.name for p in used.iterdir()] == ["notes.txt"]
    # resume 'latest' with nothing to resume, and a checkpoint that does not exist: messages, no folder made
    missing = tmp_path / "new"
    assert main(pretrain_argv(small_corpus, missing, "--resume_from_checkpoint", "latest")) == 2
    assert "holds no checkpoint-N folder" in capsys.readouterr().err
    assert main(pretrain_argv(small_corpus, missing, "--resume_from_checkpoint", str(tmp_path / "nope"))) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not missing.exists()


def test_overwrite_never_deletes_what_the_run_needs(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (run / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(OutputDirError, match="the checkpoint --resume_from_checkpoint resumes from"):
        check_output_dir(run, overwrite=True, resume_from_checkpoint="latest")
    with pytest.raises(OutputDirError, match="which this run reads"):
        check_output_dir(run, overwrite=True, inputs=[run / "corpus.jsonl"])
    monkeypatch.chdir(run)
    with pytest.raises(OutputDirError, match="holds the current directory"):
        check_output_dir(".", overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-2", "corpus.jsonl"]
    # resuming the run that stopped here needs no flag; 'latest' is its newest checkpoint
    assert check_output_dir(run, resume_from_checkpoint="latest") == run / "checkpoint-2"
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputDirError, match="is a file"):
        check_output_dir(tmp_path / "file")


def test_dashed_commands_name_their_own_flags(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "report.json").write_text("{}")
    with pytest.raises(OutputDirError) as refused:
        prepare_output_dir(folder, flags=DASHED_FLAGS)
    assert "--overwrite-output-dir" in str(refused.value) and "choose another --output-dir" in str(refused.value)
    prepare_output_dir(folder, overwrite=True, flags=DASHED_FLAGS)
    assert folder.is_dir() and not any(folder.iterdir())


def test_resume_warns_about_missing_state_and_continues(tmp_path, small_corpus, caplog):
    output = tmp_path / "run"
    assert main(pretrain_argv(small_corpus, output, steps=2)) == 0
    checkpoint = output / "checkpoint-1"
    assert missing_resume_state(checkpoint) == []
    (checkpoint / "optimizer.pt").unlink()
    assert missing_resume_state(checkpoint) == ["optimizer.pt"]
    with caplog.at_level(logging.WARNING, logger="dense_encoders.trainer.output_dir"):
        assert main(pretrain_argv(small_corpus, output, "--resume_from_checkpoint", str(checkpoint), steps=3)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "dense_encoders.trainer.output_dir"]
    assert len(warnings) == 1 and "optimizer.pt" in warnings[0] and "\n" not in warnings[0]
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 3
    assert (output / "checkpoint-3").is_dir()


def test_distill_refuses_a_used_folder_and_writes_json_arguments(tmp_path, student_folder, capsys):
    train_file = tmp_path / "train.jsonl"
    records = [{"query": f"query {q}", "documents": [f"passage {q} {d}" for d in range(3)], "scores": [3.0, 1.0, 0.0]}
               for q in range(4)]
    train_file.write_text("".join(json.dumps(record) + "\n" for record in records))
    output = tmp_path / "distilled"
    argv = ["distill", "--student", str(student_folder), "--train_file", str(train_file), "--output_dir", str(output),
            "--losses", "margin_mse", "--pooling", "cls", "--documents_per_query", "3", "--max_steps", "1",
            "--learning_rate", "0.5", "--per_device_train_batch_size", "4", "--save_strategy", "steps",
            "--save_steps", "1", "--use_cpu", "--disable_tqdm", "True"]
    assert main(argv) == 0
    assert_json_args_and_no_pickle(output, 0.5)
    assert_json_args_and_no_pickle(output / "checkpoint-1", 0.5)
    before = snapshot(output)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{output} is not empty" in err and "--overwrite_output_dir" in err and "--resume_from_checkpoint" in err
    assert snapshot(output) == before
    (output / "modeling_condenser.py").write_text("# stale\n")
    assert main(argv + ["--overwrite_output_dir"]) == 0
    assert not (output / "modeling_condenser.py").exists()
    assert_json_args_and_no_pickle(output, 0.5)


def test_infuse_refuses_a_used_folder_and_writes_json_arguments(tmp_path, tok, capsys):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    cross_encoder = tmp_path / "ce"
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                             num_labels=1)).save_pretrained(cross_encoder)
    tok.save_pretrained(cross_encoder)
    words = "protein cell gene virus drug trial cancer heart brain immune bacteria vaccine".split()
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": " ".join(
        words[(i + j) % len(words)] for j in range(6))}) + "\n" for i in range(12)))
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": words[i]}) + "\n"
                                                for i in range(6)))
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                              + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    output = tmp_path / "de-2"
    argv = ["infuse", "--cross-encoder", str(cross_encoder), "--train-data", str(data), "--output-dir", str(output),
            "--epochs", "1", "--batch-size", "4", "--max-length", "16", "--candidates", "5", "--learning-rate", "1e-4"]
    assert main(argv) == 0
    assert_json_args_and_no_pickle(output, 1e-4)
    assert not list(output.rglob("*.bin"))
    before = snapshot(output)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{output} is not empty" in err and "--overwrite-output-dir" in err and "--output-dir" in err
    assert snapshot(output) == before
    # the inputs may not lie in the folder --overwrite-output-dir clears
    assert main(argv[:4] + [str(cross_encoder)] + argv[5:] + ["--overwrite-output-dir", "--train-data",
                                                              str(output / "initial")]) == 2
    assert "which this run reads" in capsys.readouterr().err
    assert snapshot(output) == before


def test_quickstart_reuses_only_its_own_output(tmp_path):
    from dense_encoders.quickstart import MARKER, QuickstartSettings, prepare_quickstart_output

    output = tmp_path / "quickstart"
    settings = QuickstartSettings(epochs=0.1)
    prepare_quickstart_output(output, settings)  # new: created, settings recorded
    (output / "teacher-scores.jsonl").write_text("{}\n")
    prepare_quickstart_output(output, settings)  # its own earlier output: the caches stay
    assert (output / "teacher-scores.jsonl").is_file()
    with pytest.raises(OutputDirError, match=r"other settings \(epochs 0.1 -> 2.0\)"):
        prepare_quickstart_output(output, QuickstartSettings(epochs=2.0))
    prepare_quickstart_output(output, QuickstartSettings(epochs=2.0), overwrite=True)
    assert [p.name for p in output.iterdir()] == [MARKER]
    other = tmp_path / "pretrained"
    other.mkdir()
    (other / "config.json").write_text("{}")
    with pytest.raises(OutputDirError, match="--overwrite-output-dir"):
        prepare_quickstart_output(other, settings)
    assert [p.name for p in other.iterdir()] == ["config.json"]
    assert main(["quickstart", "--output-dir", str(other), "--epochs", "0.1"]) == 2
