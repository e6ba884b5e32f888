"""Timing: device syncs, precision, one timed forward, warm-up and the interleaved rounds, host
syncs per forward, the Triton pooling kernel's bandwidth, and whole tasks timed side by side
(:func:`alternating_rounds`: process CPU time and wall time of ours and the tools users would pick
instead, ``benchmarks/peers.py``).

Inference only: ``eval()``, ``torch.inference_mode()``; weights cast with ``model.to(dtype)``
(bf16 on CUDA, fp32 on CPU; ``weights_dtype``), bf16 autocast only when asked or with fp32 weights
on CUDA (``dtype``). On CUDA, one untimed forward per row and workload under
``torch.cuda.set_sync_debug_mode("warn")`` counts host syncs (:func:`count_syncs`), and
:func:`pooling_bandwidth` measures the Triton pooling kernel against a device copy.
Untimed warm-up (``warmup`` passes per model: on CPU the first query batch and the first 4
texts of the first document batch at its full width; on CUDA every batch, since kernel choices
are made per shape), then ``rounds`` rounds in which every batch
is run by every model back to back, the model order rotating from batch to batch and round to
round, so machine noise is spread over all rows alike. texts/s = the MEDIAN round's texts / its
summed batch times; the range is the min-max over rounds.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from ..models.tite.pooling_tite import DeviceArrays, PoolPlan, pool_planned, triton_pooling_backward
from ..settings.benchmarking import DTYPE_CHOICES, MAX_LENGTH  # noqa: F401 (DTYPE_CHOICES re-exported)
from .rows import Row

try:
    import resource
except ImportError:  # Windows
    resource = None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"cpu ({name}, {os.cpu_count()} logical cores)"


def cpu_pressure() -> float | None:
    """Linux PSI: % of the last 10 s in which some runnable task waited for a CPU (None if unavailable).

    High values mean other jobs competed for the cores during the timing. That skews the ratios:
    TITE runs many small (memory-bound, multi-threaded) kernels, which slow down far more than
    BERT's large matrix products when a core is taken away (measured on 2 shared cores: BERT 64 x 32
    tokens 1.3 -> 3.6 s, tite-2-staggered 0.31 -> 4.2 s with 2 threads; with 1 thread 2.3 s and 0.55 s).
    """
    fields = _psi_some()
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return float(fields["avg10"])
    return None


def _psi_some() -> dict[str, str] | None:
    """The fields of Linux PSI's ``some`` line for the CPU (``avg10``, ``avg60``, ``avg300``, ``total``), None where
    /proc/pressure/cpu is unavailable."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some"):
                return dict(field.split("=", 1) for field in line.split()[1:])
    return None


# a timed call during which some runnable task waited for a core more than this share of its wall time (Linux PSI
# "some", :func:`pressure_during`) ran under heavy CPU pressure: other jobs took cores from it, and its CPU time
# inflates unevenly from one tool to another (faiss's exact search read 1.12x ours on a loaded machine, 0.76x on an
# idle one), so a ratio from it says more about the load than about the code (benchmarks/peers.py). An idle
# machine reads 0-5 %; one other busy job on two cores, 40-99 %.
HEAVY_PRESSURE = 20.0


def cpu_stall() -> float | None:
    """Seconds since boot in which some runnable task waited for a CPU (the ``total`` of Linux PSI's ``some`` line,
    /proc/pressure/cpu), None where PSI is unavailable."""
    fields = _psi_some()
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return int(fields["total"]) / 1e6
    return None


def pressure_during(stall_before: float | None, wall_before: float) -> float | None:
    """CPU pressure (%) since ``(cpu_stall(), time.perf_counter())`` were taken: the share of the wall time in which
    some runnable task waited for a core; None where PSI is unavailable."""
    stall, wall = cpu_stall(), time.perf_counter()
    if stall is None or stall_before is None or wall <= wall_before:
        return None
    return min(100.0, 100.0 * (stall - stall_before) / (wall - wall_before))


# a timed call during which other processes used more than this share (%) of the CPU time of the cores this process
# may run on (:func:`others_load_during`) ran beside other jobs: they took cores from it, and the sides' CPU times
# inflate unevenly, so its round gives no ratio (benchmarks/peers.py). Unlike PSI's pressure, it does not count a
# process's own threads waiting on each other. An idle machine reads 0-3 %; one other busy job on two cores, ~50 %.
OTHERS_LOAD = 10.0


def _busy_seconds() -> float | None:
    """CPU seconds the cores this process may run on spent busy since boot, by any process (user, nice, system,
    irq, softirq and steal jiffies of their /proc/stat lines), None where /proc/stat is unavailable."""
    cores = {f"cpu{index}" for index in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else None
    with contextlib.suppress(OSError, ValueError, IndexError):
        busy = 0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu" and (cores is None or name in cores):
                user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
                busy += user + nice + system + irq + softirq + steal
        return busy / os.sysconf("SC_CLK_TCK") if busy else None
    return None


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and of its children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN) if resource is not None else None
    return time.process_time() + (children.ru_utime + children.ru_stime if children is not None else 0.0)


def load_snapshot() -> tuple[float | None, float, float]:
    """What :func:`others_load_during` measures from: ``(busy seconds of the cores, own CPU seconds, wall
    seconds)`` now."""
    return _busy_seconds(), _own_cpu_seconds(), time.perf_counter()


def others_load_during(before: tuple[float | None, float, float]) -> float | None:
    """The share (%) of the CPU time of the cores this process may run on that other processes used since
    ``before`` (:func:`load_snapshot`): the cores' busy time (/proc/stat) less this process's own and its reaped
    children's; None where /proc/stat is unavailable. /proc/stat counts in clock ticks (10 ms): a call of a second
    on two cores reads to about 1 %."""
    busy_before, own_before, wall_before = before
    busy, own, wall = load_snapshot()
    if busy is None or busy_before is None or wall <= wall_before:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    others = (busy - busy_before) - (own - own_before)
    return min(100.0, max(0.0, 100.0 * others / ((wall - wall_before) * cores)))


def summarize(times: list[list[float]], texts: int) -> dict:
    """texts/s from ``times[round][batch]``: the MEDIAN whole round (texts / the round's summed batch
    times) and the min-max over rounds; also the per-batch median over rounds summed over batches
    (robust to a noise burst that hits different batches in different rounds) and the per-batch
    minimum (best case)."""
    per_batch = list(zip(*times))
    round_rates = [texts / sum(round_times) for round_times in times]
    return {
        "texts_per_s": statistics.median(round_rates),
        "texts_per_s_min": min(round_rates),
        "texts_per_s_max": max(round_rates),
        "texts_per_s_batch_medians": texts / sum(statistics.median(batch) for batch in per_batch),
        "texts_per_s_best": texts / sum(min(batch) for batch in per_batch),
        "round_rates": round_rates,
    }


def autocast(device: torch.device, dtype: str | None):
    """bf16 autocast for ``dtype="bf16"``; nothing for ``"fp32"`` / None."""
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def resolve_precision(device: torch.device, dtype: str | None, weights_dtype: str | None) -> tuple[str, str]:
    """(autocast, weights): weights default bf16 on CUDA and fp32 elsewhere; autocast (``"bf16"`` =
    bf16 autocast, ``"fp32"`` = none) defaults to bf16 only on CUDA with fp32 weights."""
    if weights_dtype is None:
        weights_dtype = "bf16" if device.type == "cuda" else "fp32"
    if weights_dtype not in DTYPE_CHOICES:
        raise ValueError(f"weights_dtype={weights_dtype!r}: choose fp32 or bf16")
    if dtype is None:
        dtype = "bf16" if device.type == "cuda" and weights_dtype == "fp32" else "fp32"
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype={dtype!r}: choose fp32 (no autocast) or bf16 (bf16 autocast)")
    return dtype, weights_dtype


SYNC_WARNING = "called a synchronizing CUDA operation"  # torch.cuda.set_sync_debug_mode("warn")'s text


def count_syncs(function: Callable[[], object], device: torch.device) -> int | None:
    """Host synchronisations while ``function()`` runs on a CUDA ``device``: the warnings of
    ``torch.cuda.set_sync_debug_mode("warn")`` (every one recorded, the previous mode restored
    afterwards). None on other devices (the debug mode exists for CUDA only)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the default filter would show a repeated warning once
        torch.cuda.set_sync_debug_mode("warn")
        try:
            function()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    synchronize(device)
    return sum(SYNC_WARNING in str(warning.message) for warning in caught)


def pooling_bandwidth(device: str | torch.device, dtype: torch.dtype = torch.bfloat16, batch: int = 256,
                      mean_length: float = 80, dim: int = 768, kernel_size: int = 2, stride: int = 2, *,
                      lengths: Sequence[int] | None = None, seed: int = 0, backward: bool = True) -> dict:
    """Memory bandwidth of TITE's Triton pooling kernel (``pool_planned(..., "triton")``) against a
    device-to-device copy, on one packed batch of ``batch`` texts of width ``dim``.

    Lengths: drawn with replacement from ``lengths`` (e.g. the document workload's) when given, else
    log-normal with mean ``mean_length`` (sigma 0.5), clipped to [2, 512]; fixed ``seed``. Times are
    ``triton.testing.do_bench`` medians. GB/s = (rows_in + rows_out) * dim * element size / time (each
    input row read, each output row written; backward: grad_out read, grad_in written); the reference
    copy is ``clone`` of a ``rows_in * dim`` tensor (2 * rows_in * dim * element size bytes moved).

    Returns ``{"available": False, "reason": ...}`` without CUDA or Triton, else the sizes, the times
    (ms), the GB/s and ``forward_fraction_of_copy`` / ``backward_fraction_of_copy``."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"available": False, "reason": "needs CUDA"}
    if importlib.util.find_spec("triton") is None:
        return {"available": False, "reason": "needs the triton package"}
    import triton.testing  # optional: the triton extra

    host = _pooling_lengths(batch, mean_length, lengths, seed)
    arrays = DeviceArrays()
    plan = PoolPlan(host, kernel_size, stride, arrays)
    arrays.transfer(device)
    hidden = torch.randn(plan.total_in, dim, device=device, dtype=dtype)
    element = hidden.element_size()
    moved = (plan.total_in + plan.total_out) * dim * element
    copy_bytes = 2 * plan.total_in * dim * element

    forward_ms = triton.testing.do_bench(lambda: pool_planned(hidden, plan, "triton"), return_mode="median")
    copy_ms = triton.testing.do_bench(lambda: hidden.clone(), return_mode="median")
    result = {
        "available": True, "dtype": str(dtype).removeprefix("torch."), "batch": batch, "dim": dim,
        "kernel_size": kernel_size, "stride": stride,
        "lengths": "workload" if lengths else f"lognormal mean {mean_length}",
        "mean_length": float(host.mean()), "rows_in": plan.total_in, "rows_out": plan.total_out,
        "forward_ms": forward_ms, "forward_gbps": _gbps(moved, forward_ms),
        "copy_ms": copy_ms, "copy_gbps": _gbps(copy_bytes, copy_ms),
    }
    result["forward_fraction_of_copy"] = result["forward_gbps"] / result["copy_gbps"]
    if backward:
        grad_out = torch.randn(plan.total_out, dim, device=device, dtype=dtype)

        backward_ms = triton.testing.do_bench(lambda: triton_pooling_backward(grad_out, plan, hidden.shape),
                                              return_mode="median")
        result.update(backward_ms=backward_ms, backward_gbps=_gbps(moved, backward_ms))
        result["backward_fraction_of_copy"] = result["backward_gbps"] / result["copy_gbps"]
    return result


def _pooling_lengths(batch: int, mean_length: float, lengths: Sequence[int] | None, seed: int):
    """:func:`pooling_bandwidth`'s ``batch`` text lengths (a NumPy int64 array): drawn with replacement
    from ``lengths`` when given, else log-normal with mean ``mean_length`` (sigma 0.5), clipped to [2, 512]."""
    generator = torch.Generator().manual_seed(seed)
    if lengths:
        picks = torch.randint(len(lengths), (batch,), generator=generator)
        return np.asarray([int(lengths[i]) for i in picks.tolist()], dtype=np.int64)
    sigma = 0.5
    normal = torch.randn(batch, generator=generator, dtype=torch.float64)
    host = (math.log(mean_length) - sigma ** 2 / 2 + sigma * normal).exp().round().clamp(2, MAX_LENGTH)
    return host.long().numpy()


def _gbps(nbytes: int, milliseconds: float) -> float:
    return nbytes / (milliseconds * 1e-3) / 1e9


def _time_batch(row: Row, batch: dict, device: torch.device, dtype: str | None) -> float:
    synchronize(device)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(device, dtype):
        output = row.encode(row.model, batch)
    synchronize(device)
    elapsed = time.perf_counter() - start
    _check_output(row, output, batch)
    return elapsed


def _check_output(row: Row, output: torch.Tensor, batch: dict) -> None:
    size = batch["input_ids"].shape[0]
    if output.dim() != 2 or output.shape[0] != size or not bool(torch.isfinite(output).all()):
        raise RuntimeError(f"{row.name}: output {tuple(output.shape)} (expected ({size}, width)) or non-finite")


def _forward_syncs(row: Row, batch: dict, device: torch.device, dtype: str | None) -> int | None:
    """Host syncs of one forward of ``row`` on ``batch`` (CUDA; None elsewhere), outside the timing."""
    outputs = []

    def forward():
        with torch.inference_mode(), autocast(device, dtype):
            outputs.append(row.encode(row.model, batch))

    syncs = count_syncs(forward, device)
    if outputs:
        _check_output(row, outputs[0], batch)
    return syncs


class DeviceBatches:
    """The workloads' batches on the device, random-order and length-sorted: :meth:`of` gives a row the
    ones it runs (the sorted baseline the length-sorted batches, every other row the random-order ones)."""

    def __init__(self, workloads: dict, ordered: dict, device: torch.device):
        self.random = {name: [{k: v.to(device) for k, v in b.items()} for b in batches]
                       for name, (_, batches, _) in workloads.items()}
        self.sorted = {name: [{k: v.to(device) for k, v in b.items()} for b in batches]
                       for name, batches in ordered.items()}

    def count(self, name: str) -> int:
        return len(self.random[name])

    def of(self, row: Row, name: str, index: int) -> dict:
        return (self.sorted if row.length_sorted else self.random)[name][index]


def warm_up(rows: list[Row], batches: DeviceBatches, device: torch.device, dtype: str | None, warmup: int) -> None:
    """``warmup`` untimed passes per row: on CUDA over every batch shape (cuBLAS / flash / Triton choose
    per shape); on CPU the first query batch and the first 4 texts of the first document batch. A compiled row
    (``torch.compile``) always runs every batch shape: it compiles its graphs (a static one, then a dynamic one)
    outside the timing."""
    for row in rows:
        if device.type == "cuda" or row.compiled_of is not None:  # every batch shape once
            warm = [batches.of(row, name, index) for name in batches.random for index in range(batches.count(name))]
        else:
            first = batches.of(row, "documents", 0)
            warm = [batches.of(row, "queries", 0), {key: value[:4] for key, value in first.items()}]
        for batch in warm * warmup:
            _time_batch(row, batch, device, dtype)


def forward_syncs(rows: list[Row], batches: DeviceBatches, device: torch.device, dtype: str | None) -> dict:
    """``{workload: {row name: host syncs of one forward on its first batch}}`` (None off CUDA)."""
    return {name: {row.name: _forward_syncs(row, batches.of(row, name, 0), device, dtype) for row in rows}
            for name in batches.random}


def timed_rounds(rows: list[Row], batches: DeviceBatches, texts: dict[str, int], rounds: int,
                 device: torch.device, dtype: str | None, say: Callable[[str], None]) -> tuple[dict, list, float]:
    """``rounds`` rounds over every workload (``texts``: name -> number of texts); in each, every batch is
    run by every row back to back, the row order rotating from batch to batch and round to round.

    Returns ``times[workload][row][round][batch]`` (seconds of one forward pass), the CPU pressure after
    each round and workload, and the seconds the whole timed part took."""
    times = {name: {row.name: [[math.nan] * batches.count(name) for _ in range(rounds)] for row in rows}
             for name in texts}
    started = time.perf_counter()
    pressure = []
    for round_index in range(rounds):
        for name in texts:
            for batch_index in range(batches.count(name)):
                shift = (round_index + batch_index) % len(rows)
                for row in rows[shift:] + rows[:shift]:  # rotate: no row always runs first / after the same row
                    times[name][row.name][round_index][batch_index] = _time_batch(
                        row, batches.of(row, name, batch_index), device, dtype)
            pressure.append(cpu_pressure())
            shown = "n/a" if pressure[-1] is None else f"{pressure[-1]:.0f}%"
            rates = "  ".join(f"{row.name} {texts[name] / sum(times[name][row.name][round_index]):.1f}"
                              for row in rows)
            say(f"round {round_index + 1}/{rounds} {name} texts/s: {rates}  "
                f"[{time.perf_counter() - started:.0f}s, CPU pressure {shown}]")
    return times, pressure, time.perf_counter() - started


# ------------------------------------------------------------------------------------------
# whole tasks side by side (benchmarks/peers.py)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelfTimed:
    """What a side of :func:`alternating_rounds` measured itself instead of its whole call (a training run's
    steady-state step, say): process CPU seconds, wall seconds, and the side's result."""

    cpu: float
    wall: float
    value: object = None


def clocks() -> tuple[float, float]:
    """``(process CPU seconds, wall seconds)`` now. CPU time is ``time.process_time``: every thread of this
    process (torch's and faiss' OpenMP pools, the tokenizers' threads)."""
    return time.process_time(), time.perf_counter()


def timed_call(function: Callable[[], object]) -> tuple[float, float, object]:
    """``(process CPU seconds, wall seconds, result)`` of ``function()``, after a garbage collection (so that
    one side's garbage is not collected in another side's time). A function that returns a :class:`SelfTimed`
    reports its own times instead."""
    gc.collect()
    cpu, wall = clocks()
    value = function()
    now = clocks()
    if isinstance(value, SelfTimed):
        return value.cpu, value.wall, value.value
    return now[0] - cpu, now[1] - wall, value


class StepClock(TrainerCallback):
    """The clocks (:func:`clocks`) when a ``Trainer`` run starts and at the end of every optimizer step: a step's
    time is the interval between two marks (data loading, collation, forward, backward, optimizer, logging)."""

    def __init__(self):
        self.marks: list[tuple[float, float]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.marks = [clocks()]

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(clocks())

    def steady(self, skip: int, value: object = None) -> SelfTimed:
        """The median step's CPU and wall seconds after the first ``skip`` steps (warm-up), with ``value``."""
        steps = list(zip(self.marks, self.marks[1:]))[skip:]
        if not steps:
            raise RuntimeError(f"no step after the first {skip} to measure: train more steps")
        return SelfTimed(statistics.median(after[0] - before[0] for before, after in steps),
                         statistics.median(after[1] - before[1] for before, after in steps), value)


def alternating_rounds(sides: Mapping[str, Callable[[], object]], rounds: int, *, warmup: int = 1,
                       say: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Time every side of one task in the same run: ``warmup`` untimed calls of each, then ``rounds`` rounds in
    which each side runs once, the order rotating from round to round (no side always runs first, or after
    the same side), so load from other jobs falls on all sides alike.

    Returns ``{side: {"cpu": [seconds per round], "wall": [...], "value": the last round's result,
    "pressure": [CPU pressure (%) during the side's call in each round, None without PSI], "others": [the share
    (%) of the cores' CPU time other processes used during it, None without /proc/stat]}}`` (:func:`pressure_during`,
    :func:`others_load_during`)."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least one round")
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            timed_call(sides[name])
    results = {name: {"cpu": [], "wall": [], "value": None, "pressure": [], "others": []} for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            stall, started, snapshot = cpu_stall(), time.perf_counter(), load_snapshot()
            cpu, wall, value = timed_call(sides[name])
            results[name]["pressure"].append(pressure_during(stall, started))
            results[name]["others"].append(others_load_during(snapshot))
            results[name]["cpu"].append(cpu)
            results[name]["wall"].append(wall)
            results[name]["value"] = value
        if say is not None:
            say(f"round {round_index + 1}/{rounds}: " + "  ".join(
                f"{name} {results[name]['cpu'][-1]:.2f}s cpu / {results[name]['wall'][-1]:.2f}s wall "
                f"[CPU pressure {_percent(results[name]['pressure'][-1])}, others "
                f"{_percent(results[name]['others'][-1])}]" for name in names))
    return results


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def round_pressure(measured: Mapping[str, Mapping], round_index: int) -> float | None:
    """The highest CPU pressure (%) of any side's call in round ``round_index`` of :func:`alternating_rounds`'
    result, None when no side's is known."""
    known = [side["pressure"][round_index] for side in measured.values()
             if side["pressure"][round_index] is not None]
    return max(known) if known else None


def round_others_load(measured: Mapping[str, Mapping], round_index: int) -> float | None:
    """The highest share (%) of the cores' CPU time other processes used during any side's call in round
    ``round_index`` of :func:`alternating_rounds`' result, None when no side's is known."""
    known = [side["others"][round_index] for side in measured.values()
             if side.get("others") and side["others"][round_index] is not None]
    return max(known) if known else None


def quiet_rounds(measured: Mapping[str, Mapping], threshold: float = OTHERS_LOAD) -> list[int]:
    """The rounds of :func:`alternating_rounds`' result in which no side's call ran beside other processes using
    more than ``threshold`` (%; :data:`OTHERS_LOAD`) of the cores' CPU time (:func:`round_others_load`): the rounds
    a ratio may be drawn from. A round whose others' load is unknown (no /proc/stat) is judged by PSI's pressure
    against :data:`HEAVY_PRESSURE` instead, and one whose pressure is unknown too counts as quiet: there is
    nothing to refuse it on."""
    rounds = len(next(iter(measured.values()))["cpu"])
    quiet = []
    for index in range(rounds):
        others = round_others_load(measured, index)
        if others is not None:
            if others <= threshold:
                quiet.append(index)
        elif (pressure := round_pressure(measured, index)) is None or pressure <= HEAVY_PRESSURE:
            quiet.append(index)
    return quiet


def spread(seconds: Sequence[float]) -> dict[str, float]:
    """``{"min", "median"}`` of a side's per-round seconds."""
    return {"min": min(seconds), "median": statistics.median(seconds)}
