"""The package's import rules, read from the source (every import statement, also inside functions).

* A model folder (``models/<family>/``) is remote code: it imports its own siblings relatively and
  nothing else of the package.
* Library code imports nothing from ``cli`` (only the command line knows the command line).
* ``trainer`` and ``evaluation`` both build on ``data``; neither imports the other.
* ``data`` and ``hub`` sit below them: they import neither ``trainer``, ``evaluation`` nor ``cli``.
* ``checkpoints`` (other implementations' checkpoints, converted) builds on ``models`` and ``hub``; ``hub``
  does not import it, nor does it import ``trainer``, ``evaluation`` or ``cli``.
* ``recipes`` (the papers' settings as files) is a leaf: the trainer, the card and the command line read
  it; it imports nothing of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGE = Path(REPO_ROOT) / "src" / "dense_encoders"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[int, str, int]]:
    """``(line, absolute module, relative level)`` for every import in ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target, node.level))
    return found


def _sources(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def _violations(paths, forbidden) -> list[str]:
    bad = []
    for path in paths:
        for line, target, _ in imports_of(path):
            if any(target == f or target.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    return bad


def test_the_rules_see_relative_and_nested_imports():
    """The reader itself: relative levels resolve against the file's package, imports inside
    functions count."""
    sample = PACKAGE / "trainer" / "distillation.py"
    targets = {target for _, target, _ in imports_of(sample)}
    assert "dense_encoders.data.distillation" in targets
    assert "dense_encoders.trainer.losses" in targets


def test_model_folders_import_only_their_own_siblings():
    bad = []
    for folder in sorted(p for p in (PACKAGE / "models").iterdir() if p.is_dir() and p.name != "__pycache__"):
        own = f"dense_encoders.models.{folder.name}"
        for path in sorted(folder.glob("*.py")):
            for line, target, level in imports_of(path):
                if target.startswith("dense_encoders") and not (level == 1 and target.startswith(own)):
                    bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not bad, "remote code must import only its own folder, relatively:\n" + "\n".join(bad)


def test_library_code_knows_no_command_line():
    library = [p for p in _sources() if "cli" not in p.relative_to(PACKAGE).parts[:1]]
    bad = _violations(library, ["dense_encoders.cli"])
    assert not bad, "\n".join(bad)
    parsers = [str(p.relative_to(PACKAGE.parent)) for p in library
               if "argparse" in {t for _, t, _ in imports_of(p)}]
    assert not parsers, f"argument parsing outside cli/: {parsers}"


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        ("trainer", ["dense_encoders.evaluation", "dense_encoders.cli"]),
        ("evaluation", ["dense_encoders.trainer", "dense_encoders.cli"]),
        ("data", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.hub", "dense_encoders.cli"]),
        ("hub", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.cli",
                 "dense_encoders.checkpoints"]),
        ("checkpoints", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.cli"]),
        ("recipes", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.hub", "dense_encoders.cli",
                     "dense_encoders.data", "dense_encoders.models"]),
    ],
)
def test_layers_import_in_one_direction(layer, forbidden):
    bad = _violations(_sources(layer), forbidden)
    assert not bad, "\n".join(bad)
