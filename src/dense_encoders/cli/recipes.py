"""``dense-encoders recipes``: the papers' training recipes (:mod:`dense_encoders.recipes`), their values,
where in each paper a value comes from, and what the package default would have been."""

from __future__ import annotations

import json

from ..recipes import load_recipe, load_recipes
from .arguments import make_parser, parse

RECIPES_EXAMPLES = """\
examples:
  dense-encoders recipes                       # every recipe: its command and paper
  dense-encoders recipes tite-pretraining      # its values, their paper sections, the package defaults
  dense-encoders pretrain tite --recipe tite-pretraining --corpus fineweb.jsonl --output-dir runs/tite
  dense-encoders distill --recipe tite-fine-tuning --student runs/tite --train-file train.jsonl \\
      --per-device-train-batch-size 64 --gradient-accumulation-steps 4   # flags override the recipe
"""


def build_recipes_parser():
    from ..settings.recipes import RecipesListing

    parser = make_parser(
        "dense-encoders recipes",
        "The papers' training recipes, one flag away: `--recipe NAME` on pretrain, distill or infuse applies a "
        "recipe's settings first; --config and the command line override them, and the model card names the "
        "recipe and what was changed.",
        RECIPES_EXAMPLES,
        (RecipesListing,),
    )
    parser.add_argument("name", nargs="?", help="A recipe (or recipe .yaml file) to show in full.")
    return parser


def _shown(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(getattr(value, "value", value))


def command_defaults(command: str) -> dict:
    """The value every flag of ``command`` (``pretrain tite``, ``distill``, ``infuse``) takes when not given:
    the parser's defaults, with pre-training's per-architecture ones resolved."""
    from . import PARSERS  # import cycle: dense_encoders.cli imports this module

    name, _, architecture = command.partition(" ")
    parser = PARSERS[name]()
    defaults = {action.dest: action.default for action in parser.flags.values()}
    if defaults.get("max_steps") == -1:
        defaults["max_steps"] = "- (epochs)"
    if name == "pretrain":
        from ..settings.pretraining import DEFAULT_PRESETS, PreTrainingSetup

        setup = PreTrainingSetup(architecture=architecture)
        defaults.update({key: value for key, value in vars(setup).items() if value is not None})
        defaults["preset"] = defaults.get("preset") or DEFAULT_PRESETS[architecture]
        if architecture != "tite" and defaults.get("skip_from") is None:
            defaults["skip_from"] = "half the depth"
    return defaults


def markdown_table() -> str:
    """The Recipes table of docs/recipes.md, generated from the recipe files."""
    rows = ["| recipe | paper | setting | value | where it comes from | package default |",
            "| --- | --- | --- | --- | --- | --- |"]
    for recipe in load_recipes():
        defaults = command_defaults(recipe.command)
        for index, (key, setting) in enumerate(recipe.settings.items()):
            first = index == 0
            rows.append(f"| {f'`{recipe.name}` (`{recipe.command}`)' if first else ''} | "
                        f"{recipe.paper if first else ''} | `{key}` | {_shown(setting.value)} | {setting.source} | "
                        f"{_shown(defaults.get(key))} |")
    return "\n".join(rows)


def recipes(argv: list[str]) -> int:
    options, positionals = parse(build_recipes_parser(), argv)
    if options.markdown:
        print(markdown_table())
        return 0
    if positionals.name is None:
        listed = load_recipes()
        width = max(len(recipe.name) for recipe in listed)
        command_width = max(len(recipe.command) for recipe in listed)
        for recipe in listed:
            print(f"{recipe.name:<{width}}  {recipe.command:<{command_width}}  {recipe.paper}")
        print("\n`dense-encoders recipes NAME` shows a recipe's values and the paper section of each; "
              "`--recipe NAME` applies it (flags given on the command line win).")
        return 0
    recipe = load_recipe(positionals.name)
    defaults = command_defaults(recipe.command)
    print(f"{recipe.name}: {recipe.summary}")
    print(f"paper: {recipe.paper}")
    print(f"use:   dense-encoders {recipe.command} --recipe {positionals.name} [flags that override it]\n")
    table = [("setting", "value", "package default", "where it comes from")]
    table += [(key, _shown(setting.value), _shown(defaults.get(key)), setting.source)
              for key, setting in recipe.settings.items()]
    widths = [max(len(row[column]) for row in table) for column in range(3)]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    if recipe.notes:
        print("\nnotes:")
        for note in recipe.notes:
            print(f"  - {note}")
    return 0


__all__ = ["build_recipes_parser", "command_defaults", "markdown_table", "recipes"]
