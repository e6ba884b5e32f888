"""The command line is built on the public API of argparse and transformers' ``HfArgumentParser`` only: no module of
the package reads or writes an underscore attribute of theirs (``parser._actions``, ``parser._option_string_actions``,
``argparse._StoreTrueAction``, ...) or overrides one of their underscore methods (a help formatter's
``_format_action_invocation``, ``_get_help_string``, ...). Read from the source with ``ast``."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from conftest import REPO_ROOT
from transformers import HfArgumentParser

PACKAGE = Path(REPO_ROOT) / "src" / "dense_encoders"


def _underscore_names(*objects) -> set[str]:
    return {name for thing in objects for name in dir(thing) if name.startswith("_") and not name.startswith("__")}


def argparse_private_names() -> set[str]:
    """Every underscore name of argparse's module, classes and instances (attributes set in ``__init__`` too: a
    parser's ``_actions``, a group's ``_group_actions``), and of ``HfArgumentParser``."""
    parser = argparse.ArgumentParser()
    action = parser.add_argument("--x")
    group = parser.add_argument_group("g")
    exclusive = parser.add_mutually_exclusive_group()
    classes = [value for value in vars(argparse).values() if isinstance(value, type)]
    return _underscore_names(argparse, *classes, parser, action, group, exclusive, argparse.HelpFormatter("p"),
                             argparse.Namespace(), HfArgumentParser, HfArgumentParser())


def private_uses(source: str, names: set[str]) -> list[str]:
    """``x._name`` reads and writes, and methods ``def _name`` of classes, whose name is one of ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ClassDef):
            found += [f"line {item.lineno}: def {item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in names]
    return found


def test_the_check_sees_what_the_old_command_line_did():
    names = argparse_private_names()
    assert {"_actions", "_option_string_actions", "_optionals", "_format_action_invocation", "_get_help_string",
            "_StoreTrueAction", "_HelpAction", "_group_actions", "_parse_dataclass_field"} <= names
    old = ("class DashedHelpFormatter(argparse.RawDescriptionHelpFormatter):\n"
           "    def _format_action_invocation(self, action):\n        return ''\n"
           "for action in parser._actions:\n    action.option_strings.sort()\n"
           "parser._optionals.title = 'x'\nisinstance(action, argparse._StoreFalseAction)\n")
    assert {use.split(": ")[1] for use in private_uses(old, names)} == {
        "def _format_action_invocation", "._actions", "._optionals", "._StoreFalseAction"}
    # our own underscore names, and public attributes of actions, are no argparse internals
    assert private_uses("self._spelled(names)\naction.option_strings\nparser.flags\n", names) == []


def test_no_module_uses_argparse_or_hf_argument_parser_internals():
    names = argparse_private_names()
    found = {str(path.relative_to(PACKAGE)): uses for path in sorted(PACKAGE.rglob("*.py"))
             if (uses := private_uses(path.read_text(encoding="utf-8"), names))}
    assert not found, found
