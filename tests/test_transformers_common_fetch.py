"""Where transformers' common model tests come from (``tests/transformers_common/fetch.py``): the two files out of
the source distribution pip downloads, kept in the user cache whole or not at all, fetched once; and without them
``tests/test_transformers_common.py`` skips, naming the command that fetches them. pip is a stand-in here: these
tests use no network."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cpu_only_env
from transformers_common import fetch

VERSION = "9.9.9"
SOURCES = {"test_modeling_common.py": b"class ModelTesterMixin:\n    pass\n",
           "test_configuration_common.py": b"class ConfigTester:\n    pass\n"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DENSE_ENCODERS_TRANSFORMERS_TESTS", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def pip(monkeypatch):
    """``subprocess.run`` as ``fetch`` calls it: a ``pip download`` that writes a transformers sdist holding
    ``SOURCES`` under ``transformers-<version>/tests/`` into ``--dest`` (or fails, with ``pip.fails``)."""
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        if run.fails:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")
        dest = Path(command[command.index("--dest") + 1])
        dest.mkdir(parents=True)
        with tarfile.open(dest / f"transformers-{VERSION}.tar.gz", "w:gz") as archive:
            for name, data in {**SOURCES, "setup.py": b""}.items():
                member = tarfile.TarInfo(f"transformers-{VERSION}/{'' if name == 'setup.py' else 'tests/'}{name}")
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
        return subprocess.CompletedProcess(command, 0, "", "")

    run.calls, run.fails = calls, False
    monkeypatch.setattr(fetch.subprocess, "run", run)
    return run


def test_fetch_keeps_the_two_files_of_the_sdist_in_the_cache_once(cache, pip):
    folder = fetch.fetch(VERSION)
    assert folder == cache / f"transformers-{VERSION}"
    assert {name: (folder / name).read_bytes() for name in SOURCES} == SOURCES
    assert (folder / "__init__.py").read_text().startswith("# stand-in")
    (archive,) = [Path(command[command.index("--dest") + 1]) / f"transformers-{VERSION}.tar.gz"
                  for command in pip.calls]
    assert pip.calls[0][1:] == ["-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet", "--dest",
                                str(archive.parent), f"transformers=={VERSION}"]
    assert sorted(path.name for path in cache.iterdir()) == [folder.name]  # the download went with the scratch
    record = json.loads((folder / fetch.SOURCE_RECORD).read_text())
    assert record["sdist"] == archive.name and len(record["sha256"]) == 64
    assert fetch.is_fetched(folder)
    assert fetch.fetch(VERSION) == folder and len(pip.calls) == 1  # fetched: pip is not asked again


def test_fetch_names_the_version_and_leaves_nothing_when_pip_fails(cache, pip):
    pip.fails = True
    with pytest.raises(SystemExit) as failed:
        fetch.fetch(VERSION)
    message = str(failed.value)
    assert message.startswith(f"{fetch.COMMAND}: pip could not download the transformers {VERSION} source")
    assert "No matching distribution" in message and "\n" not in message
    assert list(cache.iterdir()) == []


def test_a_partial_folder_is_replaced_by_a_whole_one(cache, pip):
    partial = cache / f"transformers-{VERSION}"
    partial.mkdir(parents=True)
    (partial / "test_modeling_common.py").write_text("truncated")
    assert not fetch.is_fetched(partial)
    fetch.fetch(VERSION)
    assert {name: (partial / name).read_bytes() for name in SOURCES} == SOURCES


@pytest.mark.slow
def test_without_the_sources_the_common_tests_skip_naming_the_command_that_fetches_them(tmp_path):
    empty = tmp_path / "empty-cache"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_transformers_common.py", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT, env=cpu_only_env(DENSE_ENCODERS_TRANSFORMERS_TESTS=str(empty)), capture_output=True, text=True,
        timeout=600,
    )
    # the module skips as it is collected: pytest then ran no test (exit 5), and says why
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr[-3000:]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "1 skipped" in result.stdout, result.stdout[-3000:]
    assert f"run `{fetch.COMMAND}` once" in skipped[0] and str(empty / "transformers-") in skipped[0]
    assert not empty.exists()  # the tests look; they fetch nothing
