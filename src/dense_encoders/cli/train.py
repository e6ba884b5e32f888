"""Training subcommands: ``pretrain``, ``distill``, ``score-teacher`` (its teacher file) and ``infuse``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..recipes import load_recipe, recipe_differences
from .arguments import make_parser, parse
from .checks import check_device, check_model, check_outputs
from .training_arguments import add_training_arguments

# ------------------------------------------------------------------------------------------------ pretrain

PRETRAIN_EXAMPLES = """\
examples:
  # tiny Condenser from scratch on the bundled corpus (seconds on a laptop CPU)
  dense-encoders pretrain condenser --output-dir runs/condenser-tiny --max-steps 50

  # the paper's recipe (`dense-encoders recipes condenser`): BERT-base warm start, 6 + 6 layers, 2 head layers
  torchrun --nproc_per_node 8 -m dense_encoders.cli pretrain condenser --recipe condenser \\
      --corpus corpus.jsonl --output-dir runs/condenser --per-device-train-batch-size 64

  # coCondenser with a gradient cache (large contrastive batch, small memory)
  dense-encoders pretrain cocondenser --init-from runs/condenser --corpus corpus.jsonl \\
      --output-dir runs/cocondenser --per-device-train-batch-size 1024 --grad-cache-chunk-size 64

  # TITE (MAE + bag-of-words objective) with the paper's recipe; flags override it
  dense-encoders pretrain tite --recipe tite-pretraining --corpus corpus.jsonl --output-dir runs/tite-2-late \\
      --per-device-train-batch-size 32 --gradient-accumulation-steps 8

  # another preset of the paper's Table 3, package defaults (a short run)
  dense-encoders pretrain tite --preset tite-2-staggered --corpus corpus.jsonl --output-dir runs/tite-staggered

  # every flag may also come from a JSON or YAML file
  dense-encoders pretrain condenser pretrain.yaml
"""


PRETRAIN_DESCRIPTION = (
    "Pre-training on transformers.Trainer: Condenser / coCondenser (Gao & Callan 2021, 2022) and TITE (Schlatt et al. "
    "2025). The first argument names the architecture; every TrainingArguments flag applies. `dense-encoders pretrain "
    "ARCHITECTURE --help` lists that architecture's own options first, then the TrainingArguments flags.")


def _pretrain_parser(dataclasses: tuple, architecture: str | None = None, **options):
    from ..settings.pretraining import ARCHITECTURE_NAMES

    prog = f"dense-encoders pretrain {architecture or '{' + ','.join(ARCHITECTURE_NAMES) + '}'}"
    # the architecture is the first argument (its flag is not listed); a config file's `architecture` must agree
    hidden = {"architecture", *options.pop("hidden", ())}
    return make_parser(prog, PRETRAIN_DESCRIPTION, PRETRAIN_EXAMPLES, dataclasses, usage=f"{prog} [FLAGS]",
                       hidden=hidden, **options)


def build_pretrain_parser():
    """The parser of ``pretrain``'s flags: :class:`~dense_encoders.settings.pretraining.PreTrainingSetup` and
    :class:`~dense_encoders.trainer.PreTrainingArguments` (every ``TrainingArguments`` flag)."""
    # slow to import (transformers' Trainer, torch): only when the command runs
    from ..trainer.pretraining import PreTrainingArguments, PreTrainingSetup

    return _pretrain_parser((PreTrainingSetup, PreTrainingArguments))


def build_pretrain_help_parser(argv: list[str]):
    """``pretrain [ARCHITECTURE] --help``: the architecture's own options (those of the others hidden), then every
    ``TrainingArguments`` flag (:func:`~.training_arguments.add_training_arguments`), without importing torch."""
    from ..settings.pretraining import (
        ARCHITECTURE_NAMES,
        PreTrainingSetup,
        PreTrainingTrainerFields,
        preset_help,
        unread_fields,
    )

    architecture = argv[0] if argv and argv[0] in ARCHITECTURE_NAMES else None
    if architecture is None:
        options = dict(group_title="options of every architecture (`dense-encoders pretrain ARCHITECTURE --help`: "
                       "one architecture's)")
    else:
        options = dict(group_title=f"{architecture} options", hidden=unread_fields(architecture),
                       help_texts={"preset": preset_help(architecture)})
    return add_training_arguments(_pretrain_parser((PreTrainingSetup, PreTrainingTrainerFields), architecture,
                                                   **options))


def pretrain(argv: list[str]) -> int:
    from ..settings.pretraining import ARCHITECTURE_NAMES

    if not argv or argv[0] in ("-h", "--help"):
        print(build_pretrain_help_parser(argv).format_help(), end="")
        return 0
    architecture, rest = argv[0], argv[1:]
    if architecture not in ARCHITECTURE_NAMES:
        print(f"dense-encoders pretrain: unknown architecture {architecture!r}; choose one of "
              f"{sorted(ARCHITECTURE_NAMES)}.", file=sys.stderr)
        return 2
    # slow to import (transformers' Trainer, torch): only when the command runs
    from ..trainer.pretraining import pretrain as run_pretraining

    parser = build_pretrain_parser()
    parser.set_defaults(architecture=architecture)
    setup, args = parse(parser, rest, command=f"pretrain {architecture}")
    if setup.architecture != architecture:
        raise ValueError(f"--architecture {setup.architecture} contradicts the first argument, {architecture}; "
                         "name the architecture once, as the first argument")
    check_outputs({"--output-dir": args.output_dir},
                  {"--corpus": setup.corpus, "--init-from": setup.init_from, "--backbone": setup.backbone,
                   "--tokenizer": setup.tokenizer})
    output = run_pretraining(setup, args)
    end_distributed()
    print(f"Saved the pre-trained {architecture} to {output}")
    print(recipe_summary(f"pretrain {architecture}", setup.recipe, {**args.to_dict(), **vars(setup)}),
          file=sys.stderr)
    return 0


def recipe_summary(command: str, recipe: str | None, values: dict) -> str:
    """One line saying whose settings a run trained with: a paper's recipe (and what the command line changed
    of it), or the package defaults. Printed after the run, so that errors stay one or two lines."""
    if recipe is None:
        return (f"dense-encoders {command}: trained without --recipe, with the package defaults (a short run, not "
                "a paper's settings); `dense-encoders recipes` lists the papers' recipes.")
    loaded = load_recipe(recipe)
    changed = recipe_differences(loaded, values)
    overridden = ", ".join(f"{name}={actual}" for name, (_, actual) in changed.items()) or "nothing"
    return (f"dense-encoders {command}: trained with the recipe {loaded.name} ({loaded.paper}); "
            f"overridden: {overridden}.")


def end_distributed() -> None:
    """Under torchrun: shut the process group down together, not at interpreter exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ distill

DISTILL_EXAMPLES = """\
examples:
  # teacher scores for a run's top 100 with a cross-encoder, then TITE's fine-tuning losses
  dense-encoders score-teacher cross-encoder/ms-marco-MiniLM-L6-v2 --run train.run --data msmarco --output train.jsonl
  dense-encoders distill --recipe tite-fine-tuning --student runs/tite --train-file train.jsonl --corpus msmarco \\
      --output-dir runs/tite-msmarco --per-device-train-batch-size 64

  # In Defense of Dual-Encoders: M3SE over the teacher's top 20 (`dense-encoders recipes menon-m3se`)
  dense-encoders distill --recipe menon-m3se --student bert-base-uncased --student-num-layers 6 \\
      --train-file train.jsonl --corpus msmarco --output-dir runs/m3se

  # a 2-layer student cut from all-MiniLM-L6-v2 (pooling and cosine taken from its own configuration)
  dense-encoders distill --student sentence-transformers/all-MiniLM-L6-v2 --student-num-layers 2 \\
      --train-file train.jsonl --corpus msmarco --losses m3se+sce:0.5 --sce-temperature 4 --output-dir runs/minilm-2

  # M3SE / RankDistil-B with judged positives P from qrels (grade >= 2) instead of the teacher's best document
  dense-encoders distill --student runs/tite --train-file train.jsonl --corpus msmarco \\
      --qrels msmarco/qrels/train.tsv --relevance-level 2 --losses m3se+rankdistil_b --output-dir runs/tite-m3se

  # data parallel with in-batch negatives across processes
  torchrun --nproc_per_node 2 -m dense_encoders.cli distill --student ... --train-file ... --output-dir ...

  # every flag may also come from a JSON or YAML file
  dense-encoders distill distill.yaml
"""


DISTILL_DESCRIPTION = (
    "Distil teacher scores into a dual encoder on transformers.Trainer (Menon et al. 2022, In Defense of "
    "Dual-Encoders for Neural Ranking; Schlatt et al. 2025, TITE: Token-Independent Text Encoder for "
    "Information Retrieval, Sec. 3.4). Its own options come first, then every TrainingArguments flag.")


def _distill_parser(dataclasses: tuple, **options):
    prog = "dense-encoders distill"
    return make_parser(prog, DISTILL_DESCRIPTION, DISTILL_EXAMPLES, dataclasses, usage=f"{prog} [FLAGS]", **options)


def build_distill_parser():
    """The parser of ``distill``'s flags: :class:`~dense_encoders.settings.distillation.DistillationSetup` and
    :class:`~dense_encoders.trainer.DistillationArguments` (every ``TrainingArguments`` flag)."""
    # slow to import (transformers' Trainer, torch): only when the command runs
    from ..trainer.distillation import DistillationArguments, DistillationSetup

    return _distill_parser((DistillationSetup, DistillationArguments))


def build_distill_help_parser(argv: list[str]):
    """``distill --help``: its own options, then every ``TrainingArguments`` flag, without importing torch."""
    from ..settings.distillation import DistillationSetup, DistillationTrainerFields

    return add_training_arguments(_distill_parser((DistillationSetup, DistillationTrainerFields),
                                                  group_title="distill options"))


def distill(argv: list[str]) -> int:
    # slow to import (sentence-transformers, torch): only when the command runs
    from ..trainer.distillation import distill as run_distillation

    setup, args = parse(build_distill_parser(), argv, command="distill")
    check_model(setup.student, "--student")
    check_outputs({"--output-dir": args.output_dir},
                  {"--student": setup.student, "--train-file": setup.train_file, "--corpus": setup.corpus,
                   "--queries": setup.queries, "--qrels": setup.qrels})
    output = run_distillation(setup, args)
    end_distributed()
    print(f"Saved the student to {output}")
    print(recipe_summary("distill", setup.recipe, {**args.to_dict(), **vars(setup)}), file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------ score-teacher

SCORE_TEACHER_EXAMPLES = """\
examples:
  # BM25 (or any first stage) top 100 of the MS MARCO train queries, scored by a cross-encoder
  dense-encoders score-teacher cross-encoder/ms-marco-MiniLM-L6-v2 --run bm25.train.trec \\
      --data data/msmarco --split train --output teacher/msmarco-train.jsonl --top-k 100 --batch-size 128

  # a Hub dataset's train queries and corpus (BEIR's layout: qrels from BeIR/scifact-qrels)
  dense-encoders score-teacher cross-encoder/ms-marco-MiniLM-L6-v2 --run bm25.train.trec --data BeIR/scifact \\
      --split train --output teacher/scifact-train.jsonl

  # plain queries / corpus files, document texts inlined in the output
  dense-encoders score-teacher runs/my-cross-encoder --run run.trec --queries queries.jsonl \\
      --corpus corpus.jsonl --output teacher.jsonl --include-texts

  # a bi-encoder as the teacher: the similarity it declares (dot or cosine) of its query and document vectors
  dense-encoders score-teacher sentence-transformers/all-MiniLM-L6-v2 --run bm25.train.trec --data data/msmarco \\
      --output teacher.jsonl

  # interrupted? run the same command again: finished queries are kept and skipped
"""


def build_score_teacher_parser():
    from ..settings.teacher import TeacherScoringSettings

    parser = make_parser(
        "dense-encoders score-teacher",
        "Score each query's top-k documents of a run with a cross-encoder (raw logits) or a bi-encoder (the "
        "similarity it declares of its query and document vectors) and write the distillation training file "
        "(jsonl, one query per line, documents by descending teacher score). "
        "Resumable: rerunning the same command continues an interrupted output.",
        SCORE_TEACHER_EXAMPLES,
        (TeacherScoringSettings,),
    )
    parser.add_argument("cross_encoder", metavar="teacher",
                        help="The teacher, a local path or a Hub id: a cross-encoder (its config declares a "
                        "sequence-classification head), or a bi-encoder (a sentence-transformers model, one of ours, "
                        "or a plain checkpoint with --pooling).")
    return parser


def score_teacher(argv: list[str]) -> int:
    """``dense-encoders score-teacher``; errors are raised (ValueError / FileNotFoundError)."""
    # slow to import (sentence-transformers, torch): only when the command runs
    from ..data.retrieval import load_beir, read_corpus_jsonl, read_queries_jsonl
    from ..trainer.teacher import score_teacher as run_scoring

    options, positionals = parse(build_score_teacher_parser(), argv)
    check_device(options.device)
    check_model(positionals.cross_encoder, "teacher")
    check_outputs({"--output": options.output},
                  {"CROSS_ENCODER": positionals.cross_encoder, "--run": options.run, "--data": options.data,
                   "--queries": options.queries, "--corpus": options.corpus})
    if options.data is not None:
        dataset = load_beir(options.data, split=options.split, revision=options.dataset_revision)
        queries, corpus = dataset.queries, dataset.corpus
    else:
        queries, corpus = read_queries_jsonl(options.queries), read_corpus_jsonl(options.corpus)
    stats = run_scoring(
        positionals.cross_encoder,
        options.run,
        options.output,
        queries=queries,
        corpus=corpus,
        top_k=options.top_k,
        batch_size=options.batch_size,
        include_texts=options.include_texts,
        show_progress_bar=not options.no_progress,
        device=options.device,
        allow_missing_weights=options.allow_missing_weights,
        trust_remote_code=options.trust_remote_code,
        pooling=options.pooling,
    )
    print(
        f"Wrote teacher scores of {stats['queries_written']} queries ({stats['pairs_scored']} pairs) to "
        f"{options.output}; {stats['queries_skipped_already_done']} queries were already done."
    )
    return 0


# ------------------------------------------------------------------------------------------------ infuse

INFUSE_EXAMPLES = """\
examples:
  # the paper's DE-2-CE and DE-2-Rand (MNRL + BM25 negatives, the recipe of the sentence-transformers
  # script it follows), then Table 1 against a baseline DE
  dense-encoders infuse --recipe ce-infusion --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 \\
      --train-data msmarco --output-dir runs/de-2-ce --also-random --eval-data nfcorpus \\
      --baseline sentence-transformers/msmarco-MiniLM-L-12-v3 --rerank-top-k 50

  # distil the cross-encoder's own scores instead
  dense-encoders infuse --cross-encoder runs/my-ce --train-data scifact --method distill --output-dir runs/de-2-ce-kd
"""


def build_infuse_parser():
    from ..settings.infusion import InfusionArguments

    return make_parser(
        "dense-encoders infuse",
        "Build a dual encoder from a cross-encoder's embeddings and first layer(s) (DE-2-CE of "
        "Can Cross Encoders Produce Useful Sentence Embeddings?), train it, and optionally report "
        "retrieve and retrieve+rerank quality and encode speed (Table 1).",
        INFUSE_EXAMPLES,
        (InfusionArguments,),
    )


def infuse(argv: list[str]) -> int:
    # slow to import (sentence-transformers, torch): only when the command runs
    from ..data.run_records import INFUSION_REPORT
    from ..evaluation.infusion_report import format_report, retrieve_rerank_report
    from ..trainer.infusion import record_infusion_report, train_infused

    (args,) = parse(build_infuse_parser(), argv, command="infuse")
    check_outputs({"--output-dir": args.output_dir},
                  {"--cross-encoder": args.cross_encoder, "--train-data": args.train_data,
                   "--eval-data": args.eval_data, "--baseline": args.baseline})
    trained = train_infused(args)
    for name, folder in trained.items():
        print(f"{name}: {folder}")
    if args.eval_data:
        models = ({"baseline DE": args.baseline} if args.baseline else {}) | trained
        report = retrieve_rerank_report(args.cross_encoder, models, args.eval_data, split=args.eval_split,
                                        top_k=args.rerank_top_k, batch_size=args.batch_size,
                                        output=Path(args.output_dir) / INFUSION_REPORT,
                                        trust_remote_code=args.trust_remote_code,
                                        revision=args.dataset_revisions()[1],
                                        **args.graded_pair_options(args.eval_data))
        record_infusion_report(trained, report)  # each model's card reports its row
        print(format_report(report))
    print(recipe_summary("infuse", args.recipe, vars(args)), file=sys.stderr)
    return 0


__all__ = [
    "build_distill_help_parser",
    "build_distill_parser",
    "build_infuse_parser",
    "build_pretrain_help_parser",
    "build_pretrain_parser",
    "build_score_teacher_parser",
    "distill",
    "end_distributed",
    "infuse",
    "pretrain",
    "score_teacher",
]
