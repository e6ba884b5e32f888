"""``dense-encoders convert``'s output folder: what ``--overwrite`` may replace, the staging folder that a failed,
terminated or killed conversion leaves no trace of, a full disk, and what the record says of the source.

The sources are luyug/Condenser output folders built from the documented format (``write_reference_folder``
of ``test_convert_condenser``); the interrupted conversions run in a real ``dense-encoders convert`` process
that is signalled once its staging folder exists.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cpu_only_env
from filelock import FileLock
from test_cli_errors import assert_one_message, run_main
from test_convert_condenser import write_reference_folder

from dense_encoders.checkpoints import convert as convert_module
from dense_encoders.checkpoints import convert_checkpoint


@pytest.fixture
def source(tmp_path, tok) -> Path:
    """A headless luyug/Condenser folder (a Hub copy): the quickest source to convert."""
    return write_reference_folder(tmp_path / "src", tok, head_layers=None)


def _snapshot(folder: Path) -> dict[str, bytes | str | None]:
    """Every entry below ``folder`` with its content (``None`` for folders, the target for links): to show that
    nothing was deleted or changed."""
    def content(path: Path):
        return os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()

    return {str(p.relative_to(folder)): content(p) for p in sorted(folder.rglob("*"))}


def _staging_folders(parent: Path) -> list[Path]:
    return sorted(p for p in parent.iterdir() if ".converting-" in p.name)


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if the conversion starts: reading the source is the first thing it does."""
    def started(*args, **kwargs):
        raise AssertionError("the conversion started before the output folder was refused")

    monkeypatch.setattr(convert_module, "resolve_source", started)


# ---------------------------------------------------------------------------- item 1: what --overwrite may delete


def test_overwrite_never_empties_the_current_directory(tmp_path, source, monkeypatch, capsys, no_work):
    """The issue's case: `cd work; dense-encoders convert ../src . --overwrite` deleted everything in work/."""
    work = tmp_path / "work"
    (work / "notes").mkdir(parents=True)
    (work / "results.tsv").write_text("q1\t0.5\n")
    (work / "notes" / "todo.md").write_text("- run the baseline\n")
    (work / "conversion.json").write_text(json.dumps({"source_format": "condenser-reference"}))  # even then
    before = _snapshot(work)
    monkeypatch.chdir(work)
    assert_one_message(capsys, run_main(["convert", "../src", ".", "--overwrite"]), 2,
                       ". is the current directory", "give a new folder")
    monkeypatch.chdir(work / "notes")  # a folder holding the current directory
    assert_one_message(capsys, run_main(["convert", "../../src", str(work), "--overwrite"]), 2,
                       f"holds the current directory {work / 'notes'}")
    assert _snapshot(work) == before and _staging_folders(tmp_path) == []


def test_overwrite_refuses_a_folder_no_conversion_wrote_and_names_its_files(tmp_path, source, capsys, no_work):
    thesis = tmp_path / "thesis"
    (thesis / "data").mkdir(parents=True)
    (thesis / "thesis.tex").write_text("\\documentclass{article}\n")
    (thesis / "data" / "runs.trec").write_text("q1 Q0 d1 1 2.0 bm25\n")
    before = _snapshot(thesis)
    err = assert_one_message(capsys, run_main(["convert", str(source), str(thesis), "--overwrite"]), 2,
                             f"--overwrite would delete what {thesis} holds (data/, thesis.tex)",
                             "no conversion.json", "give a new folder")
    assert "Traceback" not in err
    assert_one_message(capsys, run_main(["convert", str(source), str(thesis)]), 2,  # without the flag too
                       f"{thesis} exists and is not empty (data/, thesis.tex; no conversion wrote it)")
    assert _snapshot(thesis) == before and _staging_folders(tmp_path) == []


def test_overwrite_replaces_an_earlier_conversion(tmp_path, source, tok, capsys):
    out = tmp_path / "out"
    assert run_main(["convert", str(source), str(out)]) == 0
    first = json.loads((out / "conversion.json").read_text())
    assert_one_message(capsys, run_main(["convert", str(source), str(out)]), 2,
                       "pass --overwrite to replace that conversion")
    other = write_reference_folder(tmp_path / "run", tok)  # a Condenser run with its head this time
    assert run_main(["convert", str(other), str(out), "--overwrite"]) == 0
    second = json.loads((out / "conversion.json").read_text())
    assert (first["architecture"], second["architecture"]) == ("CondenserModel", "CondenserForPreTraining")
    assert second["source"] == "run" and _staging_folders(tmp_path) == []


@pytest.mark.parametrize("protected", ["home", "filesystem root"])
def test_overwrite_never_replaces_the_home_folder_or_a_filesystem_root(tmp_path, source, monkeypatch, capsys,
                                                                        protected, no_work):
    folder = tmp_path / "place"
    folder.mkdir()
    (folder / "conversion.json").write_text(json.dumps({"source_format": "condenser-reference"}))
    (folder / ".bashrc").write_text("export PATH\n")
    if protected == "home":
        monkeypatch.setenv("HOME", str(folder))
    else:  # a mount point stands in for "/" (the test must not touch the real one)
        real, root = os.path.ismount, folder.resolve()
        monkeypatch.setattr(convert_module.os.path, "ismount", lambda path: Path(path) == root or real(path))
    before = _snapshot(folder)
    assert_one_message(capsys, run_main(["convert", str(source), str(folder), "--overwrite"]), 2,
                       f"--overwrite would delete everything in {folder}", protected.split()[-1])
    assert _snapshot(folder) == before


@pytest.mark.parametrize("kind", ["file", "symlink to a conversion", "dangling symlink"])
def test_an_output_that_is_a_file_or_a_link_is_refused_before_any_work(tmp_path, source, capsys, kind, no_work):
    """Before: the whole conversion ran, then failed with `Not a directory` or `Cannot call rmtree on a symbolic
    link`; now nothing starts (``no_work``) and the file, the link and its target stay as they were."""
    target = tmp_path / "earlier"
    target.mkdir()
    (target / "conversion.json").write_text(json.dumps({"source_format": "condenser-reference"}))
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("my notes\n")
        expected = f"{out} is a file, not a folder"
    else:
        out.symlink_to(target if kind == "symlink to a conversion" else tmp_path / "nowhere")
        expected = f"{out} is a symbolic link (to {os.readlink(out)})"
    before = _snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):
        assert_one_message(capsys, run_main(["convert", str(source), str(out), *extra]), 2, expected)
    assert _snapshot(tmp_path) == before and out.is_symlink() == (kind != "file")


# ---------------------------------------------------------------------------- item 13: the staging folder


def _interrupted_conversion(source: Path, out: Path, signal_number: int, attempts: int = 3):
    """Start `dense-encoders convert SOURCE OUT` in a process, send it ``signal_number`` as soon as its staging
    folder exists, and return (return code, stderr, the staging folder seen). The staging folder lives for the
    whole conversion (model built, weights and tokenizer written, card made); should the signal still land
    after the process finished (a very fast machine), the attempt is repeated with a new OUT."""
    for attempt in range(attempts):
        target = out.with_name(f"{out.name}-{attempt}")
        process = subprocess.Popen([sys.executable, "-m", "dense_encoders.cli", "convert", str(source), str(target)],
                                   env=cpu_only_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []
        deadline = time.monotonic() + 300
        while process.poll() is None and not seen and time.monotonic() < deadline:
            seen = _staging_folders(target.parent)
            if not seen:
                time.sleep(0.001)
        if seen and process.poll() is None:
            process.send_signal(signal_number)
        _, stderr = process.communicate(timeout=300)
        if process.returncode != 0:
            return target, process.returncode, stderr, seen
    pytest.fail(f"the conversion finished before the signal in {attempts} attempts")


def test_sigterm_removes_the_staging_folder(tmp_path, source):
    out, code, stderr, seen = _interrupted_conversion(source, tmp_path / "out", signal.SIGTERM)
    assert seen and seen[0].name.startswith(f".{out.name}.converting-"), seen
    assert code == -signal.SIGTERM, stderr  # the process still ends by SIGTERM, as without the handler
    assert "Traceback" not in stderr
    assert _staging_folders(tmp_path) == [] and not out.exists()


def test_a_later_conversion_removes_the_staging_folders_of_killed_runs_only(tmp_path, source):
    out, code, stderr, seen = _interrupted_conversion(source, tmp_path / "out", signal.SIGKILL)
    assert code == -signal.SIGKILL, stderr
    killed = _staging_folders(tmp_path)
    assert killed == seen and not out.exists()  # SIGKILL cannot be caught: the folder stays behind ...
    assert killed[0].name.startswith(f".{out.name}.converting-")
    # ... beside the staging folder of a conversion still running (it holds its lock) and one whose process lives
    running = tmp_path / f".{out.name}.converting-{os.getpid()}-running"
    running.mkdir()
    lock = FileLock(running / convert_module.STAGING_LOCK)
    lock.acquire()
    just_started = tmp_path / f".{out.name}.converting-{os.getppid()}-started"  # no lock file yet, owner alive
    just_started.mkdir()
    try:
        convert_checkpoint(source, out)
    finally:
        lock.release()
    assert _staging_folders(tmp_path) == sorted([running, just_started])  # the killed run's is gone
    assert json.loads((out / "conversion.json").read_text())["architecture"] == "CondenserModel"


def test_a_failed_conversion_removes_the_staging_folder(tmp_path, tok):
    source = write_reference_folder(tmp_path / "src", tok)
    (source / "model.pt").write_bytes(b"not a torch file")  # refused inside the conversion, after staging began
    with pytest.raises(ValueError, match="model.pt is not a plain dict of tensors"):
        convert_checkpoint(source, tmp_path / "out")
    assert _staging_folders(tmp_path) == [] and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- item 11: a full disk


def _weights_device_full(monkeypatch):
    """safetensors' writer on a full disk: its own error type, with the OS error in the text."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)


def _record_device_full(monkeypatch):
    """An ordinary Python write (conversion.json, through data.files) on a full disk: OSError ENOSPC."""
    import dense_encoders.data.files as files

    write_bytes = files.atomic_write_bytes

    def full(path, *args, **kwargs):
        if Path(path).name == "conversion.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_bytes(path, *args, **kwargs)

    monkeypatch.setattr(files, "atomic_write_bytes", full)


@pytest.mark.parametrize("fill", [_weights_device_full, _record_device_full])
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, source, monkeypatch, capsys, fill):
    fill(monkeypatch)
    out = tmp_path / "out"
    assert_one_message(capsys, run_main(["convert", str(source), str(out)]), 2,
                       f"no space left on the device of {tmp_path} while writing {out}", "free space there",
                       "choose another OUT")
    assert not out.exists() and _staging_folders(tmp_path) == []


# ---------------------------------------------------------------------------- item 16: no local paths recorded


def test_the_record_and_the_card_name_a_local_source_by_its_folder_name_only(tmp_path, source):
    out = convert_checkpoint(source, tmp_path / "out")
    record = json.loads((out / "conversion.json").read_text())
    assert record["source"] == "src" and "source_revision" not in record
    card = (out / "README.md").read_text()
    assert "Converted from a local folder named `src`" in card
    for text in ((out / "conversion.json").read_text(), card):
        assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text
