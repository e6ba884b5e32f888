"""Helpers shared by the benchmark scripts: device facts, tables, the command line, output."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import shlex
import sys
import warnings
from pathlib import Path

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"cpu ({name}, {os.cpu_count()} logical cores)"


def command_line() -> str:
    """The command that produced a report, to print under its table."""
    prefix = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    return prefix + shlex.join(["python", *sys.argv])


def render_table(header: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    right = [False] + [True] * (len(header) - 1)

    def render(cells):
        return "| " + " | ".join(s.rjust(w) if r else s.ljust(w) for s, w, r in zip(cells, widths, right)) + " |"

    rule = "|" + "|".join(("-" * (w + 1)) + ":" if r else ":" + "-" * (w + 1) for w, r in zip(widths, right)) + "|"
    return [render(header), rule, *(render(cells) for cells in body)]


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
