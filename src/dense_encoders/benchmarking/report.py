"""The efficiency report: build the rows and workloads, time them, and turn the times into ratios,
FLOP bounds and efficiencies (:func:`efficiency_report`; printed by :func:`~.tables.format_report`)."""

from __future__ import annotations

import copy
import platform
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import BertConfig

from ..settings.benchmarking import CUDA_SIZES
from .flops import bert_macs
from .gemm import achieved_gflops, gemm_dtype, gemm_line, gemm_rate, share_of_gemm
from .plot import plot
from .rows import Row, bert_base_config, build_rows, check_attention, default_presets, shape_name, tite_preset_configs
from .timing import (
    DeviceBatches,
    device_name,
    forward_syncs,
    pooling_bandwidth,
    resolve_precision,
    summarize,
    timed_rounds,
    warm_up,
)
from .workloads import (
    DEFAULT_SIZES,
    MAX_LENGTH,
    QUERY_LENGTH,
    build_workloads,
    length_sorted_batches,
    load_lengths,
    workload_stats,
)


def efficiency_report(
    device: str | torch.device = "cpu",
    dtype: str | None = None,
    presets: Sequence[str] | Mapping[str, object] | None = None,
    attn: str = "sdpa",
    num_queries: int = DEFAULT_SIZES["num_queries"], query_batch: int = DEFAULT_SIZES["query_batch"],
    num_docs: int = DEFAULT_SIZES["num_docs"], doc_batch: int = DEFAULT_SIZES["doc_batch"],
    rounds: int = DEFAULT_SIZES["rounds"],
    seed: int = 0,
    plot_path: str | Path | None = None,
    *,
    weights_dtype: str | None = None,
    lengths: Mapping | str | Path | None = None, tokenizer: str | Path | None = None,
    pooling: bool = True,
    cuda_graphs: bool = False, compile: bool = False,
    warmup: int = 1, threads: int | None = None,
    bert_config: BertConfig | None = None,
    max_length: int = MAX_LENGTH, query_length: int = QUERY_LENGTH,
    gemm_size: int | None = None,
    command: str | None = None, progress: bool = True,
) -> dict:
    """Measure encode texts/s of every row (see :mod:`.rows`) on queries and documents.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        dtype: autocast: ``"bf16"`` (bf16 autocast) or ``"fp32"`` (none). Default: bf16 on CUDA when
            the weights are fp32, none otherwise.
        weights_dtype: ``"bf16"`` or ``"fp32"``: every model is cast with ``model.to(dtype)`` (as
            deployed). Default bf16 on CUDA, fp32 on CPU.
        presets: TITE preset names (``TITE_PRESETS`` or ``TINY_PRESETS``) or a mapping label ->
            ``TiteConfig``; default: every ``TITE_PRESETS`` entry that reaches one vector at
            ``max_length`` (:func:`default_presets`).
        attn: attention of every row but the baseline (always sdpa): sdpa, eager or flash_attention_2.
        plot_path: also write :func:`plot` there (PNG).
        lengths: real lengths to sample the workloads from: a mapping as :func:`load_lengths` returns,
            or a BEIR folder / ``--save-lengths`` JSON path (read with :func:`load_lengths`, using
            ``tokenizer``). Default: the synthetic length mix and 32-token queries.
        pooling: on CUDA, also measure :func:`pooling_bandwidth` on the document lengths.
        compile: also time the Condenser, TITE and DE-2 rows compiled (:func:`.rows.compiled_rows`).
        bert_config: the BERT shape of the baseline, Condenser and DE-2 source rows (default
            BERT-base); its vocabulary is replaced by bert-base-uncased's size.
        max_length, query_length: document length cap and query length (512 and 32; smaller for tiny models).
        gemm_size: side of the square product whose rate (:func:`.gemm.gemm_rate`, in the dtype the rows compute
            in) every row's GFLOP/s is a share of; default 2048 on the CPU, 8192 on CUDA; 0 measures none.
        command: the command line printed under the report (default: this call).
        progress: print one line per round and workload to stderr.

    Returns a JSON-ready dict: ``config``, ``rows`` (name, kind, attention, parameters),
    ``workloads[queries|documents]`` (``stats``, ``sorted_stats`` and per-row results, see
    :func:`format_report`), ``de2_vs_source``, ``gemm`` (:func:`.gemm.gemm_rate`'s result, None with
    ``gemm_size=0``), ``pooling_bandwidth`` and ``plot`` (the PNG path or None).
    """
    device = torch.device(device)
    dtype, weights_dtype = resolve_precision(device, dtype, weights_dtype)
    sizes = dict(num_queries=num_queries, query_batch=query_batch, num_docs=num_docs, doc_batch=doc_batch,
                 rounds=rounds, max_length=max_length, query_length=query_length)
    bert_config = _check_settings(device, dtype, weights_dtype, attn, sizes, warmup, bert_config, gemm_size)
    tite_configs = _tite_rows(presets, max_length, cuda_graphs)
    if lengths is not None and not isinstance(lengths, Mapping):
        lengths = load_lengths(lengths, tokenizer)
    command = command or _default_command(device, dtype, weights_dtype, attn, tite_configs, sizes, seed, lengths,
                                          compile)
    if threads:
        torch.set_num_threads(threads)
    say = _progress_printer(progress)
    gemm = _machine_gemm_rate(device, dtype, weights_dtype, gemm_size, seed, say)
    workloads = build_workloads(seed, lengths, num_queries, query_batch, num_docs, doc_batch, query_length,
                                max_length)
    rows = build_rows(bert_config, tite_configs, attn, seed, compile=compile)
    timing = _measure(workloads, rows, device, dtype, weights_dtype, warmup, rounds, say)
    config = _report_config(device, dtype, weights_dtype, attn, sizes, warmup, seed, bert_config, rows, lengths,
                            timed=timing["timed"], pressure=timing["pressure"], compile=compile)
    results = _results(_empty_results(command, config, rows, gemm), workloads, rows, timing, bert_config, max_length)
    if pooling:
        if device.type == "cuda":
            say("pooling kernel bandwidth")
        results["pooling_bandwidth"] = pooling_bandwidth(device, lengths=workloads["documents"][0], seed=seed)
    if plot_path is not None:
        results["plot"] = str(plot(results, plot_path))
    return results


def _machine_gemm_rate(device: torch.device, dtype: str, weights_dtype: str, gemm_size: int | None, seed: int,
                       say) -> dict | None:
    """:func:`.gemm.gemm_rate` in the dtype the rows compute in, of a ``gemm_size`` square (None: the device's
    default size; 0: none measured, None returned), its line printed."""
    if gemm_size is None:
        gemm_size = (CUDA_SIZES if device.type == "cuda" else DEFAULT_SIZES)["gemm_size"]
    if not gemm_size:
        return None
    gemm = gemm_rate(device, gemm_dtype(dtype, weights_dtype), gemm_size, seed=seed)
    say(gemm_line(gemm))
    return gemm


def _results(results: dict, workloads: dict, rows: list[Row], timing: dict, bert_config: BertConfig,
             max_length: int) -> dict:
    """``results`` with every workload's per-row results and DE-2-vs-source ratios filled in (each row's GFLOP/s
    as a share of ``results["gemm"]``)."""
    for name, (lengths, random_batches, _) in workloads.items():
        measured = _Measured(lengths, random_batches, timing["ordered"][name], timing["times"][name],
                             timing["syncs"][name])
        results["workloads"][name], results["de2_vs_source"][name] = _workload_results(
            measured, rows, bert_config, max_length, results["gemm"])
    return results


def _measure(workloads: dict, rows: list[Row], device: torch.device, dtype: str | None, weights_dtype: str,
             warmup: int, rounds: int, say: Callable[[str], None]) -> dict:
    """``rows`` cast and moved "as deployed", warmed up, their host syncs counted and their rounds timed:
    ``{"ordered": length-sorted batches, "syncs", "times", "pressure", "timed"}``, per workload."""
    ordered = {name: length_sorted_batches(batches, size)[0] for name, (_, batches, size) in workloads.items()}
    weights = {"fp32": torch.float32, "bf16": torch.bfloat16}[weights_dtype]
    for row in rows:
        row.model.to(device=device, dtype=weights).eval()  # "as deployed"
    batches = DeviceBatches(workloads, ordered, device)
    say(f"built {len(rows)} models; warming up")
    warm_up(rows, batches, device, dtype, warmup)
    syncs = forward_syncs(rows, batches, device, dtype)
    texts = {name: len(workload[0]) for name, workload in workloads.items()}
    times, pressure, timed = timed_rounds(rows, batches, texts, rounds, device, dtype, say)
    return {"ordered": ordered, "syncs": syncs, "times": times, "pressure": pressure, "timed": timed}


def _check_settings(device: torch.device, dtype: str, weights_dtype: str, attn: str, sizes: dict, warmup: int,
                    bert_config: BertConfig | None, gemm_size: int | None = None) -> BertConfig:
    """Refuse impossible settings before anything is built; returns the baseline's BERT config."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA device is available to this torch build")
    check_attention(attn, device, "bf16" if "bf16" in (dtype, weights_dtype) else "fp32")
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup}: must be >= 0")
    if gemm_size is not None and gemm_size < 0:
        raise ValueError(f"gemm_size={gemm_size}: must be >= 0 (0 measures no GEMM rate)")
    max_length, query_length = sizes["max_length"], sizes["query_length"]
    if query_length > max_length:
        raise ValueError(f"query_length={query_length} exceeds max_length={max_length}")
    bert_config = bert_base_config(max_length) if bert_config is None else bert_config
    if bert_config.max_position_embeddings < max_length:
        raise ValueError(f"bert_config has {bert_config.max_position_embeddings} positions < max_length={max_length}")
    return bert_config


def _tite_rows(presets: Sequence[str] | Mapping[str, object] | None, max_length: int, cuda_graphs: bool) -> dict:
    """The TITE configs to time, by label: the presets (default: :func:`default_presets`), each once more
    replaying CUDA graphs (``TiteConfig.cuda_graphs``) when ``cuda_graphs``."""
    tite_configs = tite_preset_configs(default_presets(max_length) if presets is None else presets, max_length)
    return _with_cuda_graphs(tite_configs) if cuda_graphs else tite_configs


def _with_cuda_graphs(tite_configs: dict) -> dict:
    """Every TITE config, then each once more as ``"<name> (CUDA graphs)"`` with ``cuda_graphs=True``."""
    configs = dict(tite_configs)
    for name, config in tite_configs.items():
        graphed = copy.deepcopy(config)
        graphed.cuda_graphs = True
        configs[f"{name} (CUDA graphs)"] = graphed
    return configs


def _default_command(device: torch.device, dtype: str, weights_dtype: str, attn: str, tite_configs: dict,
                     sizes: dict, seed: int, lengths: Mapping | None, compile: bool = False) -> str:
    """The call printed under the report when no command line is given."""
    return (f"dense_encoders.benchmarking.efficiency_report(device={str(device)!r}, dtype={dtype!r}, "
            f"weights_dtype={weights_dtype!r}, attn={attn!r}, presets={list(tite_configs)}, "
            f"num_queries={sizes['num_queries']}, query_batch={sizes['query_batch']}, num_docs={sizes['num_docs']}, "
            f"doc_batch={sizes['doc_batch']}, rounds={sizes['rounds']}, seed={seed}"
            + ("" if lengths is None else f", lengths=<{lengths.get('source', 'given')}>")
            + (", compile=True" if compile else "") + ")")


def _progress_printer(progress: bool) -> Callable[[str], None]:
    def say(message):
        if progress:
            print(message, file=sys.stderr, flush=True)

    return say


def _lengths_info(lengths: Mapping | None) -> dict | None:
    """Where real lengths came from (None for the synthetic mix)."""
    if lengths is None:
        return None
    info = {key: lengths.get(key) for key in ("source", "tokenizer", "document_max_length", "query_max_length")}
    info.update(documents_available=len(lengths["documents"]), queries_available=len(lengths["queries"]))
    return info


def _report_config(device: torch.device, dtype: str, weights_dtype: str, attn: str, sizes: dict, warmup: int,
                   seed: int, bert_config: BertConfig, rows: list[Row], lengths: Mapping | None, *,
                   timed: float, pressure: list, compile: bool = False) -> dict:
    """The ``config`` section of the results: the run's settings, machine and versions."""
    return {
        "device": device_name(device),
        "dtype": dtype,
        "weights_dtype": weights_dtype,
        "autocast": "bf16" if dtype == "bf16" else None,
        "attention": attn,
        "baseline_attention": "sdpa",
        "threads": torch.get_num_threads(),
        "rounds": sizes["rounds"],
        "warmup_passes": warmup,
        "query_batch": sizes["query_batch"],
        "doc_batch": sizes["doc_batch"],
        "query_length": sizes["query_length"],
        "max_length": sizes["max_length"],
        "seed": seed,
        "compile": compile,
        "bert_shape": shape_name(bert_config),
        "bert_base_shaped": shape_name(bert_config) == "BERT-base",
        "baseline": rows[0].name,
        "sorted_baseline": next(row.name for row in rows if row.length_sorted),
        "lengths": _lengths_info(lengths),
        "timed_seconds": timed,
        "cpu_pressure_avg10": pressure,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _empty_results(command: str, config: dict, rows: list[Row], gemm: dict | None) -> dict:
    return {
        "command": command,
        "config": config,
        "gemm": gemm,
        "rows": [{"model": row.name, "kind": row.kind, "attention": row.attention, "parameters": row.parameters,
                  "batches": "length-sorted" if row.length_sorted else "random order",
                  **({"compiled_of": row.compiled_of} if row.compiled_of else {})} for row in rows],
        "workloads": {},
        "de2_vs_source": {},
        "pooling_bandwidth": None,
        "plot": None,
    }


@dataclass
class _Measured:
    """One workload as timed: its lengths, random-order and length-sorted batches, ``times[row][round][batch]``
    and the host syncs per row."""

    lengths: list[int]
    batches: list[dict]
    sorted_batches: list[dict]
    times: dict[str, list[list[float]]]
    syncs: dict[str, int | None]


def _workload_results(measured: _Measured, rows: list[Row], bert_config: BertConfig, max_length: int,
                      gemm: dict | None = None) -> tuple[dict, dict]:
    """One workload's results (statistics, the baseline's padded GMACs, one entry per row) and DE-2 vs its
    source on it; each row's GFLOP/s as a share of ``gemm`` (:func:`.gemm.gemm_rate`'s result, or None)."""
    lengths_ = measured.lengths

    def padded_macs(batch_list):
        return sum(b["input_ids"].shape[0] * bert_macs(bert_config, b["input_ids"].shape[1]) for b in batch_list)

    bert = {"real": sum(bert_macs(bert_config, length) for length in lengths_),
            "padded": padded_macs(measured.batches), "padded_sorted": padded_macs(measured.sorted_batches)}
    summary = {row.name: summarize(measured.times[row.name], len(lengths_)) for row in rows}
    baseline, sorted_baseline = rows[0].name, next(row.name for row in rows if row.length_sorted)
    table = [_row_entry(row, summary, measured, baseline, sorted_baseline, bert, gemm) for row in rows]
    by_name = {entry["model"]: entry for entry in table}
    de2 = by_name[next(row.name for row in rows if row.kind == "infused")]
    src = by_name[next(row.name for row in rows if row.kind == "source")]
    ratio = de2["texts_per_s"] / src["texts_per_s"]
    bound = src["gmacs"] / de2["gmacs"]
    sorted_lengths = [int(mask.sum()) for b in measured.sorted_batches for mask in b["attention_mask"]]
    workload = {"stats": workload_stats(lengths_, measured.batches, max_length),
                "sorted_stats": workload_stats(sorted_lengths, measured.sorted_batches, max_length),
                "bert_gmacs_padded": bert["padded"] / 1e9,
                "bert_gmacs_padded_sorted": bert["padded_sorted"] / 1e9,
                "lengths": lengths_, "rows": table}
    return workload, {"ratio": ratio, "flop_bound_ratio": bound, "efficiency": ratio / bound}


def _row_entry(row: Row, summary: dict, measured: _Measured, baseline: str, sorted_baseline: str,
               bert: dict, gemm: dict | None = None) -> dict:
    """One row's speed, its ratios to both baselines, its FLOP bounds (``bert``: the baseline's MACs at real
    lengths, on the padded and on the length-sorted padded batches) and efficiencies on one workload, and the
    GFLOP/s it achieved (2 x the multiply-adds it computes, :func:`_computed_macs`, per second of its median round)
    as a share of ``gemm``'s rate."""
    own, reference, reference_sorted = summary[row.name], summary[baseline], summary[sorted_baseline]
    times = measured.times
    macs = sum(row.macs(length) for length in measured.lengths)
    computed = _computed_macs(row, measured, macs)
    gflops = achieved_gflops(computed, len(measured.lengths) / own["texts_per_s"])
    ratio = own["texts_per_s"] / reference["texts_per_s"]
    ratio_sorted = own["texts_per_s"] / reference_sorted["texts_per_s"]
    bound, padded_bound, sorted_bound = bert["real"] / macs, bert["padded"] / macs, bert["padded_sorted"] / macs
    compiled = {}
    if row.compiled_of is not None:  # compiled vs eager: the same model, the same rounds
        compiled = {"compiled_of": row.compiled_of,
                    "ratio_to_eager": own["texts_per_s"] / summary[row.compiled_of]["texts_per_s"],
                    "paired_ratio_to_eager": statistics.median(
                        sum(e) / sum(c) for e, c in zip(times[row.compiled_of], times[row.name]))}
    return {
        "model": row.name,
        "kind": row.kind,
        "attention": row.attention,
        "parameters": row.parameters,
        "batches": "length-sorted" if row.length_sorted else "random order",
        **{key: value for key, value in own.items() if key != "round_rates"},
        "ratio_to_bert": ratio,
        "ratio_to_bert_sorted": ratio_sorted,
        "ratio_to_bert_min_times": own["texts_per_s_best"] / reference["texts_per_s_best"],
        "paired_ratio_to_bert": statistics.median(
            sum(b) / sum(s) for b, s in zip(times[baseline], times[row.name])),
        "paired_ratio_to_bert_sorted": statistics.median(
            sum(b) / sum(s) for b, s in zip(times[sorted_baseline], times[row.name])),
        "gmacs": macs / 1e9,
        "flop_bound_ratio": bound,
        "flop_bound_ratio_vs_padded_bert": padded_bound,
        "flop_bound_ratio_vs_sorted_bert": sorted_bound,
        "efficiency": ratio / bound,
        "efficiency_vs_padded_bound": ratio / padded_bound,
        "efficiency_vs_sorted_bound": ratio_sorted / sorted_bound,
        "gmacs_computed": computed / 1e9,
        "gflops": gflops,
        "share_of_gemm": share_of_gemm(gflops, gemm),
        "syncs_per_forward": measured.syncs[row.name],
        "round_rates": own["round_rates"],
        "batch_seconds": times[row.name],
        **compiled,
    }


def _computed_macs(row: Row, measured: _Measured, real_macs: int) -> int:
    """The multiply-adds ``row`` computes on one workload: ``real_macs`` (at the real lengths) when it unpads (eager
    TITE); otherwise every text of a batch at the batch's padded width, on the batches it is fed (length-sorted for
    the sorted baseline)."""
    if row.unpadded:
        return real_macs
    batches = measured.sorted_batches if row.length_sorted else measured.batches
    return sum(batch["input_ids"].shape[0] * row.macs(batch["input_ids"].shape[1]) for batch in batches)
