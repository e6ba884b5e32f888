"""The checks `.ci/run` makes around the tests. `.ci/check_tree.py`, run as CI runs it on temporary git
repositories: a tracked file over 1 MB outside tests/fixtures/, and a file left in the working tree after the
tests, each fail naming the file; what installing and running the tools makes (ignored caches) does not.
`ruff check`: CI installs the ruff the test extra pins, and the code passes it."""

import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO_ROOT

CHECK_TREE = REPO_ROOT / ".ci" / "check_tree.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the checks read a git working tree: needs git")


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def write(path, size=None, text=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        path.write_bytes(b"x" * size)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def check_tree(check, cwd):
    return subprocess.run([sys.executable, str(CHECK_TREE), check], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    """A committed repository whose .gitignore ignores what the real one does (caches, egg-info, runs/)."""
    repo = tmp_path / "repo"
    write(repo / "README.md", text="# project\n")
    write(repo / "src" / "pkg" / "__init__.py", text="")
    write(repo / ".gitignore", text="__pycache__/\n*.egg-info/\n.pytest_cache/\n*.pyc\n/runs/\n.ruff_cache/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=ci", "-c", "user.email=ci@example.com", "-c", "commit.gpgsign=false",
        "commit", "-q", "--no-verify", "-m", "init")
    return repo


def test_a_tracked_file_over_1_mb_outside_tests_fixtures_fails_naming_it(repo):
    write(repo / "data" / "big.bin", 1_000_001)
    write(repo / "data" / "exactly-1-mb.bin", 1_000_000)
    write(repo / "untracked-big.bin", 3_000_000)  # not tracked: the `clean` check's business, not this one's
    git(repo, "add", "data")  # staged counts as tracked
    result = check_tree("large-files", cwd=repo / "src")  # from a subfolder: paths still from the root
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines == ["check_tree large-files: data/big.bin: 1.0 MB, a tracked file over 1 MB outside tests/fixtures/ "
                     "(untrack it, or move test data into tests/fixtures/)"]


def test_a_large_file_under_tests_fixtures_passes(repo):
    write(repo / "tests" / "fixtures" / "reference" / "weights.safetensors", 2_000_000)
    git(repo, "add", "tests")
    result = check_tree("large-files", cwd=repo)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_clean_working_tree_with_the_tools_caches_passes(repo):
    write(repo / "src" / "pkg" / "__pycache__" / "__init__.cpython-311.pyc", 10)
    write(repo / "src" / "pkg.egg-info" / "PKG-INFO", text="Name: pkg\n")
    write(repo / ".pytest_cache" / "v" / "cache" / "nodeids", text="[]")
    write(repo / ".ruff_cache" / "CACHEDIR.TAG", text="")
    result = check_tree("clean", cwd=repo)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_file_left_in_the_working_tree_fails_naming_it(repo):
    write(repo / "stray.txt", text="written by a test\n")
    write(repo / "runs" / "model" / "config.json", text="{}")  # ignored by .gitignore, still left behind
    write(repo / "README.md", text="# changed\n")
    result = check_tree("clean", cwd=repo)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "check_tree clean:  M README.md: a tracked file changed after the tests",
        "check_tree clean: ?? stray.txt: not tracked, in the working tree after the tests (tests write under tmp_path)",
        "check_tree clean: !! runs/: not tracked, in the working tree after the tests (tests write under tmp_path)",
    ]


def test_this_repository_tracks_no_file_over_1_mb_outside_tests_fixtures():
    if subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--is-inside-work-tree"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: nothing is tracked")
    result = check_tree("large-files", cwd=REPO_ROOT)
    assert (result.returncode, result.stderr) == (0, "")


def test_ci_installs_the_ruff_the_test_extra_pins_and_the_config_selects_pyflakes_and_pycodestyle():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pinned = [r for r in pyproject["project"]["optional-dependencies"]["test"] if re.match(r"ruff\b", r)]
    assert len(pinned) == 1 and re.fullmatch(r"ruff>=[\d.]+,<[\d.]+", pinned[0])
    lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if line.startswith("pip install") and '".[test' in line)
    # ruff comes from the test extra, as the README installs it, and runs before the tests
    assert lines.index("python -m ruff check") == install + 1
    assert lines.index("python -m ruff check") < lines.index("python -m pytest")
    ruff = pyproject["tool"]["ruff"]
    assert ruff["line-length"] == 120 and {"E", "W", "F"} <= set(ruff["lint"]["select"])


def test_the_code_passes_ruff_check():
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
