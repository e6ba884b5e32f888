"""Encode efficiency of every encoder family in this package, in one run: ``dense-encoders bench``.

:func:`efficiency_report` measures texts/s of these rows on the SAME batches of the SAME two
workloads, with random weights (fixed seed; speed does not depend on the values):

    BERT-base (BertModel, sdpa)   transformers' ``BertModel`` (12 x 768, 12 heads, FFN 3072, no pooler,
                                  [CLS] vector), always ``attn_implementation="sdpa"``: the baseline
                                  every ratio refers to
    Condenser (CondenserModel)    the Condenser retrieval encoder at BERT-base dimensions (a BertModel
                                  without pooler weights; its vector is the last-layer [CLS])
    tite-2-late ...               every preset of ``TITE_PRESETS`` that reaches one vector at 512 tokens
                                  (the 7 Table 3 variants and tite-no-pooling; ``minilm-l6-3-all`` stops
                                  at 256 tokens and is left out), packed / unpadded, ``pooler_output``
    DE-2 source (12-layer BERT-base cross-encoder)
                                  the encoder (``.bert``, pooler dropped) of a 12-layer BERT-base
                                  ``BertForSequenceClassification``: what DE-2 is built from, mean pooled
                                  like DE-2. Same shape as the BERT row, measured separately so that
                                  "DE-2 vs its source" is a same-pooling, same-round comparison
    DE-2 (from a 12-layer BERT-base cross-encoder)
                                  ``InfusedDualEncoderModel.from_cross_encoder(that cross-encoder,
                                  num_copied_layers=1, num_new_layers=1)``: 2 layers, mean pooling

Every row but the baseline uses ``attn`` (``sdpa``, ``eager``, or ``flash_attention_2`` on CUDA
with flash-attn installed); with flash attention the Condenser row is "BERT with flash attention".

Workloads (fixed seed; those of ``benchmarks/tite_throughput.py``)
    queries    ``num_queries`` texts of exactly 32 tokens ([CLS] ... [SEP]), ``query_batch`` per batch.
    documents  ``num_docs`` texts with a realistic length mix up to 512 tokens, ``doc_batch`` per batch,
               in random order, padded to the longest text of their batch (with an attention_mask):
               88 % MS MARCO-like passages, log-normal median 80 tokens, sigma 0.5, clipped to [8, 512],
               and 12 % long documents, log-normal median 380, sigma 0.5, clipped to [64, 512].

Timing
    Inference only: ``eval()``, ``torch.inference_mode()``; fp32 on CPU, bf16 autocast on CUDA (weights
    stay fp32). Untimed warm-up (``warmup`` passes per model: the first query batch and the first 4
    texts of the first document batch at its full width), then ``rounds`` rounds in which every batch
    is run by every model back to back, the model order rotating from batch to batch and round to
    round, so machine noise is spread over all rows alike. texts/s = the MEDIAN round's texts / its
    summed batch times; the range is the min-max over rounds.

FLOP bound
    Multiply-adds (MACs) of the matrix products per text at its REAL length, summed over the workload
    (:func:`layer_macs`, :func:`tite_macs`, :func:`bert_macs`, :func:`infused_macs`). FLOP-bound ratio
    = BERT's MACs / the row's MACs: the speed-up if time were proportional to real work; efficiency =
    measured ratio / FLOP-bound ratio. "bound vs padded BERT" uses BERT's MACs on the padded batches
    (what ``BertModel`` computes; TITE never computes on padding), the relevant ceiling on documents.

Run time of ``dense-encoders bench`` with the defaults (12 models; 128 queries in batches of 64, 64
documents in batches of 16, 3 rounds) on 2 idle CPU cores: about 6 minutes (5-8), estimated from
``benchmarks/tite_throughput.py``, whose 9 rows took 2m55s-3m45s with 48 documents: the Condenser,
the DE-2 source and DE-2 add about 2.2 BERT-base passes to its ~4.4 per batch (x 1.5), and 64
documents instead of 48 add about a quarter (documents are ~70 % of the time). Other jobs on the
cores can make it 3-4 times longer (the report prints the CPU pressure). ``--quick`` runs tiny
random models on tiny workloads in seconds: a check of the pipeline, not a measurement.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import BertConfig

VOCAB_SIZE = 30522  # bert-base-uncased
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102
FIRST_ORDINARY_ID = 999  # ids below are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK], single characters
QUERY_LENGTH = 32
MAX_LENGTH = 512

# document length mixture (see the module docstring)
PASSAGE_MEDIAN, PASSAGE_SIGMA, PASSAGE_MIN = 80.0, 0.5, 8
LONG_FRACTION, LONG_MEDIAN, LONG_SIGMA, LONG_MIN = 0.12, 380.0, 0.5, 64

ATTENTION_CHOICES = ("sdpa", "eager", "flash_attention_2")
DTYPE_CHOICES = ("fp32", "bf16")
BERT_BASE_SHAPE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)

# `dense-encoders bench --quick`: tiny random models (the tiny-* TITE presets, a 4 x 32 BERT) at 16 tokens
QUICK_SETTINGS = dict(num_queries=8, query_batch=8, num_docs=8, doc_batch=4, rounds=1, warmup=1,
                      max_length=16, query_length=8)
DEFAULT_SIZES = dict(num_queries=128, query_batch=64, num_docs=64, doc_batch=16, rounds=3)


def tiny_bert_config() -> BertConfig:
    """The BERT shape of ``--quick``: 4 layers of width 32 (4 heads, FFN 64), 16 positions."""
    return BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=16)


def bert_base_config(max_length: int = MAX_LENGTH) -> BertConfig:
    return BertConfig(vocab_size=VOCAB_SIZE, max_position_embeddings=max_length, **BERT_BASE_SHAPE)


def default_presets(max_length: int = MAX_LENGTH) -> list[str]:
    """Every preset of ``TITE_PRESETS`` whose pooling schedule reaches one vector at ``max_length``."""
    from .models.tite.presets import TITE_PRESETS

    return [name for name, settings in TITE_PRESETS.items() if _reaches(settings, max_length)]


def _reaches(settings: Mapping, max_length: int) -> bool:
    pools = any(kernel is not None for kernel in (settings.get("kernel_sizes") or []))
    return not pools or settings.get("max_position_embeddings", 512) >= max_length


# ------------------------------------------------------------------------------------------
# FLOP bound (multiply-adds of the matrix products)
# ------------------------------------------------------------------------------------------


def layer_macs(l_in: int, l_out: int, d_in: int, d: int, d_ffn: int, location: str | None) -> int:
    """Multiply-adds of one transformer layer; ``location`` None = no pooling.

    Input length ``l_in``, output length ``l_out``, input width ``d_in``, width ``d``, FFN width ``d_ffn``:

    * no pooling: QKV ``3*Lin*din*d``, scores + weighted sum ``2*Lin*Lin*d``, out-proj ``Lin*d*d``,
      FFN ``2*Lin*d*f``
    * pre: pool first, everything on the pooled sequence (``Lout`` in place of ``Lin``)
    * intra: Q ``Lout*din*d``, K/V ``2*Lin*din*d``, attention ``2*Lout*Lin*d`` (pooled queries,
      unpooled keys), out-proj ``Lout*d*d``, FFN ``2*Lout*d*f``
    * post: QKV, attention and out-proj on ``Lin`` (pooling after the residual), FFN ``2*Lout*d*f``

    Lookups, LayerNorms, softmax, RoPE, GELU and the pooling means are not counted.
    """
    if location is None:
        return 3 * l_in * d_in * d + 2 * l_in * l_in * d + l_in * d * d + 2 * l_in * d * d_ffn
    if location == "pre":
        return 3 * l_out * d_in * d + 2 * l_out * l_out * d + l_out * d * d + 2 * l_out * d * d_ffn
    if location == "intra":
        return (l_out * d_in * d + 2 * l_in * d_in * d + 2 * l_out * l_in * d + l_out * d * d
                + 2 * l_out * d * d_ffn)
    if location == "post":
        return 3 * l_in * d_in * d + 2 * l_in * l_in * d + l_in * d * d + 2 * l_out * d * d_ffn
    raise ValueError(f"unknown pooling location {location!r}")


def tite_macs(config, length: int) -> int:
    """MACs of a :class:`TiteConfig` on one text of ``length`` tokens (plus the embedding
    down-projection ``L * d_final * d_first`` of an upscaled model)."""
    lengths = config.sequence_lengths(length)
    total = length * config.hidden_size * config.embedding_size if config.hidden_size != config.embedding_size else 0
    for index in range(config.num_hidden_layers):
        d_in = config.hidden_sizes[index - 1] if index else config.embedding_size
        location = config.pooling_location if config.kernel_sizes[index] is not None else None
        total += layer_macs(lengths[index], lengths[index + 1], d_in, config.hidden_sizes[index],
                            config.intermediate_sizes[index], location)
    return total


def bert_macs(config: BertConfig, length: int, num_layers: int | None = None) -> int:
    """MACs of a BERT-shaped encoder (``config.num_hidden_layers`` layers unless ``num_layers``)."""
    d, f = config.hidden_size, config.intermediate_size
    layers = config.num_hidden_layers if num_layers is None else num_layers
    return layers * layer_macs(length, length, d, d, f, None)


def infused_macs(config, length: int) -> int:
    """MACs of a cross-encoder-infused DE: BERT's formula with its ``num_copied_layers +
    num_new_layers`` layers (the mean pooling is not counted)."""
    return bert_macs(config, length, num_layers=config.num_copied_layers + config.num_new_layers)


# ------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------


def document_lengths(count: int, generator: torch.Generator, max_length: int = MAX_LENGTH) -> list[int]:
    """Token counts of ``count`` documents from the passage / long-document mixture (module docstring).

    A ``max_length`` other than 512 (tiny models) scales the medians and minimums by ``max_length / 512``
    (minimum 2 tokens: [CLS] [SEP]), so the batches still mix lengths and padding."""
    scale = max_length / MAX_LENGTH
    passage_min, long_min = (max(2, round(minimum * scale)) for minimum in (PASSAGE_MIN, LONG_MIN))
    long = torch.rand(count, generator=generator) < LONG_FRACTION
    normal = torch.randn(count, generator=generator)
    passages = (math.log(PASSAGE_MEDIAN * scale) + PASSAGE_SIGMA * normal).exp().round().clamp(passage_min, max_length)
    longs = (math.log(LONG_MEDIAN * scale) + LONG_SIGMA * normal).exp().round().clamp(long_min, max_length)
    return torch.where(long, longs, passages).long().tolist()


def make_batches(lengths: list[int], batch_size: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """[CLS] random ordinary tokens [SEP], in the given order, each batch padded to its longest text."""
    batches = []
    for start in range(0, len(lengths), batch_size):
        chunk = torch.tensor(lengths[start:start + batch_size])
        width = int(chunk.max())
        positions = torch.arange(width)[None, :]
        attention_mask = (positions < chunk[:, None]).long()
        input_ids = torch.randint(FIRST_ORDINARY_ID, VOCAB_SIZE, (len(chunk), width), generator=generator)
        input_ids[:, 0] = CLS_ID
        input_ids[torch.arange(len(chunk)), chunk - 1] = SEP_ID
        input_ids = input_ids.masked_fill(attention_mask == 0, PAD_ID)
        batches.append({"input_ids": input_ids, "attention_mask": attention_mask})
    return batches


def workload_stats(lengths: list[int], batches: list[dict[str, torch.Tensor]], max_length: int = MAX_LENGTH) -> dict:
    real = sum(lengths)
    padded = sum(batch["input_ids"].numel() for batch in batches)
    ordered = sorted(lengths)
    return {
        "texts": len(lengths),
        "batches": len(batches),
        "mean_length": real / len(lengths),
        "median_length": statistics.median(lengths),
        "p90_length": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "min_length": ordered[0],
        "max_length": ordered[-1],
        "at_max_length": sum(length >= max_length for length in lengths),
        "real_tokens": real,
        "padded_tokens": padded,
        "padding_fraction": 1 - real / padded,
    }


# ------------------------------------------------------------------------------------------
# timing helpers (shared with benchmarks/)
# ------------------------------------------------------------------------------------------


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


def render_table(header: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    right = [False] + [True] * (len(header) - 1)

    def render(cells):
        return "| " + " | ".join(s.rjust(w) if r else s.ljust(w) for s, w, r in zip(cells, widths, right)) + " |"

    rule = "|" + "|".join(("-" * (w + 1)) + ":" if r else ":" + "-" * (w + 1) for w, r in zip(widths, right)) + "|"
    return [render(header), rule, *(render(cells) for cells in body)]


def cpu_pressure() -> float | None:
    """Linux PSI: % of the last 10 s in which some runnable task waited for a CPU (None if unavailable).

    High values mean other jobs competed for the cores during the timing. That skews the ratios:
    TITE runs many small (memory-bound, multi-threaded) kernels, which slow down far more than
    BERT's large matrix products when a core is taken away (measured on 2 shared cores: BERT 64 x 32
    tokens 1.3 -> 3.6 s, tite-2-staggered 0.31 -> 4.2 s with 2 threads; with 1 thread 2.3 s and 0.55 s).
    """
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some"):
                return float(line.split()[1].split("=")[1])
    return None


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


def autocast(device: torch.device, dtype: str):
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ------------------------------------------------------------------------------------------
# rows
# ------------------------------------------------------------------------------------------


@dataclass
class _Row:
    name: str
    kind: str  # baseline | condenser | tite | source | infused
    model: torch.nn.Module
    macs: Callable[[int], int]  # length -> multiply-adds of one text
    encode: Callable[[torch.nn.Module, dict], torch.Tensor]  # one vector per text

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def attention(self) -> str:
        return self.model.config._attn_implementation


def _cls(model, batch):
    return model(**batch).last_hidden_state[:, 0]


def _pooler(model, batch):
    return model(**batch).pooler_output


def _mean(model, batch):
    from .models.infused import mean_pool

    return mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])


def _shape_name(config: BertConfig) -> str:
    base = all(getattr(config, key) == value for key, value in BERT_BASE_SHAPE.items())
    return "BERT-base" if base else f"BERT {config.num_hidden_layers}x{config.hidden_size}"


def _checked(model: torch.nn.Module, name: str, attn: str) -> torch.nn.Module:
    got = model.config._attn_implementation
    if got != attn:
        raise RuntimeError(f"{name} came up with attention {got!r}, not {attn!r}")
    return model


def _tite_configs(presets, max_length: int) -> dict:
    from .models.tite.configuration_tite import TiteConfig
    from .models.tite.presets import TINY_PRESETS, TITE_PRESETS, tite_preset

    if isinstance(presets, Mapping):
        configs = dict(presets)
    else:
        known = {**TITE_PRESETS, **TINY_PRESETS}
        configs = {}
        for name in dict.fromkeys(presets):  # drop repeats, keep order
            if name not in known:
                raise ValueError(f"unknown TITE preset {name!r}; choose from {', '.join(sorted(known))}")
            configs[name] = tite_preset(name, vocab_size=VOCAB_SIZE)
    for name, config in configs.items():
        if not isinstance(config, TiteConfig):
            raise TypeError(f"preset {name!r}: expected a TiteConfig, got {type(config).__name__}")
        pools = any(kernel is not None for kernel in config.kernel_sizes)
        if pools and config.max_position_embeddings < max_length:
            raise ValueError(
                f"TITE preset {name}: it reaches one vector only up to {config.max_position_embeddings} tokens, but "
                f"documents go up to {max_length}; leave it out."
            )
    return configs


def _build_rows(bert_config: BertConfig, tite_configs: dict, attn: str, seed: int) -> list[_Row]:
    from transformers import BertForSequenceClassification, BertModel

    from .models.condenser import CondenserConfig, CondenserModel
    from .models.infused import InfusedDualEncoderModel
    from .models.tite.modeling_tite import TiteModel

    shape = _shape_name(bert_config)
    layers = bert_config.num_hidden_layers
    settings = {key: getattr(bert_config, key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")}
    settings["vocab_size"] = VOCAB_SIZE

    def bert_cost(length):
        return bert_macs(bert_config, length)

    torch.manual_seed(seed)
    bert = BertModel._from_config(BertConfig(**settings), attn_implementation="sdpa", add_pooling_layer=False)
    rows = [_Row(f"{shape} (BertModel, sdpa)", "baseline", _checked(bert, "BertModel", "sdpa"), bert_cost, _cls)]

    torch.manual_seed(seed)
    condenser_config = CondenserConfig(**settings, skip_from=max(1, layers // 2), n_head_layers=2)
    condenser = CondenserModel._from_config(condenser_config, attn_implementation=attn)
    rows.append(_Row("Condenser (CondenserModel)", "condenser", _checked(condenser, "CondenserModel", attn),
                     bert_cost, _pooler))

    for name, config in tite_configs.items():
        config = copy.deepcopy(config)  # the attention choice stays ours
        config._attn_implementation = attn
        torch.manual_seed(seed)
        rows.append(_Row(name, "tite", _checked(TiteModel(config), name, attn),
                         lambda length, config=config: tite_macs(config, length), _pooler))

    torch.manual_seed(seed)
    cross_encoder = BertForSequenceClassification._from_config(BertConfig(**settings, num_labels=1),
                                                                attn_implementation=attn)
    de2 = InfusedDualEncoderModel.from_cross_encoder(cross_encoder, num_copied_layers=1, num_new_layers=1)
    source = cross_encoder.bert
    source.pooler = None  # the classification head's pooler is not part of encoding
    rows.append(_Row(f"DE-2 source ({layers}-layer {shape} cross-encoder)", "source",
                     _checked(source, "the cross-encoder", attn), bert_cost, _mean))
    rows.append(_Row(f"DE-2 (from a {layers}-layer {shape} cross-encoder)", "infused",
                     _checked(de2, "DE-2", attn), lambda length: infused_macs(de2.config, length), _pooler))
    return rows


def _check_attention(attn: str, device: torch.device, dtype: str) -> None:
    if attn not in ATTENTION_CHOICES:
        raise ValueError(f"attn={attn!r}: choose one of {', '.join(ATTENTION_CHOICES)}")
    if attn != "flash_attention_2":
        return
    if device.type != "cuda":
        raise ValueError("attn='flash_attention_2' runs on CUDA only; use --device cuda, or --attn sdpa on CPU")
    if importlib.util.find_spec("flash_attn") is None:
        raise ValueError(
            "attn='flash_attention_2' needs the flash-attn package, which is not importable here "
            "(pip install 'dense-encoders[flash]', built for this torch and GPU); or use --attn sdpa"
        )
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():
        raise ValueError(
            "flash-attn is installed but transformers cannot use it here (is_flash_attn_2_available() is False: "
            "wrong version, or this GPU is not supported); use --attn sdpa"
        )
    if dtype != "bf16":
        raise ValueError("attn='flash_attention_2' computes in bf16/fp16 only; use --dtype bf16 (the CUDA default)")


# ------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------


def _time_batch(row: _Row, batch: dict, device: torch.device, dtype: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(device, dtype):
        output = row.encode(row.model, batch)
    synchronize(device)
    elapsed = time.perf_counter() - start
    size = batch["input_ids"].shape[0]
    if output.dim() != 2 or output.shape[0] != size or not bool(torch.isfinite(output).all()):
        raise RuntimeError(f"{row.name}: output {tuple(output.shape)} (expected ({size}, width)) or non-finite")
    return elapsed


def efficiency_report(
    device: str | torch.device = "cpu",
    dtype: str | None = None,
    presets: Sequence[str] | Mapping[str, object] | None = None,
    attn: str = "sdpa",
    num_queries: int = DEFAULT_SIZES["num_queries"],
    query_batch: int = DEFAULT_SIZES["query_batch"],
    num_docs: int = DEFAULT_SIZES["num_docs"],
    doc_batch: int = DEFAULT_SIZES["doc_batch"],
    rounds: int = DEFAULT_SIZES["rounds"],
    seed: int = 0,
    plot_path: str | Path | None = None,
    *,
    warmup: int = 1,
    threads: int | None = None,
    bert_config: BertConfig | None = None,
    max_length: int = MAX_LENGTH,
    query_length: int = QUERY_LENGTH,
    command: str | None = None,
    progress: bool = True,
) -> dict:
    """Measure encode texts/s of every row (module docstring) on queries and documents.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        dtype: ``"fp32"`` or ``"bf16"`` (autocast); default fp32 on CPU, bf16 on CUDA.
        presets: TITE preset names (``TITE_PRESETS`` or ``TINY_PRESETS``) or a mapping label ->
            ``TiteConfig``; default: every ``TITE_PRESETS`` entry that reaches one vector at
            ``max_length`` (:func:`default_presets`).
        attn: attention of every row but the baseline (always sdpa): sdpa, eager or flash_attention_2.
        plot_path: also write :func:`plot` there (PNG).
        bert_config: the BERT shape of the baseline, Condenser and DE-2 source rows (default
            BERT-base); its vocabulary is replaced by bert-base-uncased's size.
        max_length, query_length: document length cap and query length (512 and 32; smaller for tiny models).
        command: the command line printed under the report (default: this call).
        progress: print one line per round and workload to stderr.

    Returns a JSON-ready dict: ``config``, ``rows`` (name, kind, attention, parameters),
    ``workloads[queries|documents]`` (``stats`` and per-row results, see :func:`format_report`),
    ``de2_vs_source`` and ``plot`` (the PNG path or None).
    """
    import transformers

    device = torch.device(device)
    if dtype is None:
        dtype = "bf16" if device.type == "cuda" else "fp32"
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype={dtype!r}: choose fp32 or bf16")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA device is available to this torch build")
    _check_attention(attn, device, dtype)
    sizes = dict(num_queries=num_queries, query_batch=query_batch, num_docs=num_docs, doc_batch=doc_batch,
                 rounds=rounds, max_length=max_length, query_length=query_length)
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup}: must be >= 0")
    if query_length > max_length:
        raise ValueError(f"query_length={query_length} exceeds max_length={max_length}")
    bert_config = bert_base_config(max_length) if bert_config is None else bert_config
    if bert_config.max_position_embeddings < max_length:
        raise ValueError(f"bert_config has {bert_config.max_position_embeddings} positions < max_length={max_length}")
    tite_configs = _tite_configs(default_presets(max_length) if presets is None else presets, max_length)
    if command is None:
        command = (f"dense_encoders.benchmarking.efficiency_report(device={str(device)!r}, dtype={dtype!r}, attn={attn!r}, "
                   f"presets={list(tite_configs)}, num_queries={num_queries}, query_batch={query_batch}, "
                   f"num_docs={num_docs}, doc_batch={doc_batch}, rounds={rounds}, seed={seed})")
    if threads:
        torch.set_num_threads(threads)

    def say(message):
        if progress:
            print(message, file=sys.stderr, flush=True)

    generator = torch.Generator().manual_seed(seed)
    query_lengths = [query_length] * num_queries
    doc_lengths = document_lengths(num_docs, generator, max_length)
    workloads = {
        "queries": (query_lengths, make_batches(query_lengths, query_batch, generator)),
        "documents": (doc_lengths, make_batches(doc_lengths, doc_batch, generator)),
    }
    rows = _build_rows(bert_config, tite_configs, attn, seed)
    for row in rows:
        row.model.to(device).eval()
    moved = {name: [{k: v.to(device) for k, v in b.items()} for b in batches] for name, (_, batches) in workloads.items()}
    say(f"built {len(rows)} models; warming up")
    first_docs = {key: value[:4] for key, value in moved["documents"][0].items()}
    for row in rows:
        for batch in [moved["queries"][0], first_docs] * warmup:
            _time_batch(row, batch, device, dtype)

    # times[workload][row][round][batch]: seconds of one forward pass
    times = {name: {row.name: [[math.nan] * len(moved[name]) for _ in range(rounds)] for row in rows}
             for name in workloads}
    started = time.perf_counter()
    pressure = []
    for round_index in range(rounds):
        for name in workloads:
            for batch_index, batch in enumerate(moved[name]):
                shift = (round_index + batch_index) % len(rows)
                for row in rows[shift:] + rows[:shift]:  # rotate: no row always runs first / after the same row
                    times[name][row.name][round_index][batch_index] = _time_batch(row, batch, device, dtype)
            pressure.append(cpu_pressure())
            shown = "n/a" if pressure[-1] is None else f"{pressure[-1]:.0f}%"
            rates = "  ".join(f"{row.name} {len(workloads[name][0]) / sum(times[name][row.name][round_index]):.1f}"
                              for row in rows)
            say(f"round {round_index + 1}/{rounds} {name} texts/s: {rates}  "
                f"[{time.perf_counter() - started:.0f}s, CPU pressure {shown}]")
    timed = time.perf_counter() - started

    baseline = rows[0].name
    results = {
        "command": command,
        "config": {
            "device": device_name(device),
            "dtype": dtype,
            "attention": attn,
            "baseline_attention": "sdpa",
            "threads": torch.get_num_threads(),
            "rounds": rounds,
            "warmup_passes": warmup,
            "query_batch": query_batch,
            "doc_batch": doc_batch,
            "query_length": query_length,
            "max_length": max_length,
            "seed": seed,
            "bert_shape": _shape_name(bert_config),
            "bert_base_shaped": _shape_name(bert_config) == "BERT-base",
            "baseline": baseline,
            "timed_seconds": timed,
            "cpu_pressure_avg10": pressure,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "rows": [{"model": row.name, "kind": row.kind, "attention": row.attention, "parameters": row.parameters}
                 for row in rows],
        "workloads": {},
        "de2_vs_source": {},
        "plot": None,
    }
    source = next(row for row in rows if row.kind == "source")
    infused = next(row for row in rows if row.kind == "infused")
    for name, (lengths, batches) in workloads.items():
        bert_real = sum(bert_macs(bert_config, length) for length in lengths)
        bert_padded = sum(batch["input_ids"].shape[0] * bert_macs(bert_config, batch["input_ids"].shape[1])
                          for batch in batches)
        summary = {row.name: summarize(times[name][row.name], len(lengths)) for row in rows}
        reference = summary[baseline]
        table = []
        for row in rows:
            own = summary[row.name]
            macs = sum(row.macs(length) for length in lengths)
            ratio = own["texts_per_s"] / reference["texts_per_s"]
            bound, padded_bound = bert_real / macs, bert_padded / macs
            table.append({
                "model": row.name,
                "kind": row.kind,
                "attention": row.attention,
                "parameters": row.parameters,
                **{key: value for key, value in own.items() if key != "round_rates"},
                "ratio_to_bert": ratio,
                "ratio_to_bert_min_times": own["texts_per_s_best"] / reference["texts_per_s_best"],
                "paired_ratio_to_bert": statistics.median(
                    sum(b) / sum(s) for b, s in zip(times[name][baseline], times[name][row.name])),
                "gmacs": macs / 1e9,
                "flop_bound_ratio": bound,
                "flop_bound_ratio_vs_padded_bert": padded_bound,
                "efficiency": ratio / bound,
                "efficiency_vs_padded_bound": ratio / padded_bound,
                "round_rates": own["round_rates"],
                "batch_seconds": times[name][row.name],
            })
        by_name = {entry["model"]: entry for entry in table}
        de2, src = by_name[infused.name], by_name[source.name]
        ratio = de2["texts_per_s"] / src["texts_per_s"]
        bound = src["gmacs"] / de2["gmacs"]
        results["de2_vs_source"][name] = {"ratio": ratio, "flop_bound_ratio": bound, "efficiency": ratio / bound}
        results["workloads"][name] = {"stats": workload_stats(lengths, batches, max_length),
                                      "bert_gmacs_padded": bert_padded / 1e9, "rows": table}
    if plot_path is not None:
        results["plot"] = str(plot(results, plot_path))
    return results


def format_report(results: dict) -> str:
    """Markdown tables for queries and documents, with the device line, the workloads and the command."""
    c = results["config"]
    q = results["workloads"]["queries"]["stats"]
    d = results["workloads"]["documents"]["stats"]
    lines = [
        (f"device={c['device']}  dtype={c['dtype']}  threads={c['threads']}  attention: baseline sdpa, other rows "
         f"{c['attention']}  torch={c['torch']}  transformers={c['transformers']}  python={c['python']}"),
    ]
    if not c["bert_base_shaped"]:
        lines.append(f"NOTE: tiny random models ({c['bert_shape']} and the presets named below), a check of the "
                     "pipeline: these speeds say nothing about the real models.")
    lines += [
        f"queries: {q['texts']} x {c['query_length']} tokens in {q['batches']} batches of {c['query_batch']}",
        (f"documents: {d['texts']} in {d['batches']} batches of {c['doc_batch']} (random order, padded to the batch's "
         f"longest); length mean {d['mean_length']:.1f}, median {d['median_length']:.0f}, p90 {d['p90_length']}, "
         f"min {d['min_length']}, max {d['max_length']}, {d['at_max_length']} at {c['max_length']}; padding fraction "
         f"{d['padding_fraction']:.1%} ({d['real_tokens']} real of {d['padded_tokens']} tokens)"),
        (f"  length mix: {1 - LONG_FRACTION:.0%} passages ~ logN(median {PASSAGE_MEDIAN:.0f}, sigma {PASSAGE_SIGMA}) "
         f"+ {LONG_FRACTION:.0%} long docs ~ logN(median {LONG_MEDIAN:.0f}, sigma {LONG_SIGMA}), clipped to "
         f"{MAX_LENGTH}" + ("" if c["max_length"] == MAX_LENGTH else f", all scaled by {c['max_length']}/{MAX_LENGTH}")
         + f"; random weights and workloads, seed {c['seed']}"),
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
    lines.append("")
    for name in ("queries", "documents"):
        workload = results["workloads"][name]
        padded = name == "documents"
        header = ["model", "attention", "params (M)", "texts/s", "range", "vs BERT", "FLOP bound", "efficiency"]
        if padded:
            header += ["bound vs padded BERT", "eff. vs padded"]
        header.append("GMACs")
        body = []
        for row in workload["rows"]:
            cells = [
                row["model"], row["attention"], f"{row['parameters'] / 1e6:.1f}", f"{row['texts_per_s']:.1f}",
                f"{row['texts_per_s_min']:.1f}-{row['texts_per_s_max']:.1f}", f"{row['ratio_to_bert']:.2f}x",
                f"{row['flop_bound_ratio']:.2f}x", f"{row['efficiency']:.0%}",
            ]
            if padded:
                cells += [f"{row['flop_bound_ratio_vs_padded_bert']:.2f}x", f"{row['efficiency_vs_padded_bound']:.0%}"]
            cells.append(f"{row['gmacs']:.3g}")
            body.append(cells)
        lines.append(f"### {name} ({workload['stats']['texts']} texts; the baseline computes "
                     f"{workload['bert_gmacs_padded']:.3g} GMACs with padding)")
        lines.append("")
        lines += render_table(header, body)
        pair = results["de2_vs_source"][name]
        lines += ["", (f"DE-2 vs its source on {name}: {pair['ratio']:.2f}x (FLOP bound "
                       f"{pair['flop_bound_ratio']:.2f}x, efficiency {pair['efficiency']:.0%})"), ""]
    lines += [
        (f"vs BERT = texts/s / the texts/s of {c['baseline']}; FLOP bound = its MACs / the row's MACs at real "
         "lengths; efficiency = vs BERT / FLOP bound;"),
        "bound vs padded BERT = the baseline's MACs on the padded batches (what BertModel computes) / the row's MACs.",
        "",
        f"command: {results['command']}",
    ]
    if results.get("plot"):
        lines.append(f"plot: {results['plot']}")
    return "\n".join(lines)


def plot(results: dict, path: str | Path) -> Path:
    """Grouped horizontal bars: speed-up vs BERT per row on queries and documents (log scale), with the
    FLOP bound as markers (documents: also the bound vs padded BERT). Written as PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    c = results["config"]
    names = [row["model"] for row in results["workloads"]["queries"]["rows"]]
    height = 0.38
    colours = {"queries": "#4c72b0", "documents": "#dd8452"}
    figure, axis = plt.subplots(figsize=(11, 1.6 + 0.62 * len(names)))
    values = []
    for offset, name in ((-height / 2, "queries"), (height / 2, "documents")):
        rows = {row["model"]: row for row in results["workloads"][name]["rows"]}
        ys = [index + offset for index in range(len(names))]
        ratios = [rows[n]["ratio_to_bert"] for n in names]
        bounds = [rows[n]["flop_bound_ratio"] for n in names]
        padded = [rows[n]["flop_bound_ratio_vs_padded_bert"] for n in names]
        values += ratios + bounds + (padded if name == "documents" else [])
        axis.barh(ys, ratios, height=height, color=colours[name], label=f"{name}: measured speed-up")
        axis.scatter(bounds, ys, marker="D", s=28, color="black", zorder=3,
                     label="FLOP bound (real lengths)" if name == "queries" else None)
        if name == "documents":
            axis.scatter(padded, ys, marker="D", s=28, facecolors="none", edgecolors="black", zorder=3,
                         label="FLOP bound vs padded BERT (documents)")
        for ratio, y in zip(ratios, ys):  # the measured ratio, inside the bar's end
            axis.text(ratio / 1.03, y, f"{ratio:.2f}x", va="center", ha="right", fontsize=8, color="white",
                      fontweight="bold", zorder=4)
    axis.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    axis.set_xscale("log")
    low, high = min(0.5, min(values) / 1.5), max(values) * 1.3
    axis.set_xlim(low, high)
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= high]
    axis.xaxis.set_major_locator(FixedLocator(ticks))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axis.set_yticks(range(len(names)))
    axis.set_yticklabels(names, fontsize=9)
    axis.invert_yaxis()
    axis.set_xlabel(f"speed-up vs {c['baseline']} (texts/s ratio, log scale)")
    axis.set_title(f"Encode efficiency: {c['device']}, {c['dtype']}, attention {c['attention']}", fontsize=10, pad=26)
    axis.grid(axis="x", alpha=0.3)
    axis.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path


__all__ = [
    "ATTENTION_CHOICES",
    "DEFAULT_SIZES",
    "DTYPE_CHOICES",
    "QUICK_SETTINGS",
    "bert_base_config",
    "bert_macs",
    "default_presets",
    "document_lengths",
    "efficiency_report",
    "format_report",
    "infused_macs",
    "layer_macs",
    "make_batches",
    "plot",
    "tiny_bert_config",
    "tite_macs",
    "workload_stats",
]
