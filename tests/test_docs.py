"""The README and docs/ against the code: the two commands and what CI runs, the subcommands, every page
linked and starting with a summary, links and anchors that resolve, and module and file paths that exist."""

import importlib
import re
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
