"""The learning curve of the quickstart's students: nDCG@10 on the test queries against training steps.

``dense-encoders quickstart`` trains each student for ``--epochs`` (2) epochs of its train queries (26 steps of 16
on the bundled set). This script asks what more steps would give: it makes the quickstart's training file and TITE
initialisation as the quickstart does (or reuses those of ``--output-dir``, a quickstart folder), distils each
student with the quickstart's own settings (:func:`dense_encoders.quickstart.student_training`) for ``--epochs``
(8) epochs, saving a checkpoint every ``--every`` (13) steps, and evaluates each checkpoint on the test queries with
the evaluation harness, the teacher beside them. The learning rate decays over the longer run, so a point at step
26 is not the quickstart's 2-epoch student (its schedule ends there); the table prints both.

    python benchmarks/quickstart_curve.py --output-dir curve --epochs 8 --every 13

Prints a markdown table (steps x student) and writes ``curve.json`` into ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

try:
    import dense_encoders  # noqa: F401
except ImportError:  # run from a clone without the package installed
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dense_encoders.data.retrieval import load_beir
from dense_encoders.data.run_records import TRAINER_STATE, read_record
from dense_encoders.evaluation import evaluate_retrieval
from dense_encoders.quickstart import (
    QuickstartSettings,
    _teacher_path,
    default_data,
    prepare_quickstart_output,
    student_plans,
    student_training,
    teacher_training_file,
)
from dense_encoders.trainer.distillation import distill, keep_first_layers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default="quickstart-curve", help="A quickstart folder (made if new).")
    parser.add_argument("--epochs", type=float, default=8.0, help="Training epochs of each student's long run.")
    parser.add_argument("--every", type=int, default=13, help="Steps between evaluated checkpoints.")
    parser.add_argument("--students", nargs="*", default=None, help="Only these students (names: 'TITE student', "
                        "'2-layer student').")
    return parser.parse_args(argv)


def checkpoint_scores(folder: Path, test) -> dict[int, float]:
    """nDCG@10 of each ``checkpoint-N`` in ``folder`` on ``test``, by step."""
    steps = sorted(int(path.name.split("-")[1]) for path in folder.glob("checkpoint-*"))
    return {step: evaluate_retrieval(str(folder / f"checkpoint-{step}"), test, no_progress=True).metrics["ndcg@10"]
            for step in steps}


def starting_point(student: str, fields: dict, folder: Path) -> str:
    """The folder a student starts from, as evaluate loads it: the TITE initialisation as it is, the teacher's folder
    with its first ``student_num_layers`` layers kept (``folder``)."""
    layers = fields.get("student_num_layers")
    if layers is None:
        return student
    from transformers import AutoModel

    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(student, folder)  # its sentence-transformers files and tokenizer
    model = AutoModel.from_pretrained(student)
    keep_first_layers(model, layers)
    model.save_pretrained(folder)
    return str(folder)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    settings = QuickstartSettings()
    output = Path(args.output_dir)
    prepare_quickstart_output(output, settings)
    data, teacher = default_data(), _teacher_path(None)
    train, test = load_beir(data, split="train"), load_beir(data, split="test")
    train_file = teacher_training_file(output, settings, teacher, train, output / "embeddings")
    result = {"teacher": evaluate_retrieval(teacher, test, cache_dir=output / "embeddings",
                                            no_progress=True).metrics["ndcg@10"],
              "epochs": args.epochs, "quickstart_epochs": settings.epochs, "train_queries": len(train.queries),
              "students": {}}
    long_run = QuickstartSettings(epochs=args.epochs)
    for label, (name, student, folder, fields) in student_plans(output, settings, teacher).items():
        if args.students and name not in args.students:
            continue
        start = starting_point(student, fields, output / "curve" / f"{folder.name}-start")
        runs = {"start": evaluate_retrieval(start, test, no_progress=True).metrics["ndcg@10"]}
        for run, run_settings, every in (("quickstart", settings, None), ("long", long_run, args.every)):
            run_folder = output / "curve" / f"{folder.name}-{run}"
            extra = {"disable_tqdm": True, **({"save_steps": every, "save_only_model": True} if every else {})}
            setup, training = student_training(student, train_file, data, run_folder, run_settings,
                                               arguments=extra, **fields)
            start = time.perf_counter()
            distill(setup, training)
            seconds = time.perf_counter() - start
            final = evaluate_retrieval(str(run_folder), test, no_progress=True).metrics["ndcg@10"]
            steps = read_record(run_folder, TRAINER_STATE)["global_step"]
            runs[run] = {"steps": steps, "train_seconds": seconds, "final": final,
                         "curve": checkpoint_scores(run_folder, test) if every else {}}
        result["students"][label] = runs
    (output / "curve.json").write_text(json.dumps(result, indent=1))
    print(render(result))
    return result


def render(result: dict) -> str:
    labels = list(result["students"])
    lines = ["| steps | " + " | ".join(labels) + " |", "|--:|" + "--:|" * len(labels),
             "| 0 (before training) | " + " | ".join(f"{runs['start']:.4f}" for runs in result["students"].values())
             + " |"]
    steps = sorted({int(s) for runs in result["students"].values() for s in runs["long"]["curve"]})
    for step in steps:
        cells = [f"{runs['long']['curve'].get(step, float('nan')):.4f}" for runs in result["students"].values()]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    quick = [f"{runs['quickstart']['final']:.4f} ({runs['quickstart']['steps']} steps, "
             f"{runs['quickstart']['train_seconds']:.0f} s)" for runs in result["students"].values()]
    lines.append(f"| quickstart ({result['quickstart_epochs']:g} epochs) | " + " | ".join(quick) + " |")
    lines.append(f"\nteacher nDCG@10 {result['teacher']:.4f} (0.9x: {0.9 * result['teacher']:.4f}); "
                 f"{result['train_queries']} train queries; the long run: {result['epochs']:g} epochs, "
                 "learning rate decaying over all of them")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
