"""The ``dense-encoders`` command line.

Subcommands:
  quickstart   pre-train a tiny Condenser on the bundled corpus, save, reload, encode (offline)
  pretrain     Condenser / coCondenser / TITE pre-training on transformers.Trainer
  evaluate     retrieval evaluation of an encoder on a BEIR folder or a pairs file
  score-teacher  score (query, document) candidates of a run with a cross-encoder -> training jsonl
  distill      distil teacher scores into any encoder (Margin-MSE, KL, InfoNCE, M3SE, ...)

Run ``dense-encoders SUBCOMMAND --help`` for every flag.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PRETRAIN_EXAMPLES = """\
examples:
  # tiny Condenser from scratch on the bundled corpus (seconds on a laptop CPU)
  dense-encoders pretrain condenser --output_dir runs/condenser-tiny --max_steps 50

  # paper recipe: warm start from BERT-base, 6 early + 6 late layers, 2 head layers
  torchrun --nproc_per_node 8 -m dense_encoders.cli pretrain condenser \\
      --backbone bert-base-uncased --skip_from 6 --corpus corpus.jsonl --max_seq_length 128 \\
      --output_dir runs/condenser --per_device_train_batch_size 64 --max_steps 100000 --bf16

  # coCondenser with a gradient cache (large contrastive batch, small memory)
  dense-encoders pretrain cocondenser --init_from runs/condenser --corpus corpus.jsonl \\
      --output_dir runs/cocondenser --per_device_train_batch_size 1024 --grad_cache_chunk_size 64

  # every flag may also come from a JSON or YAML file
  dense-encoders pretrain condenser pretrain.yaml
"""


def _pretrain(argv: list[str]) -> int:
    from transformers import HfArgumentParser

    from .trainer.pretraining import ARCHITECTURES, PreTrainingArguments, PreTrainingSetup, pretrain

    parser = HfArgumentParser(
        (PreTrainingSetup, PreTrainingArguments),
        prog="dense-encoders pretrain {condenser,cocondenser}",
        description="Condenser / coCondenser pre-training (Gao & Callan 2021, 2022) on transformers.Trainer.",
        epilog=PRETRAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    architecture, rest = argv[0], argv[1:]
    if architecture not in ARCHITECTURES:
        print(f"dense-encoders pretrain: unknown architecture {architecture!r}; choose one of "
              f"{sorted(ARCHITECTURES)}.", file=sys.stderr)
        return 2
    if len(rest) == 1 and rest[0].endswith((".json", ".yaml", ".yml")):
        path = Path(rest[0])
        if not path.is_file():
            print(f"dense-encoders pretrain: config file {path} does not exist.", file=sys.stderr)
            return 2
        read = parser.parse_json_file if path.suffix == ".json" else parser.parse_yaml_file
        setup, args = read(str(path))
        setup.architecture = architecture
    else:
        setup, args = parser.parse_args_into_dataclasses(["--architecture", architecture, *rest])
    output = pretrain(setup, args)
    _end_distributed()
    print(f"Saved the pre-trained {architecture} to {output}")
    return 0


def _end_distributed() -> None:
    """Under torchrun: shut the process group down together, not at interpreter exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _quickstart(argv: list[str]) -> int:
    from .quickstart import run_quickstart

    parser = argparse.ArgumentParser(
        prog="dense-encoders quickstart",
        description="Offline first run: pre-train a tiny Condenser on the bundled corpus for a few steps, save it "
        "(safetensors + remote code + sentence-transformers files), reload it with AutoModel and "
        "SentenceTransformer, and encode two sentences.",
    )
    parser.add_argument("--output-dir", default="quickstart-output", help="Where to write the model (default: %(default)s).")
    parser.add_argument("--max-steps", type=int, default=100, help="Pre-training steps (default: %(default)s).")
    parser.add_argument("--seed", type=int, default=42)
    options = parser.parse_args(argv)
    run_quickstart(output_dir=options.output_dir, max_steps=options.max_steps, seed=options.seed)
    return 0


EVALUATE_EXAMPLES = """\
examples:
  # any sentence-transformers model, as its own configuration prescribes
  dense-encoders evaluate sentence-transformers/all-MiniLM-L6-v2 data/beir-scifact --output scifact.json

  # a plain transformers checkpoint: name its pooling; our models (TITE, Condenser) need none
  dense-encoders evaluate bert-base-uncased data/beir-scifact --pooling cls --similarity dot

  # prompts, separate max lengths, cached embeddings, FAISS, and a cross-encoder re-ranking the top 100
  dense-encoders evaluate runs/tite data/msmarco --query-max-length 32 --document-max-length 512 \\
      --query-prompt "query: " --cache-dir .embeddings --backend faiss --rerank cross-encoder/ms-marco-MiniLM-L6-v2
"""


def _evaluate(argv: list[str]) -> int:
    from .evaluation import evaluate_retrieval, format_summary
    from .evaluation.metrics import DEFAULT_MEASURES

    parser = argparse.ArgumentParser(
        prog="dense-encoders evaluate",
        description="Encode a corpus and its queries, search (exact or FAISS), and compute "
        f"{', '.join(DEFAULT_MEASURES)} with ir-measures; writes a results JSON.",
        epilog=EVALUATE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="A folder or Hub id: sentence-transformers model, our model, or any AutoModel.")
    parser.add_argument("data", help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or a pairs file.")
    parser.add_argument("--split", default="test", help="qrels split of a BEIR folder (default: %(default)s).")
    parser.add_argument("--pooling", choices=["cls", "mean"], help="Pooling of a plain transformers checkpoint.")
    parser.add_argument("--similarity", choices=["cosine", "dot"], help="Default: what the model declares.")
    parser.add_argument("--query-prompt", help="Prefix of every query (default: the model's 'query' prompt).")
    parser.add_argument("--document-prompt", help="Prefix of every document (default: the model's 'document' prompt).")
    parser.add_argument("--query-max-length", type=int, help="Token limit of queries (default: the model's).")
    parser.add_argument("--document-max-length", type=int, help="Token limit of documents (default: the model's).")
    parser.add_argument("--batch-size", type=int, default=32, help="Encoding batch size (default: %(default)s).")
    parser.add_argument("--k", type=int, default=1000, help="Documents retrieved per query (default: %(default)s).")
    parser.add_argument("--backend", choices=["exact", "faiss"], default="exact", help="Search (default: %(default)s).")
    parser.add_argument("--cache-dir", help="Cache embeddings here (safetensors), keyed by model, settings and texts.")
    parser.add_argument("--rerank", metavar="CROSS_ENCODER", help="Re-score the top of the run with this cross-encoder.")
    parser.add_argument("--rerank-top-k", type=int, default=100, help="Documents re-scored per query (default: %(default)s).")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: sentence-transformers' choice).")
    parser.add_argument("--output", help="Write the results JSON here.")
    parser.add_argument("--run-output", help="Write the first-stage run here (TREC format).")
    parser.add_argument("--no-progress", action="store_true", help="No progress bars.")
    options = parser.parse_args(argv)
    results = evaluate_retrieval(
        options.model,
        options.data,
        split=options.split,
        k=options.k,
        similarity=options.similarity,
        search_backend=options.backend,
        cross_encoder=options.rerank,
        rerank_top_k=options.rerank_top_k,
        output=options.output,
        run_output=options.run_output,
        pooling=options.pooling,
        device=options.device,
        batch_size=options.batch_size,
        query_prompt=options.query_prompt,
        document_prompt=options.document_prompt,
        query_max_length=options.query_max_length,
        document_max_length=options.document_max_length,
        cache_dir=options.cache_dir,
        show_progress_bar=not options.no_progress,
    )
    print(format_summary(results))
    if options.output:
        print(f"results: {options.output}")
    return 0


DISTILL_EXAMPLES = """\
examples:
  # teacher scores for a run's top 100 with a cross-encoder, then TITE's fine-tuning losses
  dense-encoders score-teacher cross-encoder/ms-marco-MiniLM-L6-v2 --run train.run --data msmarco --output train.jsonl
  dense-encoders distill --student runs/tite --train_file train.jsonl --corpus msmarco \\
      --losses margin_mse+kl+infonce --output_dir runs/tite-msmarco --num_train_epochs 1

  # a 2-layer student cut from all-MiniLM-L6-v2 (pooling and cosine taken from its own configuration)
  dense-encoders distill --student sentence-transformers/all-MiniLM-L6-v2 --student_num_layers 2 \\
      --train_file train.jsonl --losses m3se+sce:0.5 --sce_temperature 4 --output_dir runs/minilm-2

  # data parallel with in-batch negatives across processes
  torchrun --nproc_per_node 2 -m dense_encoders.cli distill --student ... --train_file ... --output_dir ...
"""


def _distill(argv: list[str]) -> int:
    from transformers import HfArgumentParser

    from .trainer.distillation import DistillationArguments, DistillationSetup, distill

    parser = HfArgumentParser(
        (DistillationSetup, DistillationArguments),
        prog="dense-encoders distill",
        description="Distil teacher scores into a dual encoder on transformers.Trainer (seed 003, TITE Sec. 3.4).",
        epilog=DISTILL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")):
        path = Path(argv[0])
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        read = parser.parse_json_file if path.suffix == ".json" else parser.parse_yaml_file
        setup, args = read(str(path))
    else:
        setup, args = parser.parse_args_into_dataclasses(argv)
    output = distill(setup, args)
    _end_distributed()
    print(f"Saved the student to {output}")
    return 0


def _score_teacher(argv: list[str]) -> int:
    from .trainer.teacher import main as score_teacher_main

    return score_teacher_main(argv)


COMMANDS = {
    "quickstart": _quickstart,
    "pretrain": _pretrain,
    "evaluate": _evaluate,
    "score-teacher": _score_teacher,
    "distill": _distill,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"dense-encoders: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:
        return COMMANDS[argv[0]](argv[1:])
    except (ValueError, FileNotFoundError) as error:  # bad flags, paths or files: say what, not a traceback
        print(f"dense-encoders {argv[0]}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
