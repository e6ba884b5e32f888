"""Inference throughput of TITE (every Table 3 variant, and TITE without pooling) vs BERT-base.

Every row encodes the SAME batches of the SAME two workloads; texts/s counts texts per second.

Rows
    BERT (sdpa)           transformers' ``BertModel`` (12 x 768, 12 heads, FFN 3072, no pooler),
                          ``attn_implementation="sdpa"``: the baseline every ratio refers to
    tite-2-late ...       every Table 3 preset of ``dense_encoders.models.tite.presets`` (7 rows)
    tite-no-pooling       TITE without pooling (a BERT-shaped rotary encoder, packed / unpadded)

TITE rows use sdpa too, or ``--attn eager``; BERT always uses sdpa.

Workloads (fixed seed, identical for every row)
    queries    ``--num-queries`` texts of exactly 32 tokens ([CLS] ... [SEP]), ``--query-batch`` per batch.
    documents  ``--num-docs`` texts with a realistic length mix up to 512 tokens, ``--doc-batch`` per
               batch, in random (unsorted) order and padded to the longest text of their batch, with an
               attention_mask, as a user's tokenizer would hand them over. Lengths (WordPiece tokens
               incl. [CLS]/[SEP]) are a mixture:
                 * 88 % "passages" (MS MARCO-like): log-normal, median 80, sigma 0.5 (about 95 % below
                   180 tokens), clipped to [8, 512];
                 * 12 % "long documents" (e.g. MS MARCO documents / web pages cut at 512): log-normal,
                   median 380, sigma 0.5, clipped to [64, 512] (about 28 % of them hit 512).
               The header prints mean / median / max length and the padding fraction of the batches.

Timing
    Inference only: ``eval()``, ``torch.inference_mode()``, fp32 on CPU (``--dtype bf16``: bf16
    autocast; the default on CUDA). Warm-up (untimed, ``--warmup`` times per model): the first query
    batch and the first 4 texts of the first document batch at its full padded width. Then
    ``--rounds`` rounds; inside a round every batch is run by every model back to back (the model
    order rotates from batch to batch and round to round), so machine noise (other jobs on the box)
    is spread over all rows alike. A round's texts/s = texts / the round's summed batch times; the
    table reports the MEDIAN round, the min-max range over rounds, and "vs BERT (min)", the ratio of
    best-case texts/s (every batch at its minimum time over the rounds; noise only ever adds time).
    The JSON also holds the per-batch-median texts/s and a same-round paired ratio to BERT.

FLOP bound
    Multiply-adds (MACs) of the matrix products, per layer, from the config, for every text at its
    REAL length (no padding), summed over the workload. For a layer with input length ``Lin``, output
    length ``Lout`` (``config.sequence_lengths``), input width ``din``, width ``d``, FFN width ``f``:
      no pooling : QKV 3*Lin*din*d, scores + weighted sum 2*Lin*Lin*d, out-proj Lin*d*d, FFN 2*Lin*d*f
      pre        : pool first, everything on the pooled sequence:
                   QKV 3*Lout*din*d, attention 2*Lout*Lout*d, out-proj Lout*d*d, FFN 2*Lout*d*f
      intra      : Q Lout*din*d, K/V 2*Lin*din*d, attention 2*Lout*Lin*d (pooled queries, unpooled
                   keys), out-proj Lout*d*d, FFN 2*Lout*d*f
      post       : QKV 3*Lin*din*d, attention 2*Lin*Lin*d, out-proj Lin*d*d (the implementation pools
                   after the residual, i.e. after the output projection), FFN 2*Lout*d*f
    plus, for the upscaled model, the embedding down-projection (L * d_final * d_first). Lookups,
    LayerNorms, softmax, RoPE, GELU and the pooling means are not counted.
    FLOP-bound ratio = BERT's MACs / the row's MACs (both at real lengths): the speed-up a model
    could show if time were proportional to real work. "bound vs padded BERT" uses BERT's MACs on the
    PADDED batches instead (what BertModel actually computes; TITE unpads and never computes on
    padding), so on documents it is the more relevant ceiling. efficiency = measured ratio /
    FLOP-bound ratio.

Usage (repository root)::

    python benchmarks/tite_throughput.py     # defaults: 3-4 min on 2 idle CPU cores (2m55s, 3m45s
                                             # measured); 12-14 min while other jobs shared them
    python benchmarks/tite_throughput.py --presets tite-2-late tite-2-staggered --rounds 5
    python benchmarks/tite_throughput.py --device cuda --num-queries 4096 --num-docs 2048 \\
        --query-batch 256 --doc-batch 64 --json tite_throughput.json
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from _report import command_line, device_name, render_table, run_script, synchronize

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import transformers
from transformers import BertConfig, BertModel

from dense_encoders.benchmarking import (  # the FLOP bound, workloads and summaries shared with `dense-encoders bench`
    LONG_FRACTION,
    LONG_MEDIAN,
    LONG_SIGMA,
    MAX_LENGTH,
    PASSAGE_MEDIAN,
    PASSAGE_SIGMA,
    QUERY_LENGTH,
    VOCAB_SIZE,
    bert_macs,
    cpu_pressure,
    document_lengths,
    make_batches,
    summarize,
    tite_macs,
    workload_stats,
)
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.presets import TITE_PRESETS, tite_preset

BERT_ROW = "BERT (sdpa)"
TABLE3_PRESETS = (
    "tite-2-late",
    "tite-2-staggered",
    "tite-3-late",
    "tite-3-staggered",
    "tite-2-late-pre",
    "tite-2-late-post",
    "tite-2-late-upscale",
)
DEFAULT_PRESETS = (*TABLE3_PRESETS, "tite-no-pooling")
# speed-up targets (documents and queries alike): measured speed-up over BERT (sdpa)
TARGETS = {"tite-2-late": 3.5, "tite-2-staggered": 6.0}


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Inference throughput (texts/s) of the TITE Table 3 variants vs BERT-base (sdpa), "
        "on 32-token queries and a realistic document length mix, with FLOP-bound ratios.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"),
        help="Where to run.",
    )
    parser.add_argument(
        "--dtype", default=None, choices=("fp32", "bf16"),
        help="fp32, or bf16 autocast (weights stay fp32). Default: fp32 on cpu, bf16 on cuda.",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved timed rounds; the median is reported.")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed warm-up passes per model (first query batch "
                        "+ 4 texts of the first document batch).")
    parser.add_argument("--num-queries", type=int, default=128, help="Queries (32 tokens each) per round.")
    parser.add_argument("--query-batch", type=int, default=64, help="Queries per batch.")
    parser.add_argument("--num-docs", type=int, default=48, help="Documents (length mix up to 512) per round.")
    parser.add_argument("--doc-batch", type=int, default=16, help="Documents per batch.")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice).")
    parser.add_argument(
        "--presets", nargs="+", default=list(DEFAULT_PRESETS), choices=sorted(TITE_PRESETS), metavar="PRESET",
        help=f"TITE presets to run (BERT always runs). Choices: {', '.join(sorted(TITE_PRESETS))}.",
    )
    parser.add_argument(
        "--attn", default="sdpa", choices=("sdpa", "eager"),
        help="Attention back-end of the TITE rows (BERT always uses sdpa).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed for weights and workloads.")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="Also write the results as JSON.")
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this torch build.")
    for name in ("rounds", "num_queries", "query_batch", "num_docs", "doc_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    args.presets = list(dict.fromkeys(args.presets))  # drop repeats, keep order
    for name in args.presets:
        limit = TITE_PRESETS[name].get("max_position_embeddings", 512)
        if limit < MAX_LENGTH:
            parser.error(
                f"--presets {name}: it reaches one vector only up to {limit} tokens, but documents go up "
                f"to {MAX_LENGTH}; leave it out."
            )
    return args


# ------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------


class Row:
    def __init__(self, name: str, model: torch.nn.Module, macs, kind: str):
        self.name = name
        self.model = model
        self.macs = macs  # length -> multiply-adds of one text
        self.kind = kind
        self.parameters = sum(p.numel() for p in model.parameters())
        self.attention = model.config._attn_implementation
        self.output_shape = None

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One vector per text: TITE's pooler_output, BERT's [CLS] state (no pooler layer)."""
        output = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return output.last_hidden_state[:, 0] if self.kind == "bert" else output.pooler_output


def build_rows(args: argparse.Namespace, device: torch.device) -> tuple[list[Row], BertConfig]:
    bert_config = BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=MAX_LENGTH,
    )
    torch.manual_seed(args.seed)
    bert = BertModel._from_config(bert_config, attn_implementation="sdpa", add_pooling_layer=False)
    if bert.config._attn_implementation != "sdpa":
        raise RuntimeError(f"BertModel came up with attention {bert.config._attn_implementation!r}, not sdpa")
    rows = [Row(BERT_ROW, bert, lambda length: bert_macs(bert_config, length), "bert")]
    for name in args.presets:
        config = tite_preset(name, vocab_size=VOCAB_SIZE)
        config._attn_implementation = args.attn
        torch.manual_seed(args.seed)
        model = TiteModel(config)
        if model.config._attn_implementation != args.attn:
            raise RuntimeError(f"{name} came up with attention {model.config._attn_implementation!r}, not {args.attn}")
        rows.append(Row(name, model, lambda length, config=config: tite_macs(config, length), "tite"))
    for row in rows:
        row.model.to(device).eval()
    return rows, bert_config


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------




def autocast(device: torch.device, dtype: str):
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def time_batch(row: Row, batch: dict[str, torch.Tensor], device: torch.device, dtype: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(device, dtype):
        output = row(batch)
    synchronize(device)
    elapsed = time.perf_counter() - start
    expected = (batch["input_ids"].shape[0], row.model.config.hidden_size)
    if tuple(output.shape) != expected or not bool(torch.isfinite(output).all()):
        raise RuntimeError(f"{row.name}: pooler_output {tuple(output.shape)} (expected {expected}) or non-finite")
    return elapsed


def warmup_batches(batches: dict[str, list[dict[str, torch.Tensor]]], count: int) -> list[dict[str, torch.Tensor]]:
    """Untimed: the first query batch, and the first 4 texts of the first document batch at that
    batch's full padded width (the longest shapes, a quarter of the cost); ``count`` times each."""
    first_docs = {key: value[:4] for key, value in batches["documents"][0].items()}
    return [batches["queries"][0], first_docs] * count


def run(args: argparse.Namespace) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(args.seed)
    query_lengths = [QUERY_LENGTH] * args.num_queries
    doc_lengths = document_lengths(args.num_docs, generator)
    workloads = {
        "queries": (query_lengths, make_batches(query_lengths, args.query_batch, generator)),
        "documents": (doc_lengths, make_batches(doc_lengths, args.doc_batch, generator)),
    }
    rows, bert_config = build_rows(args, device)
    moved = {name: [{k: v.to(device) for k, v in b.items()} for b in batches]
             for name, (_, batches) in workloads.items()}
    print(f"built {len(rows)} models; warming up", file=sys.stderr, flush=True)
    for row in rows:
        for batch in warmup_batches(moved, args.warmup):
            time_batch(row, batch, device, args.dtype)

    # times[workload][row][round][batch]: seconds of one forward pass
    times = {name: {row.name: [[math.nan] * len(moved[name]) for _ in range(args.rounds)] for row in rows}
             for name in workloads}
    started = time.perf_counter()
    pressure = []  # CPU pressure (Linux PSI) after every timed pass over a workload
    for round_index in range(args.rounds):
        for name in workloads:
            for batch_index, batch in enumerate(moved[name]):
                shift = (round_index + batch_index) % len(rows)
                for row in rows[shift:] + rows[:shift]:  # rotate: no row always runs first / after the same row
                    times[name][row.name][round_index][batch_index] = time_batch(row, batch, device, args.dtype)
            line = "  ".join(f"{row.name} {len(workloads[name][0]) / sum(times[name][row.name][round_index]):.1f}"
                             for row in rows)
            pressure.append(cpu_pressure())
            shown = "n/a" if pressure[-1] is None else f"{pressure[-1]:.0f}%"
            print(f"round {round_index + 1}/{args.rounds} {name} texts/s: {line}  "
                  f"[{time.perf_counter() - started:.0f}s, CPU pressure {shown}]", file=sys.stderr, flush=True)

    results = {"command": command_line(), "config": run_config(args, device, rows), "workloads": {}}
    results["config"]["timed_seconds"] = time.perf_counter() - started
    results["config"]["cpu_pressure_avg10"] = pressure
    for name, (lengths, batches) in workloads.items():
        stats = workload_stats(lengths, batches)
        stats["at_512"] = stats.pop("at_max_length")  # this script's JSON key
        bert_real = sum(bert_macs(bert_config, length) for length in lengths)
        bert_padded = sum(
            batch["input_ids"].shape[0] * bert_macs(bert_config, batch["input_ids"].shape[1]) for batch in batches
        )
        summary = {row.name: summarize(times[name][row.name], len(lengths)) for row in rows}
        bert = summary[BERT_ROW]
        table = []
        for row in rows:
            own = summary[row.name]
            macs = sum(row.macs(length) for length in lengths)
            ratio = own["texts_per_s"] / bert["texts_per_s"]
            bound = bert_real / macs
            table.append({
                "model": row.name,
                "attention": row.attention,
                "parameters": row.parameters,
                **{key: value for key, value in own.items() if key != "round_rates"},
                "ratio_to_bert": ratio,
                "ratio_to_bert_min_times": own["texts_per_s_best"] / bert["texts_per_s_best"],
                # per round, this row's and BERT's time in the same round (noise that hits a round hits both)
                "paired_ratio_to_bert": statistics.median(
                    sum(b) / sum(s) for b, s in zip(times[name][BERT_ROW], times[name][row.name])
                ),
                "gmacs": macs / 1e9,
                "flop_bound_ratio": bound,
                "flop_bound_ratio_vs_padded_bert": bert_padded / macs,
                "efficiency": ratio / bound,
                "target": TARGETS.get(row.name),
                "meets_target": (ratio >= TARGETS[row.name]) if row.name in TARGETS else None,
                "round_rates": own["round_rates"],
                "batch_seconds": times[name][row.name],
            })
        results["workloads"][name] = {"stats": stats, "bert_gmacs_padded": bert_padded / 1e9, "rows": table}
    return results


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------




def run_config(args: argparse.Namespace, device: torch.device, rows: list[Row]) -> dict:
    return {
        "device": device_name(device),
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "tite_attention": args.attn,
        "bert_attention": "sdpa",
        "rounds": args.rounds,
        "warmup_batches": args.warmup,
        "query_batch": args.query_batch,
        "doc_batch": args.doc_batch,
        "seed": args.seed,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "parameters": {row.name: row.parameters for row in rows},
    }




def format_report(results: dict) -> str:
    c = results["config"]
    q = results["workloads"]["queries"]["stats"]
    d = results["workloads"]["documents"]["stats"]
    lines = [
        (f"device={c['device']}  dtype={c['dtype']}  threads={c['threads']}  attention: BERT sdpa, TITE "
         f"{c['tite_attention']}  torch={c['torch']}  transformers={c['transformers']}  python={c['python']}"),
        f"queries: {q['texts']} x {QUERY_LENGTH} tokens in {q['batches']} batches of {c['query_batch']}",
        (f"documents: {d['texts']} in {d['batches']} batches of {c['doc_batch']} (random order, padded to the "
         f"batch's longest); length mean {d['mean_length']:.1f}, median {d['median_length']:.0f}, "
         f"p90 {d['p90_length']}, min {d['min_length']}, max {d['max_length']}, {d['at_512']} at {MAX_LENGTH}; "
         f"padding fraction {d['padding_fraction']:.1%} ({d['real_tokens']} real of {d['padded_tokens']} tokens)"),
        (f"  length mix: {1 - LONG_FRACTION:.0%} passages ~ logN(median {PASSAGE_MEDIAN:.0f}, sigma {PASSAGE_SIGMA}) "
         f"+ {LONG_FRACTION:.0%} long docs ~ logN(median {LONG_MEDIAN:.0f}, sigma {LONG_SIGMA}), clipped to "
         f"{MAX_LENGTH}; seed {c['seed']}"),
        (f"timing: {c['warmup_batches']} warm-up pass(es) per model, then {c['rounds']} rounds with the models "
         "interleaved batch by batch (rotating order); texts/s = median round, range = min-max round"),
        "        ('vs BERT (min)' = ratio of best-case texts/s: every batch at its minimum time over the rounds)",
    ]
    samples = [value for value in c["cpu_pressure_avg10"] if value is not None]
    if samples:
        lines.append(
            f"CPU pressure (PSI some avg10) after each timed pass: median {statistics.median(samples):.0f}%, max "
            f"{max(samples):.0f}%" + ("" if max(samples) < 20 else
                                      "  <- OTHER JOBS COMPETED FOR THE CORES: TITE ratios are understated; "
                                      "rerun on idle cores, or with --threads 1")
        )
    lines.append(f"timed part: {c['timed_seconds']:.0f} s")
    lines.append("")
    header = ["model", "texts/s", "range", "vs BERT", "vs BERT (min)", "FLOP-bound", "efficiency",
              "bound vs padded BERT", "GMACs", "target"]
    for name in ("queries", "documents"):
        workload = results["workloads"][name]
        lines.append(f"{name} ({workload['stats']['texts']} texts; BERT computes "
                     f"{workload['bert_gmacs_padded']:.1f} GMACs with padding)")
        body = []
        for row in workload["rows"]:
            target = "-" if row["target"] is None else (
                f">={row['target']:g}x {'met' if row['meets_target'] else 'MISSED'}"
            )
            body.append([
                row["model"]
                + ("" if row["attention"] == "sdpa" or row["model"] == BERT_ROW else f" ({row['attention']})"),
                f"{row['texts_per_s']:.1f}",
                f"{row['texts_per_s_min']:.1f}-{row['texts_per_s_max']:.1f}",
                f"{row['ratio_to_bert']:.2f}x",
                f"{row['ratio_to_bert_min_times']:.2f}x",
                f"{row['flop_bound_ratio']:.2f}x",
                f"{row['efficiency']:.0%}",
                f"{row['flop_bound_ratio_vs_padded_bert']:.2f}x",
                f"{row['gmacs']:.1f}",
                target,
            ])
        lines += render_table(header, body) + [""]
    lines += [
        "vs BERT = texts/s / BERT's texts/s; FLOP-bound = BERT MACs / model MACs at real lengths; efficiency = vs BERT",
        "/ FLOP-bound; bound vs padded BERT = BERT's MACs on the padded batches (what BertModel computes) "
        "/ model MACs.",
        "",
        f"command: {results['command']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    return run_script(argv, parse_args, run, format_report)


if __name__ == "__main__":
    main()
