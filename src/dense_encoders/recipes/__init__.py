"""The papers' training recipes as named, readable files: ``dense-encoders pretrain tite --recipe tite-pretraining``.

Each recipe is a YAML file in this folder (``<name>.yaml``)::

    command: pretrain tite              # the subcommand it is written for
    paper: "TITE: Token-Independent Text Encoder for Information Retrieval (Schlatt et al., SIGIR 2025)"
    summary: one line saying what it trains
    settings:                           # flag name -> the value and where in the paper it comes from
      learning_rate: {value: 1.0e-4, source: "Sec. 4.1"}
    notes:                              # what a recipe cannot set (data, hardware), one line each
      - ...

A recipe's settings are flags of its command, read before ``--config`` and the command line, so
anything given explicitly overrides it. A path to such a file works wherever a name does. This module
only reads the files; the command line applies them and the model card names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RECIPES_DIR = Path(__file__).parent
RECIPE_HELP = ("A paper's training recipe by name (`dense-encoders recipes` lists them) or a recipe .yaml file: its "
               "settings apply first; --config and flags override them (applied by the command line; named in the "
               "card).")


@dataclass(frozen=True)
class RecipeSetting:
    value: Any
    source: str


@dataclass(frozen=True)
class Recipe:
    """One paper's settings for one subcommand (see the module docstring for the file format)."""

    name: str
    command: str
    paper: str
    summary: str
    settings: dict[str, RecipeSetting]
    notes: tuple[str, ...] = field(default=())
    path: Path | None = None

    def values(self) -> dict[str, Any]:
        """Flag name -> value, as ``--config`` files hold them."""
        return {name: setting.value for name, setting in self.settings.items()}


def recipe_names() -> list[str]:
    """The recipes shipped with the package, by name."""
    return sorted(path.stem for path in RECIPES_DIR.glob("*.yaml"))


def _problem(where: str, message: str) -> ValueError:
    return ValueError(f"recipe {where}: {message}")


def read_recipe(path: str | Path, name: str | None = None) -> Recipe:
    """Read and validate one recipe file; every problem is one line naming the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise _problem(str(path), f"line {mark.line + 1 if mark else '?'} is not valid YAML") from None
    if not isinstance(data, dict):
        raise _problem(str(path), "must be a mapping with command, paper, summary and settings")
    missing = [key for key in ("command", "paper", "summary", "settings") if not data.get(key)]
    if missing:
        raise _problem(str(path), f"has no {', '.join(missing)}")
    unknown = sorted(set(data) - {"command", "paper", "summary", "settings", "notes"})
    if unknown:
        raise _problem(str(path), f"unknown keys {unknown}; allowed: command, paper, summary, settings, notes")
    if not isinstance(data["settings"], dict):
        raise _problem(str(path), "settings must map flag names to {value, source}")
    settings = {}
    for key, entry in data["settings"].items():
        if not isinstance(entry, dict) or set(entry) != {"value", "source"} or not str(entry["source"]).strip():
            raise _problem(str(path), f"setting {key!r} must be {{value: ..., source: <paper section>}}")
        settings[str(key).replace("-", "_")] = RecipeSetting(entry["value"], str(entry["source"]))
    notes = data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise _problem(str(path), "notes must be a list of strings")
    return Recipe(name=name or path.stem, command=" ".join(str(data["command"]).split()), paper=str(data["paper"]),
                  summary=str(data["summary"]), settings=settings, notes=tuple(notes), path=path)


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A shipped recipe by name (``tite-pretraining``), or a recipe file by path."""
    text = str(name_or_path)
    if text in recipe_names():
        return read_recipe(RECIPES_DIR / f"{text}.yaml")
    path = Path(text)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise FileNotFoundError(f"recipe file {path} does not exist")
        return read_recipe(path)
    raise ValueError(f"unknown recipe {text!r}; choose one of {', '.join(recipe_names())} "
                     "(`dense-encoders recipes` lists them), or give a recipe .yaml file")


def same_value(recipe_value: Any, actual: Any) -> bool:
    """Whether a recorded setting (a parsed flag, or its JSON record) is the recipe's value: numbers by value,
    enums by their value, mappings key by key."""
    actual = getattr(actual, "value", actual)  # transformers' SchedulerType and friends
    if isinstance(recipe_value, dict) or isinstance(actual, dict):
        return (isinstance(recipe_value, dict) and isinstance(actual, dict) and recipe_value.keys() == actual.keys()
                and all(same_value(recipe_value[key], actual[key]) for key in recipe_value))
    if isinstance(recipe_value, bool) or isinstance(actual, bool):
        return str(recipe_value).lower() == str(actual).lower()
    try:
        return float(recipe_value) == float(actual)
    except (TypeError, ValueError):
        return str(recipe_value) == str(actual)


def recipe_differences(recipe: Recipe, values: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The recipe's settings that ``values`` (flag name -> value) holds differently: name -> (recipe's, actual)."""
    return {name: (setting.value, getattr(values[name], "value", values[name]))
            for name, setting in recipe.settings.items()
            if name in values and not same_value(setting.value, values[name])}


def load_recipes() -> list[Recipe]:
    return [load_recipe(name) for name in recipe_names()]


__all__ = [
    "RECIPES_DIR",
    "RECIPE_HELP",
    "Recipe",
    "RecipeSetting",
    "load_recipe",
    "load_recipes",
    "read_recipe",
    "recipe_differences",
    "recipe_names",
    "same_value",
]
