"""The package's import rules, read from the source (every import statement, also inside functions).

* A model folder (``models/<family>/``) is remote code: it imports its own siblings relatively and
  nothing else of the package.
* Library code imports nothing from ``cli`` (only the command line knows the command line).
* ``checkpoints`` (the folder contract, the weight check, the one model loader, and the conversion of
  other implementations' checkpoints) builds on ``models``; ``hub``, ``trainer`` and ``evaluation`` import
  it where they need it. It imports neither ``trainer``, ``evaluation`` nor ``cli``; of ``hub`` only the
  model card, which a converted folder gets (``hub.cards``, from ``checkpoints/convert.py``); of ``data`` only
  the file formats a conversion writes (``data.files``, ``data.run_records``: ``conversion.json``).
* transformers' private loading internals (key renaming, conversion mappings, the missing / unexpected
  key adjustment) are used nowhere: what a load leaves missing is its public ``output_loading_info``.
* ``from_pretrained`` is called only in ``checkpoints/`` (the one loader) and the model folders.
* ``trainer`` and ``evaluation`` both build on ``data``; neither imports the other.
* ``data`` sits below all of them: it imports neither ``trainer``, ``evaluation``, ``hub``, ``checkpoints``
  nor ``cli``. ``hub`` (cards, uploads) imports neither ``trainer``, ``evaluation``
  nor ``cli``.
* ``recipes`` (the papers' settings as files) is a leaf: the trainer, the card and the command line read
  it; it imports nothing of the package.
* ``hub`` and ``checkpoints`` import each other's modules without a cycle: each imports in a fresh
  interpreter, whichever comes first; ``hub``'s own modules import each other without a circle.
* No import circle anywhere in the package (imports inside functions count), and no module imports another
  module's private (``_``-prefixed) name: what two modules share has a public name in the lower one.
* No function in ``src/`` is over 80 lines: each reads on one screen.
* Run records have one home, ``data/run_records.py``: the record files' names are spelled there only, and no
  JSON file is written with ``write_text(json.dumps(...))`` (``data/files.py`` writes them whole).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGE = Path(REPO_ROOT) / "src" / "dense_encoders"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` statement in ``package`` names."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> list[tuple[int, str, int]]:
    """``(line, absolute module, relative level)`` for every import in ``path``."""
    package = _package_of(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _from_target(node, package), node.level))
    return found


def _sources(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def _violations(paths, forbidden, allowed=()) -> list[str]:
    bad = []
    for path in paths:
        for line, target, _ in imports_of(path):
            if target in allowed:
                continue
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
        ("data", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.hub",
                  "dense_encoders.checkpoints", "dense_encoders.cli"]),
        ("hub", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.cli"]),
        ("checkpoints", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.cli",
                         "dense_encoders.data"]),
        ("recipes", ["dense_encoders.trainer", "dense_encoders.evaluation", "dense_encoders.hub", "dense_encoders.cli",
                     "dense_encoders.data", "dense_encoders.models", "dense_encoders.checkpoints"]),
    ],
)
def test_layers_import_in_one_direction(layer, forbidden):
    allowed = {"checkpoints": ("dense_encoders.data.files", "dense_encoders.data.run_records")}.get(layer, ())
    bad = _violations(_sources(layer), forbidden, allowed)
    assert not bad, "\n".join(bad)


def test_checkpoints_import_of_hub_only_the_card_of_a_converted_folder():
    imports = {
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for path in _sources("checkpoints")
        for line, target, _ in imports_of(path)
        if target == "dense_encoders.hub" or target.startswith("dense_encoders.hub.")
    }
    assert {entry.rsplit(" imports ", 1)[1] for entry in imports} <= {"dense_encoders.hub.cards"}, imports
    assert {entry.split(":", 1)[0] for entry in imports} <= {"dense_encoders/checkpoints/convert.py"}, imports


PRIVATE_LOADING = ["transformers.core_model_loading", "transformers.conversion_mapping",
                   "transformers.utils.loading_report"]


def test_no_private_loading_internals():
    """What a load leaves missing is what transformers' public ``output_loading_info`` reports: no module uses its
    private key renaming, conversion mappings or missing / unexpected key adjustment."""
    users = {str(path.relative_to(PACKAGE.parent)) for path in _sources()
             if _violations([path], PRIVATE_LOADING)}
    assert not users, users
    for name in ("rename_source_key", "get_model_conversion_mapping", "_adjust_missing_and_unexpected_keys"):
        found = [str(p.relative_to(PACKAGE.parent)) for p in _sources() if name in p.read_text(encoding="utf-8")]
        assert not found, (name, found)


LOADERS = ("checkpoints", "models")  # the one loader and its converters; the model classes' own loads


def from_pretrained_calls(path: Path) -> list[int]:
    """Lines of the calls ``X.from_pretrained(...)`` in ``path`` (a name in a string is no call)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained"]


def test_from_pretrained_is_called_only_by_checkpoints_and_the_model_folders():
    """Every load of a model folder (model, configuration, tokenizer) goes through ``checkpoints/`` (the one
    weight-checked loader, :mod:`dense_encoders.checkpoints.loading`) or a model class's own code."""
    sample = ast.parse("AutoModel.from_pretrained(x)\nprint('AutoModel.from_pretrained(x)')")
    assert [n.lineno for n in ast.walk(sample) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "from_pretrained"] == [1]
    calls = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in _sources()
             if path.relative_to(PACKAGE).parts[0] not in LOADERS for line in from_pretrained_calls(path)]
    assert not calls, "from_pretrained outside checkpoints/ and models/: " + ", ".join(calls)
    assert from_pretrained_calls(PACKAGE / "checkpoints" / "loading.py")  # the rule looks where the calls are


@pytest.mark.parametrize("first", ["dense_encoders.hub", "dense_encoders.checkpoints"])
def test_hub_and_checkpoints_import_in_either_order(first):
    second = "dense_encoders.checkpoints" if first == "dense_encoders.hub" else "dense_encoders.hub"
    environment = {**os.environ, "PYTHONPATH": str(PACKAGE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = (f"import {first}, {second}; from dense_encoders.hub import model_card; "
            "from dense_encoders.checkpoints import convert_checkpoint; print('both')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "both", result.stderr[-2000:]


def test_vectors_imports_nothing_of_the_package():
    """``vectors`` (similarity names, pooling modes) is read by every layer and by the command line before
    anything heavy is loaded: it imports nothing of the package."""
    bad = [f"vectors.py:{line} imports {target}" for line, target, _ in imports_of(PACKAGE / "vectors.py")
           if target.startswith("dense_encoders")]
    assert not bad, "\n".join(bad)


# the record files runs write (spelled out here as the reference the source is checked against)
RECORD_FILES = ("conversion.json", "trainer_state.json", "training_args.json", "training_environment.json",
                "pretraining_setup.json", "distillation_setup.json", "distillation_losses.json",
                "distillation_positives.json", "infusion_setup.json", "earlier_stages.json", "report.json",
                "warm_start.json")


def _calls_json_dumps(node: ast.AST) -> bool:
    return any(isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "dumps"
               and isinstance(inner.func.value, ast.Name) and inner.func.value.id == "json"
               for inner in ast.walk(node))


def test_no_json_is_written_with_write_text_in_src():
    """Every JSON file the package writes goes through data/files.py (atomic): no ``write_text(json.dumps(...))``,
    on one line or several."""
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write_text"
                    and any(_calls_json_dumps(argument) for argument in [*node.args, *node.keywords])):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, "JSON written by write_text (use data.files.write_json, data.run_records): " + ", ".join(found)


def test_record_file_names_are_spelled_in_one_module():
    """The record files' names are string literals in data/run_records.py only: writers and the card use its
    constants."""
    home = PACKAGE / "data" / "run_records.py"
    found = []
    for path in _sources():
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in RECORD_FILES:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert not found, "\n".join(found)


def test_hub_modules_import_each_other_without_a_cycle():
    """hub/cards.py renders the Condenser paragraphs of hub/condenser_card.py, which imports nothing of the
    package; no import circle among hub's modules (imports inside functions count)."""
    hub = PACKAGE / "hub"
    graph = {}
    for path in hub.glob("*.py"):
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets.add(node.module or "__init__")
        graph[path.stem] = targets - {"__init__"}
    condenser = ast.parse((hub / "condenser_card.py").read_text(encoding="utf-8"))
    assert not [node for node in ast.walk(condenser) if isinstance(node, ast.ImportFrom) and node.level], \
        "hub/condenser_card.py imports from the package"

    def reaches(start, goal, seen=()):
        return any(target == goal or (target not in seen and reaches(target, goal, (*seen, target)))
                   for target in graph.get(start, ()))

    circles = sorted(module for module in graph if reaches(module, module))
    assert not circles, f"import circles through {circles}"


def test_cli_modules_import_each_other_without_a_circle():
    """The command line's conventions (cli/arguments.py) own both parser classes (``DataclassParser`` is defined there
    on first use); cli/dataclass_parser.py re-exports it and cli/__init__.py resolves a subcommand's name for
    ``expand_config_file``: no import circle among cli's modules, the package's ``__init__`` included (imports inside
    functions count)."""
    cli = PACKAGE / "cli"
    submodules = {path.stem for path in cli.glob("*.py")}
    graph = {}
    for path in cli.glob("*.py"):
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    targets.add(node.module.split(".")[0])
                else:  # `from . import name`: a submodule, or a name of the package's __init__
                    targets |= {alias.name if alias.name in submodules else "__init__" for alias in node.names}
        graph[path.stem] = targets

    def reaches(start, goal, seen=()):
        return any(target == goal or (target not in seen and reaches(target, goal, (*seen, target)))
                   for target in graph.get(start, ()))

    assert "dataclass_parser" not in graph["arguments"] and "__init__" not in graph["arguments"]
    circles = sorted(module for module in graph if reaches(module, module))
    assert not circles, f"import circles through {circles}"


def _package_modules() -> dict[str, Path]:
    return {_module_name(path): path for path in _sources()}


def _imported_modules(path: Path, modules: dict[str, Path]) -> list[tuple[int, str, list[str]]]:
    """``(line, module of the package, names taken from it)`` for every import of ``path`` that reaches one of
    ``modules``: ``from package import submodule`` reaches the submodule, ``from module import name`` the module."""
    package = _package_of(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.append((node.lineno, f"{target}.{alias.name}", []))
                elif target in modules:
                    found.append((node.lineno, target, [alias.name]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names if alias.name in modules]
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): every import circle."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    modules = _package_modules()
    graph = {name: {target for _, target, _ in _imported_modules(path, modules) if target != name}
             for name, path in modules.items()}
    circles = import_circles(graph)
    assert not circles, "import circles (imports inside functions count):\n" + "\n".join(map(" <-> ".join, circles))


def test_no_module_imports_a_private_name_of_another():
    modules = _package_modules()
    found = []
    for name, path in modules.items():
        for line, target, names in _imported_modules(path, modules):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if target != name and private:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {', '.join(private)} from {target}")
    assert not found, "\n".join(found)


def test_no_function_is_over_80_lines():
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
