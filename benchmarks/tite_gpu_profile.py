"""Where a TITE forward spends its time on a GPU: torch.profiler tables and a breakdown into host and device time.

For each batch size (``--batches``, default 256 and 1024 passages of real MS MARCO lengths, ``--lengths``), over
``--num-batches`` random-order batches (the same texts for every variant), bf16 weights:

    variant                     what it times
    tite eager, cuda mask       TiteModel(input_ids, attention_mask on the GPU): the plan reads the mask (one sync);
                                the plan is staged (the pooled layers planned while the opening layers run)
    ..., one-stage plan         the same with the whole plan made before the first layer (as before staging)
    tite eager, host mask       the same with the mask left on the host (what our encoding loop hands over): no sync
    tite layers, plans ready    plans built beforehand: embeddings + layers only (the GPU's floor for this model)
    tite cuda graphs            TiteConfig.cuda_graphs=True (bucket graphs replayed), mask on the GPU
    tite cuda graphs, host mask the same, mask on the host
    bert sorted                 BertModel (sdpa) on the same texts sorted by length and re-batched (the baseline)

Per variant: ms per batch (wall, the GPU drained at the end of the pass), the GPU's busy ms per batch (the sum of
the kernels' device time in a profiled pass) and the host's plan ms per batch. Then each batch alone, as
``dense-encoders bench`` times it (the GPU drained before and after every batch): ms per batch, GPU busy ms, and the
GPU's idle ms before the batch's first kernel and after it (:func:`drained`), for the eager forward (mask on the GPU
and on the host), CUDA graphs and sorted BERT. For ``--profile`` variants, the top-10 operators of a profiled pass
by self device time and by self host time (torch.profiler's key_averages).

Usage (repository root, a CUDA machine)::

    python benchmarks/tite_gpu_profile.py --lengths msmarco-lengths.json --out profile.md
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from transformers import BertConfig, BertModel

from dense_encoders.benchmarking import load_lengths
from dense_encoders.benchmarking.workloads import (
    DOCUMENT_TRUNCATION,
    VOCAB_SIZE,
    length_sorted_batches,
    make_batches,
    sample_lengths,
)
from dense_encoders.models.tite import modeling_tite as M
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.plan_tite import TitePlan
from dense_encoders.models.tite.presets import tite_preset


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", required=True, help="A BEIR folder or a JSON of `dense-encoders bench "
                        "--save-lengths` (the passages' token counts).")
    parser.add_argument("--preset", default="tite-2-late")
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--num-batches", type=int, default=8, help="Batches per pass (random order).")
    parser.add_argument("--repeats", type=int, default=5, help="Timed passes; the median is reported.")
    parser.add_argument("--profile", nargs="*", default=["tite eager, cuda mask", "tite cuda graphs", "bert sorted"],
                        help="Variants whose top-10 operator tables are printed.")
    parser.add_argument("--out", type=Path, default=None, help="Also write the report (markdown) here.")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--device", default="cuda", help="cuda; cpu only checks the script (fp32, nothing to learn).")
    parser.add_argument("--max-length", type=int, default=DOCUMENT_TRUNCATION,
                        help="Passage truncation (a tiny --preset needs its own, e.g. 16).")
    return parser.parse_args(argv)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _pass(function, batches):
    outputs = [function(batch) for batch in batches]
    _sync()
    return outputs


def timed(function, batches, repeats: int) -> float:
    """Median ms per batch over ``repeats`` passes (each drained at its end)."""
    _pass(function, batches)
    times = []
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        _pass(function, batches)
        times.append((time.perf_counter() - start) * 1e3 / len(batches))
    return statistics.median(times)


def _busy(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    busy, end = 0.0, float("-inf")
    for first, last in sorted(intervals):
        if last > end:
            busy += last - max(first, end)
            end = last
    return busy


def profiled(function, batches) -> tuple[float, str, str]:
    """(GPU busy ms per batch, top-10 by device time, top-10 by host time) of one profiled pass."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _pass(function, batches)
    averages = prof.key_averages()
    # the union of the device's activity intervals (kernels, copies, memsets): the time the GPU was busy
    busy = _busy([(event.time_range.start, event.time_range.end) for event in prof.events()
                  if event.device_type == torch.autograd.DeviceType.CUDA])
    by_device = averages.table(sort_by="self_device_time_total", row_limit=10, max_name_column_width=60)
    by_host = averages.table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=60)
    return busy / 1e3 / len(batches), by_device, by_host


def drained(function, batches) -> dict:
    """The bench's view (``dense-encoders bench`` drains the GPU before and after every batch, so no batch's host
    work hides behind another's): the mean wall ms per batch, and from one profiled drained pass the mean GPU busy ms
    and the GPU's idle ms before the batch's first kernel or copy and after it (the profiler adds host time). Means,
    not medians: sorted BERT's batches differ in length."""
    from torch.profiler import ProfilerActivity, profile, record_function

    _pass(function, batches)
    walls = []
    for batch in batches:
        _sync()
        start = time.perf_counter()
        function(batch)
        _sync()
        walls.append((time.perf_counter() - start) * 1e3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for index, batch in enumerate(batches):
            _sync()
            with record_function(f"drained batch {index}"):
                function(batch)
                _sync()
    events = prof.events()
    spans = sorted((event.time_range.start, event.time_range.end) for event in events
                   if event.name.startswith("drained batch") and event.device_type != torch.autograd.DeviceType.CUDA)
    kernels = [(event.time_range.start, event.time_range.end) for event in events
               if event.device_type == torch.autograd.DeviceType.CUDA]
    busy, lead, gaps = [], [], []
    for first, last in spans:
        inside = [(a, b) for a, b in kernels if first <= a <= last]
        if not inside:
            continue
        busy.append(_busy(inside) / 1e3)
        lead.append((min(a for a, _ in inside) - first) / 1e3)
        gaps.append((last - first) / 1e3 - busy[-1] - lead[-1])
    mean = statistics.fmean
    return {"wall_ms": mean(walls), "busy_ms": mean(busy) if busy else 0.0,
            "idle_before_ms": mean(lead) if lead else 0.0, "idle_after_ms": mean(gaps) if gaps else 0.0}


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("tite_gpu_profile.py: --device cuda, but torch sees no CUDA GPU", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lengths = load_lengths(args.lengths)
    torch.manual_seed(0)
    tite = TiteModel(tite_preset(args.preset, vocab_size=VOCAB_SIZE)).to(device, dtype).eval()
    graphed = TiteModel(tite_preset(args.preset, vocab_size=VOCAB_SIZE, cuda_graphs=True))
    graphed.load_state_dict(tite.state_dict())
    graphed = graphed.to(device, dtype).eval()
    bert = BertModel._from_config(BertConfig(vocab_size=VOCAB_SIZE, max_position_embeddings=512),
                                  attn_implementation="sdpa", add_pooling_layer=False).to(device, dtype).eval()
    report, results = [f"# {args.preset} on {name} (torch {torch.__version__})", ""], {}
    for size in args.batches:
        generator = torch.Generator().manual_seed(size)
        doc_lengths = sample_lengths(lengths["documents"], size * args.num_batches, generator, args.max_length,
                                     DOCUMENT_TRUNCATION)
        host_batches = make_batches(doc_lengths, size, generator)
        sorted_batches, _ = length_sorted_batches(host_batches, size)
        on_device = [{key: value.to(device) for key, value in batch.items()} for batch in host_batches]
        host_mask = [{"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"]}
                     for batch in host_batches]
        bert_batches = [{key: value.to(device) for key, value in batch.items()} for batch in sorted_batches]
        plans = [tite.plan(batch["input_ids"], batch["attention_mask"]) for batch in host_mask]
        for plan in plans:
            plan.layers  # every stage planned and transferred beforehand

        plan_ms = []
        for batch in host_mask:
            start = time.perf_counter()
            plan = tite.plan(batch["input_ids"], batch["attention_mask"])
            plan.layers
            plan_ms.append((time.perf_counter() - start) * 1e3)

        def layers_only(index_batch):
            index, batch = index_batch
            plan = plans[index]
            ids = batch["input_ids"].reshape(-1)
            if plan.gather is not None:
                ids = ids.index_select(0, plan.gather)
            states = tite.embeddings(ids, plan.positions, None)
            for layer, layer_plan in zip(tite.layers, plan.layers):
                states = layer(states, layer_plan)
            return states

        def one_stage(batch):
            M.TitePlan = functools.partial(TitePlan, staged=False)
            try:
                return tite(**batch).pooler_output
            finally:
                M.TitePlan = TitePlan

        variants = {
            "tite eager, cuda mask": (lambda batch: tite(**batch).pooler_output, on_device),
            "tite eager, cuda mask, one-stage plan": (one_stage, on_device),
            "tite eager, host mask": (lambda batch: tite(**batch).pooler_output, host_mask),
            "tite layers, plans ready": (layers_only, list(enumerate(host_mask))),
            "tite cuda graphs": (lambda batch: graphed(**batch).pooler_output, on_device),
            "tite cuda graphs, host mask": (lambda batch: graphed(**batch).pooler_output, host_mask),
            "bert sorted": (lambda batch: bert(**batch).last_hidden_state[:, 0], bert_batches),
        }
        rows = {}
        with torch.inference_mode():
            for name, (function, batches) in variants.items():
                ms = timed(function, batches, args.repeats)
                busy, by_device, by_host = profiled(function, batches)
                rows[name] = {"ms_per_batch": ms, "gpu_busy_ms_per_batch": busy,
                              "texts_per_s": size / ms * 1e3}
                if name in args.profile:
                    rows[name]["top10_device"], rows[name]["top10_host"] = by_device, by_host
        bert_rate = rows["bert sorted"]["texts_per_s"]
        report += [f"## {size} passages per batch ({args.num_batches} batches, mean "
                   f"{sum(doc_lengths) / len(doc_lengths):.1f} tokens; host plan {statistics.median(plan_ms):.2f} "
                   "ms per batch)", "",
                   "| variant | ms / batch | GPU busy ms / batch | GPU busy % | texts/s | vs BERT sorted |",
                   "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for name, row in rows.items():
            report.append(f"| {name} | {row['ms_per_batch']:.2f} | {row['gpu_busy_ms_per_batch']:.2f} | "
                          f"{100 * row['gpu_busy_ms_per_batch'] / row['ms_per_batch']:.0f} % | "
                          f"{row['texts_per_s']:,.0f} | {row['texts_per_s'] / bert_rate:.2f}x |")
        report.append("")
        report += [f"### Each batch alone, as `dense-encoders bench` times it ({size} passages)", "",
                   "| variant | ms / batch | GPU busy ms | GPU idle before the first kernel | GPU idle after the first "
                   "kernel | vs BERT sorted |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
        alone = {}
        with torch.inference_mode():
            for name in ("tite eager, cuda mask", "tite eager, host mask", "tite cuda graphs", "bert sorted"):
                alone[name] = drained(*variants[name])
        for name, row in alone.items():
            report.append(f"| {name} | {row['wall_ms']:.2f} | {row['busy_ms']:.2f} | {row['idle_before_ms']:.2f} | "
                          f"{row['idle_after_ms']:.2f} | {alone['bert sorted']['wall_ms'] / row['wall_ms']:.2f}x |")
        report.append("")
        for name, row in rows.items():
            if "top10_device" in row:
                report += [f"### {name}, {size}: top 10 by self device time", "```", row["top10_device"], "```",
                           f"### {name}, {size}: top 10 by self host time", "```", row["top10_host"], "```", ""]
        results[size] = {"plan_ms": statistics.median(plan_ms), "rows": rows, "alone": alone}
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
