"""CI's checks of the git working tree it runs in (``.ci/run``): only source is tracked, and the tests leave nothing.

    python .ci/check_tree.py large-files   # before the tests: no tracked file over 1 MB outside tests/fixtures/
    python .ci/check_tree.py clean         # after the tests: no file the checkout did not have

``large-files`` lists the tracked files (``git ls-files``: committed or staged) whose size in the working tree is
over 1 MB (1,000,000 bytes) and that lie outside ``tests/fixtures/``, where the test data that has to be big lives.

``clean`` lists what ``git status --porcelain --ignored`` shows: untracked files, and ignored ones too (a test that
writes ``runs/`` or ``quickstart-output/`` into the checkout is caught although ``.gitignore`` hides them), except
what installing and running the tools makes by design: ``*.egg-info`` (``pip install -e``), ``__pycache__`` and
``*.pyc`` (Python), ``.pytest_cache`` (pytest), ``.ruff_cache`` (ruff), ``.venv`` (a virtual environment kept in
the checkout). Tracked files modified or deleted are listed too. CI runs on a fresh clone, so that all it lists was
made by the run.

Each offending path is printed on its own line, named relative to the repository root; the exit status is 1 if
there is any, else 0. Run from anywhere inside the repository (the repository is the one of the current folder).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

LIMIT_BYTES = 1_000_000
LARGE_FILES_ALLOWED_UNDER = "tests/fixtures/"
# made by installing and running the tools, not by a test: a path with one of these parts is not reported
TOOL_ARTEFACTS = ("*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".venv")


def git(root: Path | None, *args: str) -> str:
    command = ["git", *(["-C", str(root)] if root else []), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def repository_root(start: Path | None = None) -> Path:
    """The top folder of the git working tree that holds ``start`` (default: the current folder)."""
    return Path(git(start, "rev-parse", "--show-toplevel").strip())


def large_tracked_files(root: Path, limit: int = LIMIT_BYTES) -> list[tuple[str, int]]:
    """(path, bytes) of every tracked file over ``limit`` bytes outside tests/fixtures/, in git's order."""
    large = []
    for name in git(root, "ls-files", "-z", "--cached").split("\0"):
        path = root / name
        if not name or name.startswith(LARGE_FILES_ALLOWED_UNDER) or not path.is_file():
            continue  # a tracked file deleted in the working tree is the `clean` check's business
        size = path.stat().st_size
        if size > limit:
            large.append((name, size))
    return large


def is_tool_artefact(name: str) -> bool:
    """Whether a path (a file, or a folder ending in ``/``) is or lies inside one of :data:`TOOL_ARTEFACTS`."""
    return any(fnmatch(part, pattern) for part in PurePosixPath(name).parts for pattern in TOOL_ARTEFACTS)


def left_behind(root: Path) -> list[str]:
    """The ``git status --porcelain --ignored`` entries (``XY path``; a folder git knows nothing of is one entry,
    ``path/``) that are not tool artefacts."""
    entries = iter(git(root, "status", "--porcelain", "--ignored", "-z").split("\0"))
    found = []
    for entry in entries:
        if not entry:
            continue
        status, name = entry[:2], entry[3:]
        if "R" in status or "C" in status:
            next(entries)  # with -z, a rename's or copy's source follows as an entry of its own
        if status == "!!" and is_tool_artefact(name):
            continue
        found.append(f"{status} {name}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=["large-files", "clean"])
    check = parser.parse_args(argv).check
    root = repository_root()
    if check == "large-files":
        problems = [f"{name}: {size / 1e6:.1f} MB, a tracked file over {LIMIT_BYTES / 1e6:g} MB outside "
                    f"{LARGE_FILES_ALLOWED_UNDER} (untrack it, or move test data into {LARGE_FILES_ALLOWED_UNDER})"
                    for name, size in large_tracked_files(root)]
    else:
        problems = [f"{entry}: " + ("not tracked, in the working tree after the tests (tests write under tmp_path)"
                                    if entry[:2] in ("??", "!!") else "a tracked file changed after the tests")
                    for entry in left_behind(root)]
    for problem in problems:
        print(f"check_tree {check}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
