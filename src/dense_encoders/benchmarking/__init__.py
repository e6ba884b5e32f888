"""Encode efficiency of every encoder family in this package, in one run: ``dense-encoders bench``.

:func:`efficiency_report` measures texts/s of BERT-base (the baseline), the Condenser encoder, every
TITE preset that reaches 512 tokens and DE-2 next to its 12-layer source, on the SAME batches of the
SAME two workloads, with random weights (fixed seed; speed does not depend on the values). One module
per thing measured:

    workloads  the query and document workloads: the synthetic length mix, or lengths sampled from a
               real BEIR corpus (``--lengths-from``), padded batches of random token ids, their statistics
    flops      the FLOP bound: multiply-adds of the matrix products per text at its real length
    gemm       the machine's GEMM rate (a square matrix product in the fastest library present), of which
               every row's achieved GFLOP/s is a share
    rows       the encoders measured (BERT, its length-sorted pass, Condenser, TITE presets, DE-2 and its
               source), built with random weights
    timing     precision, syncs, warm-up, the interleaved timed rounds, host syncs per forward, the Triton
               pooling kernel's GB/s; whole tasks timed side by side in alternating rounds (process CPU
               and wall time; ``benchmarks/peers.py``)
    report     :func:`efficiency_report`: the steps above, then ratios, bounds, efficiencies and GFLOP/s
    tables     :func:`format_report` (markdown tables) and :func:`render_table`
    plot       :func:`plot` (PNG of the speed-ups against the bounds)

Everything public is importable from ``dense_encoders.benchmarking`` itself.

Run time of ``dense-encoders bench`` with the defaults (12 models + the sorted BERT pass, ~+8 %; 128 queries in
batches of 64, 64 documents in batches of 16, 3 rounds) on 2 idle CPU cores: about 6 minutes (5-8), estimated from
``benchmarks/tite_throughput.py``, whose 9 rows took 2m55s-3m45s with 48 documents: the Condenser,
the DE-2 source and DE-2 add about 2.2 BERT-base passes to its ~4.4 per batch (x 1.5), and 64
documents instead of 48 add about a quarter (documents are ~70 % of the time). Other jobs on the
cores can make it 3-4 times longer (the report prints the CPU pressure). ``--quick`` runs tiny
random models on tiny workloads in seconds: a check of the pipeline, not a measurement.
"""

from .flops import bert_macs, infused_macs, layer_macs, tite_macs
from .gemm import achieved_gflops, gemm_line, gemm_rate, rate_text, share_of_gemm
from .plot import plot
from .report import efficiency_report
from .rows import ATTENTION_CHOICES, BERT_BASE_SHAPE, bert_base_config, default_presets, tiny_bert_config
from .tables import format_report, render_table
from .timing import (
    DTYPE_CHOICES,
    HEAVY_PRESSURE,
    OTHERS_LOAD,
    SYNC_WARNING,
    SelfTimed,
    StepClock,
    alternating_rounds,
    autocast,
    clocks,
    count_syncs,
    cpu_pressure,
    cpu_stall,
    device_name,
    load_snapshot,
    others_load_during,
    pooling_bandwidth,
    pressure_during,
    quiet_rounds,
    resolve_precision,
    round_others_load,
    round_pressure,
    spread,
    summarize,
    synchronize,
    timed_call,
)
from .workloads import (
    CLS_ID,
    DEFAULT_SIZES,
    DOCUMENT_TRUNCATION,
    FIRST_ORDINARY_ID,
    LENGTHS_KEYS,
    LONG_FRACTION,
    LONG_MEDIAN,
    LONG_MIN,
    LONG_SIGMA,
    MAX_LENGTH,
    PAD_ID,
    PASSAGE_MEDIAN,
    PASSAGE_MIN,
    PASSAGE_SIGMA,
    QUERY_LENGTH,
    QUERY_TRUNCATION,
    QUICK_SETTINGS,
    SEP_ID,
    VOCAB_SIZE,
    beir_lengths,
    document_lengths,
    length_sorted_batches,
    load_lengths,
    make_batches,
    sample_lengths,
    save_lengths,
    workload_stats,
)

__all__ = [
    "ATTENTION_CHOICES",
    "DEFAULT_SIZES",
    "DTYPE_CHOICES",
    "QUICK_SETTINGS",
    "bert_base_config",
    "DOCUMENT_TRUNCATION",
    "QUERY_TRUNCATION",
    "beir_lengths",
    "bert_macs",
    "count_syncs",
    "default_presets",
    "document_lengths",
    "efficiency_report",
    "achieved_gflops",
    "gemm_line",
    "gemm_rate",
    "rate_text",
    "share_of_gemm",
    "format_report",
    "infused_macs",
    "layer_macs",
    "length_sorted_batches",
    "load_lengths",
    "make_batches",
    "plot",
    "pooling_bandwidth",
    "resolve_precision",
    "sample_lengths",
    "save_lengths",
    "tiny_bert_config",
    "tite_macs",
    "workload_stats",
    "BERT_BASE_SHAPE",
    "render_table",
    "SYNC_WARNING",
    "SelfTimed",
    "StepClock",
    "alternating_rounds",
    "autocast",
    "clocks",
    "cpu_pressure",
    "cpu_stall",
    "HEAVY_PRESSURE",
    "OTHERS_LOAD",
    "load_snapshot",
    "others_load_during",
    "pressure_during",
    "quiet_rounds",
    "round_others_load",
    "round_pressure",
    "device_name",
    "spread",
    "summarize",
    "synchronize",
    "timed_call",
    "CLS_ID",
    "FIRST_ORDINARY_ID",
    "LENGTHS_KEYS",
    "LONG_FRACTION",
    "LONG_MEDIAN",
    "LONG_MIN",
    "LONG_SIGMA",
    "MAX_LENGTH",
    "PAD_ID",
    "PASSAGE_MEDIAN",
    "PASSAGE_MIN",
    "PASSAGE_SIGMA",
    "QUERY_LENGTH",
    "SEP_ID",
    "VOCAB_SIZE",
]
