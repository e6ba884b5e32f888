"""The parser of a subcommand whose settings are dataclasses: transformers' ``HfArgumentParser`` with the command
line's conventions (:class:`~.arguments.CommandParser`). The class lives in :mod:`.arguments`, which defines it when
first asked for (:func:`~.arguments.dataclass_parser_class`); this module is where it has always been imported from,
and importing it imports transformers (not torch). Imports go one way: this module imports ``arguments``, never the
reverse."""

from __future__ import annotations

from .arguments import dataclass_parser_class

DataclassParser = dataclass_parser_class()

__all__ = ["DataclassParser"]
