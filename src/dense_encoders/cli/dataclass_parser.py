"""The parser of a subcommand whose settings are dataclasses: transformers' ``HfArgumentParser`` with the command
line's conventions (:class:`~.arguments.CommandParser`). Imported only where such a parser is built, since it imports
transformers (not torch)."""

from __future__ import annotations

from collections.abc import Mapping

from transformers.hf_argparser import HfArgumentParser, string_to_bool

from .arguments import CommandParser


class DataclassParser(CommandParser, HfArgumentParser):
    """``HfArgumentParser(dataclass_types, **settings)``: a flag per field of the dataclasses (help, metavar and
    choices from the field's metadata), parsed into the dataclasses by ``parse_args_into_dataclasses`` (whose
    ``__post_init__`` checks the values), declared and shown as :class:`~.arguments.CommandParser` declares flags.
    A boolean field is a switch in ``--help`` (``--no-progress``) and still takes a value (``--bf16 False``)."""

    def __init__(self, dataclass_types, **settings):
        super().__init__(tuple(dataclass_types), **settings)

    def is_switch(self, keywords: Mapping) -> bool:
        return keywords.get("type") is string_to_bool and keywords.get("nargs") == "?"


__all__ = ["DataclassParser"]
