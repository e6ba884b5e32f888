"""The README and docs/ against the code: the two commands and what CI runs, the subcommands, every page
linked and starting with a summary, links and anchors that resolve, module and file paths that exist, and
nothing that names a folder outside the repository."""

import importlib
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from dense_encoders.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
COMMANDS_BLOCK = [
    "pip install torch==2.13.0 && pip install -e . && dense-encoders quickstart",
    'pip install torch==2.13.0 && pip install -e ".[test,triton]" && python -m pytest',
]


def fenced_blocks(text: str) -> list[list[str]]:
    return [block.strip("\n").splitlines() for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)]


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", prose(text), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_readme_is_short_and_starts_with_what_the_project_is():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= 12_000
    title, paragraph, *_ = text.split("\n\n")
    assert title.startswith("# ") and "\n" not in title
    assert not paragraph.startswith(("#", "```", "|")) and "Transformers" in paragraph
    assert text.index(paragraph) < text.index("```")


def test_readme_keeps_the_two_commands_that_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert fenced_blocks(text)[0] == COMMANDS_BLOCK
    assert COMMANDS_BLOCK[1] in (ROOT / ".ci" / "run").read_text().splitlines()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["dense-encoders"] == "dense_encoders.cli:main"
    assert {"test", "triton"} <= set(project["optional-dependencies"])
    assert "quickstart" in COMMANDS


def test_readme_names_every_subcommand():
    text = " ".join(README.read_text(encoding="utf-8").split())
    listed = re.search(r"one tool, `dense-encoders` \(([^)]*)\)", text).group(1)
    assert re.findall(r"`([\w-]+)`", listed) and set(re.findall(r"`([\w-]+)`", listed)) == set(COMMANDS)


def test_every_page_is_in_the_readme_contents_and_starts_with_a_summary():
    readme = README.read_text(encoding="utf-8")
    assert len(PAGES) >= 11
    for page in PAGES:
        assert f"](docs/{page.name})" in readme, page.name
        title, summary, *_ = page.read_text(encoding="utf-8").split("\n\n")
        assert title.startswith("# ") and "\n" not in title, page.name
        assert not summary.startswith(("#", "```", "|", "*", "-")) and len(summary) > 200, page.name


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_links_and_anchors_resolve(path):
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(path.read_text(encoding="utf-8"))):
        if re.match(r"https?://", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.is_file(), f"{path.name}: {target}"
        if anchor:
            assert anchor in anchors(linked.read_text(encoding="utf-8")), f"{path.name}: {target}"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_named_modules_objects_and_files_exist(path):
    text = path.read_text(encoding="utf-8")
    for dotted in set(re.findall(r"\bdense_encoders(?:\.[A-Za-z_]\w*)+", text)):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        for name in parts[cut:]:
            assert hasattr(found, name), f"{path.name}: {dotted}"
            found = getattr(found, name)
    for file in set(re.findall(r"\b(?:src|tests|benchmarks|examples|\.ci)/[\w/.*-]*\w", text)):
        assert list(ROOT.glob(file)), f"{path.name}: {file}"


# ---------------------------------------------------------------------------- the repository stands on its own

# A folder beside the repository (where the developers' machines keep real datasets) is no part of the project:
# no test, source file, page or example names it, as a relative path or built from the repository's parent.
# Tests take real datasets from $DENSE_ENCODERS_TEST_DATA (tests/conftest.py), evidence lies in tests/fixtures/.
BESIDE_THE_REPOSITORY = re.compile(rb"""\.\./shared\b|\bparents?(?:\[\d+\])?(?:\.parent)*\s*/\s*["']shared["']""")
NOT_SOURCE = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def test_nothing_names_a_folder_beside_the_repository():
    files = [README, *(path for top in ("src", "tests", "docs", "examples", "benchmarks")
                       for path in sorted((ROOT / top).rglob("*")) if path.is_file())]
    found = [f"{path.relative_to(ROOT)}:{number}" for path in files
             if not NOT_SOURCE & set(path.parts) and not any(part.endswith(".egg-info") for part in path.parts)
             for number, line in enumerate(path.read_bytes().splitlines(), 1) if BESIDE_THE_REPOSITORY.search(line)]
    assert not found, f"these name a folder outside the repository: {found}"
    # the pattern finds what it is meant to find (spelt in two pieces, so that this file does not name it)
    name = b"shared"
    for line in (b"see ../" + name + b"/data", b'REPO_ROOT.parent / "' + name + b'" / "data"',
                 b"parents[1].parent / '" + name + b"'"):
        assert BESIDE_THE_REPOSITORY.search(line), line


def test_ci_gives_the_tests_their_real_datasets_where_the_machine_has_them(tmp_path):
    """.ci/run sets DENSE_ENCODERS_TEST_DATA to the absolute path of the data folder beside the checkout, and
    only where that folder exists (without it the tests that need real data skip, naming the variable)."""
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if "DENSE_ENCODERS_TEST_DATA" in line and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    checkout = tmp_path / "checkout"
    checkout.mkdir()

    def ci_sets() -> str:
        script = (f'set -euo pipefail; cd "$1"; unset DENSE_ENCODERS_TEST_DATA\n{lines[0]}\n'
                  'echo "${DENSE_ENCODERS_TEST_DATA-unset}"')
        return subprocess.run(["bash", "-c", script, "ci", str(checkout)], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert ci_sets() == "unset"
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    assert ci_sets() == str(data.resolve())


def test_tests_that_need_a_real_dataset_take_it_from_one_variable_and_skip_naming_it(tmp_path, monkeypatch):
    from conftest import TEST_DATA_VARIABLE, dataset_folder

    assert TEST_DATA_VARIABLE == "DENSE_ENCODERS_TEST_DATA"
    monkeypatch.delenv(TEST_DATA_VARIABLE, raising=False)
    folder, reason = dataset_folder("beir-scifact")
    assert folder is None and "set DENSE_ENCODERS_TEST_DATA" in reason and "beir-scifact/" in reason
    monkeypatch.setenv(TEST_DATA_VARIABLE, str(tmp_path))
    folder, reason = dataset_folder("beir-scifact")
    assert folder is None and f"DENSE_ENCODERS_TEST_DATA={tmp_path} does not hold" in reason
    (tmp_path / "beir-scifact").mkdir()
    assert dataset_folder("beir-scifact") == (tmp_path / "beir-scifact", "")
    monkeypatch.setenv(TEST_DATA_VARIABLE, str(tmp_path / "misspelt"))  # a folder that is not there: an error
    with pytest.raises(pytest.UsageError, match="DENSE_ENCODERS_TEST_DATA=.*misspelt is not a folder"):
        dataset_folder("beir-scifact")
