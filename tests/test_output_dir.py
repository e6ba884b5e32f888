"""One run per output folder: refusing a used folder, --overwrite_output_dir, resuming, JSON training arguments."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, cpu_only_env, float32_atol
from safetensors.torch import load_file
from transformers import BertConfig, BertModel

import dense_encoders.data.run_lock as run_lock_module
from dense_encoders.cli import main
from dense_encoders.trainer.output_dir import (
    DASHED_FLAGS,
    OutputDirError,
    OutputDirLock,
    check_output_dir,
    checkpoint_problem,
    latest_checkpoint,
    local_lock_file,
    lock_file,
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
    assert "--resume_from_checkpoint latest to continue that run (from checkpoint-3)" in err
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
    (run / "checkpoint-2" / "model.safetensors").write_bytes(b"")  # what a complete checkpoint has
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
    # refused by the check every command runs before it writes (cli.checks.check_outputs), before the overwrite
    assert f"holds --train-data {output / 'initial'}, which this command reads" in capsys.readouterr().err
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


# ---- one run at a time: the folder's lock -----------------------------------------------------------------


def cli_process(argv: list[str], **popen) -> subprocess.Popen:
    """``dense-encoders ARGV`` in a fresh interpreter (its PID is the run's), one thread, no GPU."""
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "dense_encoders.cli", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def wait_for_lock(folder: Path, process: subprocess.Popen, timeout: float = 240) -> dict:
    """The lock record of ``folder`` once ``process`` holds it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            record = json.loads(lock_file(folder).read_text() or "null")
        except (FileNotFoundError, json.JSONDecodeError):
            record = None
        if record and record.get("pid") == process.pid:
            return record
        time.sleep(0.05)
    raise AssertionError(f"{process.pid} did not lock {folder} within {timeout} s")


def model_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.mark.slow
def test_a_second_run_into_a_running_runs_folder_is_refused_with_its_pid(tmp_path, small_corpus, capsys):
    output, reference = tmp_path / "run", tmp_path / "reference"
    first = cli_process(pretrain_argv(small_corpus, output, "--seed", "1", steps=3))
    alone = cli_process(pretrain_argv(small_corpus, reference, "--seed", "1", steps=3))  # the same run, undisturbed
    record = wait_for_lock(output, first)
    assert record["pid"] == first.pid
    assert lock_file(output) == tmp_path / ".run.lock"  # beside the folder: never saved, uploaded or cleared with it
    os.kill(first.pid, signal.SIGSTOP)  # the first run is certainly running while the second one starts
    try:
        before = snapshot(output) if output.is_dir() else {}
        capsys.readouterr()
        assert main(pretrain_argv(small_corpus, output, "--seed", "2", steps=3)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{output} is in use by another run (PID {first.pid} on " in err and "choose another --output_dir" in err
        # --overwrite_output_dir deletes nothing of a running run either
        assert main(pretrain_argv(small_corpus, output, "--seed", "2", "--overwrite_output_dir", steps=3)) == 2
        assert f"PID {first.pid}" in capsys.readouterr().err
        assert (snapshot(output) if output.is_dir() else {}) == before
    finally:
        os.kill(first.pid, signal.SIGCONT)
    for process in (first, alone):
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    # the first run finished undisturbed: its seed's model, bit for bit that of the same run elsewhere
    assert json.loads((output / "training_args.json").read_text())["seed"] == 1
    mine, expected = model_weights(output), model_weights(reference)
    assert mine.keys() == expected.keys()
    assert all(torch.equal(mine[name], expected[name]) for name in expected)
    assert not lock_file(output).exists()  # released and removed at the end of the run


@pytest.mark.slow
def test_a_killed_runs_lock_does_not_block_the_next_run(tmp_path, small_corpus, capsys):
    output = tmp_path / "run"
    code = ("import sys, time\nfrom dense_encoders.trainer.output_dir import OutputDirLock\n"
            "OutputDirLock(sys.argv[1]).acquire()\nprint('locked', flush=True)\ntime.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(output)], stdout=subprocess.PIPE, text=True,
                              env=cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src")))
    try:
        assert holder.stdout.readline().strip() == "locked"
        capsys.readouterr()
        assert main(pretrain_argv(small_corpus, output, steps=1)) == 2
        assert f"PID {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL left the lock file with the dead PID behind; the kernel dropped the lock itself
    assert json.loads(lock_file(output).read_text())["pid"] == holder.pid
    assert main(pretrain_argv(small_corpus, output, steps=1)) == 0
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 1
    assert not lock_file(output).exists()


def test_the_lock_is_per_open_folder_and_falls_back_to_this_machine(tmp_path, monkeypatch):
    folder = tmp_path / "new" / "run"
    first = OutputDirLock(folder).acquire()
    assert lock_file(folder) == tmp_path / "new" / ".run.lock" and not folder.exists()
    with pytest.raises(OutputDirError, match=rf"in use by another run \(PID {os.getpid()} on "):
        OutputDirLock(str(folder) + "/../run").acquire()  # the same folder, spelled otherwise
    first.release()
    assert not (tmp_path / "new").exists()  # the folder made for the lock file went with it
    OutputDirLock(folder).acquire().release()

    # a parent this user cannot write: the lock lives in this machine's temporary folder
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if mode == os.W_OK else real_access(path, mode))
    assert lock_file(folder) == local_lock_file(folder)
    monkeypatch.undo()
    # a filesystem that cannot lock (flock: ENOLCK): the same, with a warning
    real_flock, refused = run_lock_module.fcntl.flock, []

    def flock(fd, operation):
        if not refused:
            refused.append(fd)
            raise OSError(errno.ENOLCK, "No locks available")
        return real_flock(fd, operation)

    monkeypatch.setattr(run_lock_module.fcntl, "flock", flock)
    lock = OutputDirLock(folder).acquire()
    assert lock.path == local_lock_file(folder) and json.loads(lock.path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock.path.exists()


def test_a_planted_link_at_the_lock_path_is_refused_and_its_target_kept(tmp_path, small_corpus, capsys):
    """A link at ``.run.lock`` (anyone who can write the parent can plant one) must not let the run write through it:
    the run is refused in one line, before anything is made, and the link and its target stay as they were."""
    runs = tmp_path / "runs"
    runs.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (runs / ".out.lock").symlink_to(precious)
    capsys.readouterr()
    assert main(pretrain_argv(small_corpus, runs / "out", steps=1)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{runs / '.out.lock'}, the lock file of {runs / 'out'}, is a symbolic link" in err
    assert precious.read_text() == "precious\n"
    assert (runs / ".out.lock").is_symlink() and os.readlink(runs / ".out.lock") == str(precious)
    assert sorted(p.name for p in runs.iterdir()) == [".out.lock"]  # no output folder was made


def test_the_lock_never_writes_into_a_file_it_did_not_make(tmp_path):
    folder = tmp_path / "run"
    path = lock_file(folder)
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    cases = {
        "is a symbolic link": lambda: path.symlink_to(target),
        "is a symbolic link ": lambda: path.symlink_to(tmp_path / "missing"),  # dangling: O_CREAT would make it
        "has 2 names (a hard link)": lambda: os.link(target, path),
        "is not a regular file": lambda: os.mkfifo(path),
        "is not a regular file ": lambda: path.mkdir(),
        "is not a lock file a run wrote": lambda: path.write_text('{"pid": 1}'),
    }
    for problem, plant in cases.items():
        plant()
        refusal = re.escape(f"lock file of {folder}, {problem.strip()}: nothing was written")
        with pytest.raises(OutputDirError, match=refusal):
            OutputDirLock(folder).acquire()
        assert target.read_text() == "keep me" and not (tmp_path / "missing").exists()
        assert os.path.lexists(path)  # left as it was
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    # a lock file a killed run left (its record, or nothing at all) is replaced by a new file, not written into
    for leftover in ('{"pid": 1, "host": "h", "started": "2026-01-01T00:00:00"}', ""):
        path.write_text(leftover)
        kept = os.open(path, os.O_RDONLY)  # the old file stays readable through this: it must not change
        try:
            lock = OutputDirLock(folder).acquire()
            assert os.pread(kept, 4096, 0).decode() == leftover
            assert json.loads(path.read_text())["pid"] == os.getpid()
            assert os.fstat(kept).st_nlink == 0  # the old file's name was removed; the new one is another file
            lock.release()
        finally:
            os.close(kept)
        assert not path.exists()


def test_the_local_lock_folder_must_be_this_users_own(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock_module.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(run_lock_module, "lock_file", run_lock_module.local_lock_file)
    folder = tmp_path / "work" / "run"
    shared = local_lock_file(folder).parent
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shared.symlink_to(elsewhere)  # planted by someone else in the shared temporary folder
    with pytest.raises(OutputDirError, match="is not a folder only this user can write"):
        OutputDirLock(folder).acquire()
    assert list(elsewhere.iterdir()) == []
    shared.unlink()
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(OutputDirError, match="is not a folder only this user can write"):
        OutputDirLock(folder).acquire()
    shared.rmdir()
    lock = OutputDirLock(folder).acquire()
    assert lock.path.parent == shared and stat.S_IMODE(os.lstat(shared).st_mode) & 0o077 == 0
    lock.release()


# ---- resuming from the last complete checkpoint ------------------------------------------------------------


def test_resume_latest_skips_checkpoints_killed_while_being_saved(tmp_path, small_corpus, caplog, capsys):
    output = tmp_path / "run"
    assert main(pretrain_argv(small_corpus, output, steps=5)) == 0
    uninterrupted = model_weights(output)
    assert all(checkpoint_problem(output / f"checkpoint-{step}") is None for step in range(1, 6))
    # killed while saving checkpoint-5: the Trainer writes trainer_state.json last, so there is none
    (output / "checkpoint-5" / "trainer_state.json").unlink()
    # killed while writing checkpoint-4's trainer_state.json; checkpoint-3's weights went missing
    state = output / "checkpoint-4" / "trainer_state.json"
    state.write_text(state.read_text()[:40])
    (output / "checkpoint-3" / "model.safetensors").unlink()
    shutil.rmtree(output / "checkpoint-1")  # a fresh start would save it again
    with caplog.at_level(logging.WARNING, logger="dense_encoders.trainer.output_dir"):
        assert main(pretrain_argv(small_corpus, output, "--resume_from_checkpoint", "latest", steps=5)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "dense_encoders.trainer.output_dir"]
    assert warnings == [(
        "--resume_from_checkpoint latest: skipping the incomplete checkpoint-3 (no model weights (model.safetensors)), "
        "checkpoint-4 (trainer_state.json is cut off or unreadable), checkpoint-5 (no trainer_state.json) (killed "
        f"while saving?); resuming from {output / 'checkpoint-2'}")]
    # it resumed from checkpoint-2 and ended where the uninterrupted run ended, checkpoints 3 to 5 complete again
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [f"checkpoint-{step}" for step in range(2, 6)]
    assert all(checkpoint_problem(output / f"checkpoint-{step}") is None for step in range(2, 6))
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 5
    resumed = model_weights(output)
    for name, value in uninterrupted.items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=float32_atol(value), msg=name)

    # a named incomplete checkpoint, and 'latest' with none complete: one line each, nothing trained
    (output / "checkpoint-5" / "model.safetensors").unlink()
    capsys.readouterr()
    assert main(pretrain_argv(small_corpus, output, "--resume_from_checkpoint", str(output / "checkpoint-5"),
                              steps=5)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint-5: incomplete checkpoint (no model weights (model.safetensors)" in err
    for step in range(2, 5):
        (output / f"checkpoint-{step}" / "trainer_state.json").unlink()
    assert main(pretrain_argv(small_corpus, output, "--resume_from_checkpoint", "latest", steps=5)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no complete checkpoint-N folder (checkpoint-2 (no trainer_state.json)" in err


def fake_checkpoint(folder: Path, *rng_states: str) -> Path:
    """A checkpoint-N as the Trainer leaves it: weights, optimizer, scheduler, the named RNG states, state last."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    for name in ("optimizer.pt", "scheduler.pt", *rng_states):
        torch.save({"state": torch.zeros(1)}, folder / name)  # tensors only, as weights-only loading reads them
    (folder / "trainer_state.json").write_text("{}")
    return folder


def test_latest_skips_a_checkpoint_that_another_process_did_not_finish(tmp_path):
    """Each process of a torchrun saves its own rng_state_<rank>.pth, and rank 0 writes trainer_state.json without
    waiting for the others: a checkpoint of a 2-process run without rng_state_1.pth was cut off while process 1
    saved it. 'latest' of a 2-process run skips it; a run on one process, or on more processes than wrote every
    checkpoint (the world size changed: warned about, not skipped), judges it as before."""
    run = tmp_path / "run"
    two = fake_checkpoint(run / "checkpoint-2", "rng_state_0.pth", "rng_state_1.pth")
    four = fake_checkpoint(run / "checkpoint-4", "rng_state_0.pth")  # process 1 was killed while saving
    assert checkpoint_problem(four, world_size=2) == (
        "no rng_state_1.pth: process 1 was stopped before it saved its random state")
    assert checkpoint_problem(four) is None and checkpoint_problem(two, world_size=2) is None
    assert latest_checkpoint([two, four], world_size=2) == (two, 2)
    assert latest_checkpoint([two, four], world_size=1) == (four, 1)
    # resumed on 4 processes: no checkpoint holds 4 RNG states, so none is skipped for lacking them
    assert latest_checkpoint([two, four], world_size=4) == (four, 1)
    # a one-process checkpoint (rng_state.pth) resumed on 2 processes: nothing per process to miss
    one = fake_checkpoint(tmp_path / "single" / "checkpoint-3", "rng_state.pth")
    assert checkpoint_problem(one, world_size=2) is None
    assert check_output_dir(run, resume_from_checkpoint="latest", world_size=2) == two
    assert check_output_dir(run, resume_from_checkpoint="latest") == four


def test_max_steps_zero_is_refused(tmp_path, small_corpus, capsys):
    for steps in ("0", "-2"):
        assert main(pretrain_argv(small_corpus, tmp_path / "run", steps=steps)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--max_steps {steps}: give a number of optimizer steps >= 1" in err
    assert not (tmp_path / "run").exists()
