"""``dense-encoders quickstart``: the offline first run (:mod:`dense_encoders.quickstart`)."""

from __future__ import annotations

from ..settings.quickstart import QuickstartArguments
from .arguments import make_parser, parse
from .checks import check_outputs

QUICKSTART_EXAMPLES = """\
examples:
  dense-encoders quickstart
  dense-encoders quickstart --data data/beir-scifact --output-dir runs/quickstart-scifact
  dense-encoders quickstart --push me/quickstart
"""


def build_quickstart_parser():
    return make_parser(
        "dense-encoders quickstart",
        "Offline first run (minutes on 2 CPU cores): all-MiniLM-L6-v2 as teacher, a TITE warm-started "
        "from it and its first two layers as students, distilled on the retrieval set the package carries (or "
        "--data), evaluated, timed side by side and saved as Hub-ready folders with cards; one summary table. "
        "A second run with the same settings into the same --output-dir reuses its caches (embeddings, teacher "
        "scores, students): the folder counts as this quickstart's own when its quickstart.json records the same "
        "settings (--data, --teacher, --tite-preset, --student-layers, --epochs, --batch-size, --seed). Any other "
        "non-empty folder (another command's output, or a quickstart with other settings) is refused; "
        "--overwrite-output-dir clears it first.",
        QUICKSTART_EXAMPLES,
        (QuickstartArguments,),
    )


def quickstart(argv: list[str]) -> int:
    from ..quickstart import run_quickstart  # slow to import (torch, transformers): only when the command runs

    (options,) = parse(build_quickstart_parser(), argv)
    check_outputs({"--output-dir": options.output_dir}, {"--data": options.data, "--teacher": options.teacher})
    run_quickstart(output_dir=options.output_dir, push=options.push, overwrite_output_dir=options.overwrite_output_dir,
                   data=options.data, teacher=options.teacher,
                   tite_preset=options.tite_preset, student_layers=options.student_layers, epochs=options.epochs,
                   batch_size=options.batch_size, seed=options.seed)
    return 0


__all__ = ["build_quickstart_parser", "quickstart"]
