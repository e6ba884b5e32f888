"""Helpers shared by the benchmark scripts: device facts, tables, the command line, output."""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Callable

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# one copy, shared with `dense-encoders bench` (re-exported for the scripts here)
from dense_encoders.benchmarking import device_name, render_table, synchronize  # noqa: F401


def command_line() -> str:
    """The command that produced a report, to print under its table."""
    prefix = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    return prefix + shlex.join(["python", *sys.argv])


def quiet_libraries() -> None:
    """Keep library warnings and load reports out of the printed table."""
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def emit(report: str, results: dict, json_path: Path | None) -> None:
    """Print the report and, when asked, write the raw results as JSON."""
    print(report)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {json_path}")


def run_script(argv: list[str] | None, parse_args: Callable, run: Callable[..., dict],
               format_report: Callable[[dict], str]) -> dict:
    """A benchmark script's ``main``: parse ``argv``, quiet the libraries, run, print the report (and write the
    JSON ``--json`` asks for); returns the raw results."""
    args = parse_args(argv)
    quiet_libraries()
    results = run(args)
    emit(format_report(results), results, args.json)
    return results
