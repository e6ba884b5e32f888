"""CPU time of every ``dense-encoders ... --help``, each in a fresh interpreter.

Each help runs as ``python -m dense_encoders.cli ARGS --help`` in a new process; the time reported is that
process's user + system CPU seconds (``resource.getrusage(RUSAGE_CHILDREN)``), so other load on the machine
does not count. ``HF_HOME`` points to a new empty folder: the first ``pretrain`` / ``distill`` help reads
transformers' ``TrainingArguments`` flags once (importing torch) and keeps them there
(``dense_encoders/cli/training_arguments.py``); that first run is reported apart, then every help runs as it does
from then on. ``python -X importtime -m dense_encoders.cli ARGS --help`` shows what a help imports.

Usage (repository root)::

    python benchmarks/help_cpu.py                     # this checkout's src/, about 20 s
    python benchmarks/help_cpu.py --src OTHER/src     # another source tree (e.g. an older commit), the same way
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

HELPS = [[], ["quickstart"], ["pretrain"], ["pretrain", "condenser"], ["pretrain", "cocondenser"],
         ["pretrain", "tite"], ["evaluate"], ["encode"], ["index"], ["search"], ["score-teacher"], ["distill"],
         ["layerwise"], ["infuse"], ["convert"], ["push"], ["bench"], ["recipes"]]


def cpu_seconds(argv: list[str], src: Path, hf_home: str) -> float:
    """User + system CPU seconds of ``python -m dense_encoders.cli ARGV --help`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", *argv, "--help"], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(src), "HF_HOME": hf_home})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"dense-encoders {' '.join(argv)} --help failed:\n{result.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src",
                        help="The source tree to run (default: this checkout's src/).")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="help-cpu-hf-home-") as hf_home:
        first = cpu_seconds(["distill"], options.src, hf_home)
        rows = [(" ".join(argv), cpu_seconds(argv, options.src, hf_home)) for argv in HELPS]
    width = max(len(name) for name, _ in rows) + len("dense-encoders  --help")
    print(f"{'help':<{width}}  CPU s")
    for name, seconds in rows:
        print(f"{'dense-encoders ' + (name + ' ' if name else '') + '--help':<{width}}  {seconds:5.2f}")
    print(f"\nfirst TrainingArguments help with an empty HF_HOME (distill): {first:.2f} s; slowest above: "
          f"{max(seconds for _, seconds in rows):.2f} s")
    print(f"source: {options.src}")


if __name__ == "__main__":
    main()
