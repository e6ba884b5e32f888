"""The efficiency report as text: markdown tables with the device, workload and timing lines
(:func:`format_report`), and :func:`render_table` (shared with ``benchmarks/``)."""

from __future__ import annotations

import statistics

from .gemm import gemm_line
from .workloads import LONG_FRACTION, LONG_MEDIAN, LONG_SIGMA, MAX_LENGTH, PASSAGE_MEDIAN, PASSAGE_SIGMA, QUERY_LENGTH


def format_report(results: dict) -> str:
    """Markdown tables for queries and documents, with the device line, the workloads and the command."""
    c = results["config"]
    lines = _setting_lines(results)
    lines.append("")
    for name in ("queries", "documents"):
        lines += _workload_table(name, results["workloads"][name], results["de2_vs_source"][name])
    pooling_line = _pooling_line(results.get("pooling_bandwidth"))
    if pooling_line:
        lines += [pooling_line, ""]
    sorted_name = c.get("sorted_baseline", "the sorted baseline")
    lines += [
        (f"vs BERT random / sorted = texts/s / the texts/s of {c['baseline']} on random-order batches / of "
         f"{sorted_name}; bound vs random-padded / sorted-padded = the baseline's MACs on those padded batches "
         "(what BertModel computes) / the row's MACs;"),
        ("FLOP bound (real) = BERT's MACs at real lengths / the row's MACs; efficiency = vs BERT random / FLOP bound "
         "(real); syncs/forward = host synchronisations in one forward (torch.cuda.set_sync_debug_mode, CUDA only)."),
        ("GFLOP/s = 2 x the multiply-adds the row computes (GMACs computed: at the real lengths for the rows that "
         "unpad, eager TITE; on every padded position of the batches it is fed for the others) / the seconds of its "
         "median round; of GEMM = GFLOP/s / the GEMM rate above (the machine's square matrix product in the "
         "fastest library here): how close the row comes to the limit."),
        "",
        f"command: {results['command']}",
    ]
    if results.get("plot"):
        lines.append(f"plot: {results['plot']}")
    return "\n".join(lines)


def _setting_lines(results: dict) -> list[str]:
    """The lines above the tables: device and versions, the workloads, how batches were fed and timed, and
    the CPU pressure."""
    c = results["config"]
    autocast_name = c.get("autocast") or "off"
    lines = [
        (f"device={c['device']}  weights={c.get('weights_dtype', 'fp32')}  autocast={autocast_name}  "
         f"threads={c['threads']}  attention: baseline sdpa, other rows {c['attention']}  torch={c['torch']}  "
         f"transformers={c['transformers']}  python={c['python']}"),
        gemm_line(results["gemm"]) if results.get("gemm") else "GEMM rate: not measured (--gemm-size 0)",
    ]
    if not c["bert_base_shaped"]:
        lines.append(f"NOTE: tiny random models ({c['bert_shape']} and the presets named below), a check of the "
                     "pipeline: these speeds say nothing about the real models.")
    for name, batch in (("queries", c["query_batch"]), ("documents", c["doc_batch"])):
        workload = results["workloads"][name]
        lines.append(_length_line(name, workload["stats"], workload.get("sorted_stats", workload["stats"]), batch,
                                  c["query_length"] if name == "queries" else c["max_length"]))
    lines.append(_lengths_source_line(c))
    sorted_name = c.get("sorted_baseline", "the sorted baseline")
    lines += [
        (f"batches: every row runs the random-order batches (TITE rows unpad, so order does not change their "
         f"work), except {sorted_name}, fed the same texts sorted by length (longest first) and batched "
         "consecutively, as sentence-transformers' encode does; each batch is padded to its longest text"),
        (f"timing: {c['warmup_passes']} warm-up pass(es) per model, then {c['rounds']} round(s) with the models "
         f"interleaved batch by batch (rotating order); texts/s = median round, range = min-max round; "
         f"timed part {c['timed_seconds']:.0f} s"),
    ]
    samples = [value for value in c["cpu_pressure_avg10"] if value is not None]
    if samples:
        lines.append(
            f"CPU pressure (PSI some avg10) after each timed pass: median {statistics.median(samples):.0f}%, max "
            f"{max(samples):.0f}%" + ("" if max(samples) < 20 else
                                      "  <- OTHER JOBS COMPETED FOR THE CORES: TITE ratios are understated; rerun on "
                                      "idle cores, or with --threads 1")
        )
    return lines


def _lengths_source_line(c: dict) -> str:
    """Where the workloads' lengths came from: real data (sampled) or the synthetic mix."""
    info = c.get("lengths")
    if info:
        return (
            f"  lengths: sampled with replacement (seed {c['seed']}) from the real lengths of "
            f"{info['documents_available']} documents (title + ' ' + text) and {info['queries_available']} queries of "
            f"{info['source']}, tokenized with {info['tokenizer']} ([CLS]/[SEP] included), truncated at "
            f"{info['document_max_length']} / {info['query_max_length']} tokens"
            + ("" if (c["max_length"], c["query_length"]) == (MAX_LENGTH, QUERY_LENGTH) else
               f", scaled to {c['max_length']} / {c['query_length']}") + "; random weights and token ids")
    return (
        f"  synthetic lengths: queries exactly {c['query_length']} tokens; documents "
        f"{1 - LONG_FRACTION:.0%} passages ~ logN(median {PASSAGE_MEDIAN:.0f}, sigma {PASSAGE_SIGMA}) "
        f"+ {LONG_FRACTION:.0%} long docs ~ logN(median {LONG_MEDIAN:.0f}, sigma {LONG_SIGMA}), clipped to "
        f"{MAX_LENGTH}"
        + ("" if c["max_length"] == MAX_LENGTH else f", all scaled by {c['max_length']}/{MAX_LENGTH}")
        + f"; random weights and workloads, seed {c['seed']}")


def _workload_table(name: str, workload: dict, pair: dict) -> list[str]:
    """One workload's heading, its table of rows and the DE-2 vs source line."""
    header = ["model", "attention", "params (M)", "texts/s", "range", "vs BERT random", "bound vs random-padded",
              "vs BERT sorted", "bound vs sorted-padded", "FLOP bound (real)", "efficiency", "syncs/forward",
              "GMACs", "GMACs computed", "GFLOP/s", "of GEMM"]
    body = []
    for row in workload["rows"]:
        syncs, share = row.get("syncs_per_forward"), row.get("share_of_gemm")
        body.append([
            row["model"], row["attention"], f"{row['parameters'] / 1e6:.1f}", f"{row['texts_per_s']:.1f}",
            f"{row['texts_per_s_min']:.1f}-{row['texts_per_s_max']:.1f}", f"{row['ratio_to_bert']:.2f}x",
            f"{row['flop_bound_ratio_vs_padded_bert']:.2f}x", f"{row['ratio_to_bert_sorted']:.2f}x",
            f"{row['flop_bound_ratio_vs_sorted_bert']:.2f}x", f"{row['flop_bound_ratio']:.2f}x",
            f"{row['efficiency']:.0%}", "-" if syncs is None else str(syncs), f"{row['gmacs']:.3g}",
            f"{row['gmacs_computed']:.3g}", f"{row['gflops']:.3g}", "-" if share is None else f"{share:.1%}",
        ])
    lines = [f"### {name} ({workload['stats']['texts']} texts; the baseline computes "
             f"{workload['bert_gmacs_padded']:.3g} GMACs with padding in random order, "
             f"{workload['bert_gmacs_padded_sorted']:.3g} length-sorted)", ""]
    lines += render_table(header, body)
    lines += ["", (f"DE-2 vs its source on {name}: {pair['ratio']:.2f}x (FLOP bound "
                   f"{pair['flop_bound_ratio']:.2f}x, efficiency {pair['efficiency']:.0%})"), ""]
    compiled = [row for row in workload["rows"] if "ratio_to_eager" in row]
    if compiled:
        lines += [f"torch.compile vs eager on {name} (texts/s ratio, same rounds): " + ", ".join(
            f"{row['compiled_of']} {row['ratio_to_eager']:.2f}x" for row in compiled), ""]
    return lines


def render_table(header: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    right = [False] + [True] * (len(header) - 1)

    def render(cells):
        return "| " + " | ".join(s.rjust(w) if r else s.ljust(w) for s, w, r in zip(cells, widths, right)) + " |"

    rule = "|" + "|".join(("-" * (w + 1)) + ":" if r else ":" + "-" * (w + 1) for w, r in zip(widths, right)) + "|"
    return [render(header), rule, *(render(cells) for cells in body)]


def _length_line(name: str, stats: dict, sorted_stats: dict, batch: int, max_length: int) -> str:
    return (f"{name}: {stats['texts']} in {stats['batches']} batches of {batch}; length mean "
            f"{stats['mean_length']:.1f}, median {stats['median_length']:.0f}, p90 {stats['p90_length']}, min "
            f"{stats['min_length']}, max {stats['max_length']}, {stats['at_max_length']} at {max_length}; padding "
            f"fraction {stats['padding_fraction']:.1%} in random order ({stats['real_tokens']} real of "
            f"{stats['padded_tokens']} tokens), {sorted_stats['padding_fraction']:.1%} length-sorted "
            f"({sorted_stats['padded_tokens']} tokens)")


def _pooling_line(pool: dict | None) -> str | None:
    if pool is None:
        return None
    if not pool.get("available"):
        return f"pooling kernel bandwidth (Triton, TITE pool k=2 s=2): n/a ({pool.get('reason', 'unavailable')})"
    line = (f"pooling kernel bandwidth (Triton pool_planned, k={pool['kernel_size']} s={pool['stride']}, "
            f"{pool['dtype']}, {pool['batch']} texts of mean length {pool['mean_length']:.0f} ({pool['lengths']}), "
            f"dim {pool['dim']}, {pool['rows_in']} -> {pool['rows_out']} rows): "
            f"forward {pool['forward_gbps']:.0f} GB/s "
            f"({pool['forward_ms'] * 1e3:.1f} us, {pool['forward_fraction_of_copy']:.0%} of copy)")
    if "backward_gbps" in pool:
        line += (f", backward {pool['backward_gbps']:.0f} GB/s ({pool['backward_ms'] * 1e3:.1f} us, "
                 f"{pool['backward_fraction_of_copy']:.0%} of copy)")
    return line + f"; device copy (clone) {pool['copy_gbps']:.0f} GB/s ({pool['copy_ms'] * 1e3:.1f} us)"
