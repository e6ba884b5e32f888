"""``dense-encoders bench``: the efficiency report (:mod:`dense_encoders.benchmarking`)."""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path

from ..settings.benchmarking import (
    CUDA_SIZES,
    DEFAULT_SIZES,
    END_TO_END_TEXTS,
    QUICK_SETTINGS,
    BenchSettings,
    default_presets,
)
from .arguments import make_parser, parse
from .checks import check_device, check_outputs

BENCH_EXAMPLES = """\
examples:
  # every row on the CPU, fp32: about 6 minutes (5-8) on 2 idle cores
  dense-encoders bench --json bench.json --plot bench.png

  # check the pipeline in seconds: tiny random models, tiny workloads (the numbers mean nothing)
  dense-encoders bench --quick --plot bench-quick.png

  # a shorter real measurement: two presets (BERT, Condenser and DE-2 always run), one round
  dense-encoders bench --presets tite-2-late tite-2-staggered --rounds 1

  # compiled vs eager: every Condenser, TITE and DE-2 row once more as torch.compile(model)
  dense-encoders bench --quick --compile --no-plot

  # on a GPU: bf16 weights (the default there, no autocast); flash attention for every row but the sdpa baseline
  dense-encoders bench --device cuda --attn flash_attention_2 --json bench-gpu.json --plot bench-gpu.png

  # on a GPU, the old setting: fp32 weights under bf16 autocast
  dense-encoders bench --device cuda --weights-dtype fp32 --autocast

  # real lengths: tokenize a BEIR folder here (bundled bert-base-uncased WordPiece), keep them as JSON
  dense-encoders bench --lengths-from data/msmarco-sample --save-lengths msmarco-lengths.json --quick

  # end to end on a GPU: 100,000 passages through encode_corpus and SentenceTransformer.encode, beside the forward
  dense-encoders bench --device cuda --end-to-end --texts data/msmarco-sample --num-texts 100000 \\
      --presets tite-2-late tite-2-staggered --doc-batch 256

  # ... and use the JSON on a GPU machine that has neither the data nor the tokenizer package
  dense-encoders bench --device cuda --lengths-from msmarco-lengths.json --presets tite-2-late tite-2-staggered \\
      --num-docs 8192 --doc-batch 1024 --num-queries 16384 --query-batch 4096
"""


def build_bench_parser():
    return make_parser(
        "dense-encoders bench",
        textwrap.fill("Efficiency report: encode texts/s of BertModel (BERT-base, sdpa: the baseline), the Condenser "
        "encoder (BERT-base dimensions), every TITE preset that reaches 512 tokens, and DE-2 built from a 12-layer "
        "BERT-base cross-encoder next to that cross-encoder's own encoder, on 32-token queries and a document length "
        "mix up to 512 (random weights and texts, fixed seed, the same batches for every model, interleaved rounds). "
        "Prints markdown tables with the ratio to BERT, the FLOP bound (BERT's multiply-adds / the model's at real "
        "lengths, and vs BERT on padded batches) and the efficiency (ratio / bound), each row's achieved GFLOP/s (2 "
        "x the multiply-adds it computes, padding included where it computes on padding, per second) as a share of "
        "the machine's GEMM rate (a square matrix product timed first in the fastest library here: torch's BLAS or "
        "numpy's at torch's thread count; on CUDA torch.mm in the rows' dtype; --gemm-size), and draws the speed-ups "
        "as a PNG. BertModel also runs on length-sorted batches (as sentence-transformers' encode feeds it), and "
        "every ratio is given against both. --lengths-from samples the lengths from a real BEIR corpus and its "
        "queries instead. On CUDA it counts host syncs per forward and measures the Triton pooling kernel's "
        "bandwidth against a device copy. Defaults: CPU fp32 with "
        f"{DEFAULT_SIZES['num_queries']} queries in batches of {DEFAULT_SIZES['query_batch']}, "
        f"{DEFAULT_SIZES['num_docs']} documents in batches of {DEFAULT_SIZES['doc_batch']}, "
        f"{DEFAULT_SIZES['rounds']} rounds (about 6 minutes on 2 idle cores); CUDA bf16 weights with "
        f"{CUDA_SIZES['num_queries']} / {CUDA_SIZES['query_batch']} and {CUDA_SIZES['num_docs']} / "
        f"{CUDA_SIZES['doc_batch']}.", width=100),
        BENCH_EXAMPLES,
        (BenchSettings,),
    )


def bench(argv: list[str]) -> int:
    # slow to import (torch, transformers' models): only when the command runs
    import torch
    import transformers

    from ..benchmarking import (
        bert_base_config,
        efficiency_report,
        format_report,
        load_lengths,
        save_lengths,
        tiny_bert_config,
    )
    from ..data.files import write_json
    from ..settings.benchmarking import MAX_LENGTH

    parser = build_bench_parser()
    (options,) = parse(parser, argv)
    if options.device is None:
        options.device = "cuda" if torch.cuda.is_available() else "cpu"
    check_device(options.device)
    check_outputs({"--json": options.json, "--plot": None if options.no_plot else options.plot,
                   "--save-lengths": options.save_lengths},
                  {"--lengths-from": options.lengths_from, "--tokenizer": options.tokenizer, "--texts": options.texts})
    try:
        device = torch.device(options.device)
    except RuntimeError as error:
        parser.error(f"--device {options.device}: {error}")
    sizes = dict(QUICK_SETTINGS if options.quick else CUDA_SIZES if device.type == "cuda" else DEFAULT_SIZES)
    for name in ("rounds", "num_queries", "query_batch", "num_docs", "doc_batch", "gemm_size"):
        if getattr(options, name) is not None:
            sizes[name] = getattr(options, name)
    sizes["warmup"] = options.warmup
    presets, bert_config = options.presets, None
    if options.quick:
        bert_config = tiny_bert_config()
        presets = [f"tiny-{name}" for name in presets or default_presets()]
    dtype = "bf16" if options.autocast else options.dtype
    lengths = None
    if options.lengths_from:
        lengths = load_lengths(options.lengths_from, options.tokenizer, trust_remote_code=options.trust_remote_code)
        if options.save_lengths:
            print(f"wrote {save_lengths(lengths, options.save_lengths)} ({len(lengths['documents'])} documents, "
                  f"{len(lengths['queries'])} queries)", file=sys.stderr)
    transformers.logging.set_verbosity_error()
    results = efficiency_report(
        device=device, dtype=dtype, weights_dtype=options.weights_dtype, lengths=lengths,
        presets=presets, attn=options.attn, seed=options.seed, cuda_graphs=options.cuda_graphs,
        compile=options.compile,
        plot_path=None if options.no_plot else options.plot, threads=options.threads, bert_config=bert_config,
        command=shlex.join(["dense-encoders", "bench", *argv]), **sizes,
    )
    print(format_report(results))
    if options.end_to_end:
        from ..benchmarking.end_to_end import end_to_end_report, format_end_to_end

        quick = "quick" if options.quick else device.type if device.type == "cuda" else "cpu"
        results["end_to_end"] = end_to_end_report(
            device=device, weights_dtype=results["config"]["weights_dtype"], presets=presets or default_presets(),
            bert_config=bert_config or bert_base_config(), texts=options.texts,
            num_texts=options.num_texts or END_TO_END_TEXTS[quick], batch_size=sizes["doc_batch"],
            max_length=QUICK_SETTINGS["max_length"] if options.quick else MAX_LENGTH,
            seed=options.seed, say=lambda message: print(message, file=sys.stderr))
        print()
        print("\n".join(format_end_to_end(results["end_to_end"])))
    if options.json:
        path = Path(options.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, results, sort_keys=False)
        print(f"wrote {path}")
    return 0


__all__ = ["CUDA_SIZES", "bench", "build_bench_parser"]
