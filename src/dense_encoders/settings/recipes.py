"""What ``dense-encoders recipes`` takes besides the recipe to show (its positional argument)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecipesListing:
    """How the papers' recipes are listed."""

    markdown: bool = field(default=False, metadata={
        "help": "Print the Recipes table of docs/recipes.md (every recipe, value, source, default)."})


__all__ = ["RecipesListing"]
