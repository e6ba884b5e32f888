"""Distillation data: the training file of teacher-scored candidate lists, and the collator that
samples and tokenizes them.

Training file format (jsonl, one query per line; :func:`dense_encoders.trainer.teacher.score_teacher`
writes it from a run and a cross-encoder, :func:`run_to_training_file` from a run whose scores are the
teacher's)::

    {"query_id": "q1", "query": "query text", "document_ids": ["d3", "d7"], "scores": [8.21, 1.5]}

``"documents"`` (texts) may be inlined instead of or next to ``"document_ids"``; with ids only, a
corpus resolves them. ``"scores"`` are raw teacher scores, one per document, in the teacher's
ranking order (descending).

``"relevance"`` (optional): relevance labels, one non-negative integer grade per document, aligned
with the documents (0 = not judged relevant)::

    {"query_id": "q1", "query": "query text", "document_ids": ["d3", "d7"], "scores": [8.21, 1.5], "relevance": [0, 1]}

Qrels (``read_training_file(..., qrels=...)``, ``dense-encoders distill --qrels``) give the same grades
from the line's ``query_id`` and ``document_ids`` (unjudged documents get 0); they replace a line's
``"relevance"`` field, with a warning. Documents whose grade is at least the relevance level (default
1) are the judged positives P of M3SE and RankDistil-B (Menon et al. 2022, In Defense of
Dual-Encoders for Neural Ranking; see :class:`DistillationCollator`); without labels P is the
teacher's best document.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .format import DataFormatError, document_text, is_blank, is_json_number, json_lines
from .masking import EXAMPLE_INDEX, PerEpochDraws, SharedEpoch, example_generator
from .retrieval import check_relevance_level, read_qrels
from .runs import Run, read_trec_run, top_documents

logger = logging.getLogger(__name__)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # teacher scores beyond it are inf in training

# --------------------------------------------------------------------------------------------
# The training file
# --------------------------------------------------------------------------------------------


def training_line(
    query_id: str, query: str, scored: list[tuple[str, float]], corpus: Mapping, include_texts: bool
) -> bytes:
    """One line of the training file: the query's ``(document id, teacher score)`` pairs by descending
    score (ties: document id), with the documents' texts from ``corpus`` when ``include_texts``."""
    ranked = sorted(scored, key=lambda item: (-item[1], item[0]))
    record = {"query_id": query_id, "query": query, "document_ids": [doc_id for doc_id, _ in ranked]}
    if include_texts:
        record["documents"] = [document_text(corpus[doc_id]) for doc_id, _ in ranked]
    record["scores"] = [score for _, score in ranked]
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def run_to_training_file(
    run: Run | str | Path, output: str | Path, *, queries: dict[str, str], top_k: int = 100
) -> int:
    """Write the training format from a run whose scores ARE the teacher's (e.g. a bi-encoder
    teacher's retrieval run): each query's ``top_k`` documents with their run scores. Returns the
    number of queries written; queries of the run missing from ``queries`` raise a ValueError."""
    run = read_trec_run(run) if isinstance(run, (str, Path)) else run
    missing = [query_id for query_id in run if query_id not in queries]
    if missing:
        raise ValueError(f"{len(missing)} run queries are not in the queries, e.g. {missing[:3]}")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "w", encoding="utf-8") as handle:
        for query_id, doc_ids in top_documents(run, top_k).items():
            line = {"query_id": query_id, "query": queries[query_id], "document_ids": doc_ids,
                    "scores": [float(run[query_id][doc_id]) for doc_id in doc_ids]}
            handle.write(json.dumps(line) + "\n")
    return len(run)


def _optional_id(path: Path, line_number: int, record: dict, name: str) -> str | None:
    value = record.get(name)
    if value is None:
        return None
    if is_json_number(value):
        return str(value)
    if not isinstance(value, str):
        raise DataFormatError(path, line_number, f"{name!r} must be a string, got {type(value).__name__}")
    return value


def _string_list(path: Path, line_number: int, record: dict, name: str) -> list[str]:
    values = record[name]
    if not isinstance(values, list):
        raise DataFormatError(path, line_number, f"{name!r} must be a list, got {type(values).__name__}")
    for position, value in enumerate(values, start=1):
        if not isinstance(value, str):
            raise DataFormatError(
                path, line_number, f"{name!r} item {position} must be a string, got {type(value).__name__}"
            )
    return values


def _query_of(path: Path, line_number: int, record: dict, query_id: str | None, queries) -> str:
    """The line's ``"query"`` text, or the text of its ``"query_id"`` in ``queries``."""
    query = record.get("query")
    if query is not None:
        if not isinstance(query, str):
            raise DataFormatError(path, line_number, f"'query' must be a string, got {type(query).__name__}")
    elif query_id is None:
        raise DataFormatError(path, line_number, "needs 'query' text or a 'query_id'")
    elif queries is None:
        raise DataFormatError(
            path, line_number, f"no 'query' text, and no queries were given to look up query_id {query_id!r}"
        )
    elif query_id not in queries:
        raise DataFormatError(path, line_number, f"query_id {query_id!r} is not in the queries")
    else:
        query = queries[query_id]
    if is_blank(query):  # it would be encoded as the empty string
        named = f"query {query_id!r}" if query_id is not None else "the query"
        raise DataFormatError(path, line_number, f"{named} has an empty or blank text; fill it in or remove the line")
    return query


def _documents_of(path: Path, line_number: int, record: dict, document_ids: list[str] | None, corpus) -> list[str]:
    """The line's ``"documents"`` texts, or the texts of its ``"document_ids"`` in ``corpus``."""
    if record.get("documents") is not None:
        documents = _string_list(path, line_number, record, "documents")
        if document_ids is not None and len(document_ids) != len(documents):
            raise DataFormatError(path, line_number, f"{len(document_ids)} document_ids for {len(documents)} documents")
    elif document_ids is None:
        raise DataFormatError(path, line_number, "needs 'documents' texts or 'document_ids'")
    elif corpus is None:
        raise DataFormatError(
            path, line_number, "no 'documents' texts, and no corpus was given to look up 'document_ids': pass the "
            "corpus the ids come from (distill --corpus BEIR_FOLDER or corpus.jsonl; score-teacher writes ids only, "
            "unless --include-texts)"
        )
    else:
        unknown = [doc_id for doc_id in document_ids if doc_id not in corpus]
        if unknown:
            raise DataFormatError(
                path, line_number, f"document id {unknown[0]!r} is not in the corpus"
                + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            )
        documents = [document_text(corpus[doc_id]) for doc_id in document_ids]
    if not documents:
        raise DataFormatError(path, line_number, "no documents")
    return documents


def _scores_of(path: Path, line_number: int, record: dict, documents: list[str]) -> list[float]:
    """The line's ``"scores"``: one number per document, finite in float32 (the precision training computes in)."""
    if "scores" not in record:
        raise DataFormatError(path, line_number, "missing field 'scores'")
    scores = record["scores"]
    if not isinstance(scores, list):
        raise DataFormatError(path, line_number, f"'scores' must be a list, got {type(scores).__name__}")
    if len(scores) != len(documents):
        raise DataFormatError(path, line_number, f"{len(scores)} scores for {len(documents)} documents")
    for position, score in enumerate(scores, start=1):
        if not is_json_number(score):
            raise DataFormatError(path, line_number, f"score {position} is not a number: {score!r}")
        if math.isnan(score):
            raise DataFormatError(path, line_number, f"score {position} is NaN")
        if math.isinf(score):
            raise DataFormatError(path, line_number, f"score {position} is {'inf' if score > 0 else '-inf'}")
        if abs(score) > FLOAT32_MAX:  # training computes in float32, where it would be inf
            raise DataFormatError(path, line_number, f"score {position} is {score!r}, beyond float32's range "
                                  f"(±{FLOAT32_MAX:.4g}), in which training computes: rescale the teacher's scores")
    return [float(score) for score in scores]


def _relevance_of(path: Path, line_number: int, record: dict, documents: list[str]) -> list[int] | None:
    """The line's optional ``"relevance"``: one non-negative integer grade per document."""
    grades = record.get("relevance")
    if grades is None:
        return None
    if not isinstance(grades, list):
        raise DataFormatError(path, line_number, f"'relevance' must be a list of grades, got {type(grades).__name__}")
    if len(grades) != len(documents):
        raise DataFormatError(
            path, line_number, f"{len(grades)} relevance grades for {len(documents)} documents: give one per document"
        )
    for position, grade in enumerate(grades, start=1):
        if not is_json_number(grade) or not math.isfinite(grade) or grade != int(grade):
            raise DataFormatError(
                path, line_number, f"relevance grade {position} is not an integer: {grade!r} (0 = not relevant)"
            )
        if grade < 0:
            raise DataFormatError(
                path, line_number, f"relevance grade {position} is negative: {grade!r} (0 = not relevant)"
            )
    return [int(grade) for grade in grades]


def _grades_from_qrels(
    path: Path, line_number: int, query_id: str | None, document_ids: list[str] | None, qrels: Mapping, source: str
) -> list[int]:
    if query_id is None or document_ids is None:
        missing = "'query_id'" if query_id is None else "'document_ids'"
        raise DataFormatError(
            path, line_number, f"no {missing} to look up in the qrels {source}: add query_id and document_ids "
            "to the line, or give its grades in a 'relevance' field instead of qrels"
        )
    judged = qrels.get(query_id, {})
    return [int(judged.get(doc_id, 0)) for doc_id in document_ids]


def read_training_file(
    path: str | Path,
    *,
    corpus: Mapping[str, Mapping[str, str]] | None = None,
    queries: Mapping[str, str] | None = None,
    qrels: Mapping[str, Mapping[str, int]] | str | Path | None = None,
) -> list[dict]:
    """Read and validate a distillation training file (the format of this module's docstring).

    Each line needs the query (``"query"`` text, or a ``"query_id"`` found in ``queries``; not blank), at least
    one document (``"documents"`` texts, or ``"document_ids"`` found in ``corpus``) and ``"scores"``:
    one number per document, finite in float32; ``"relevance"``, when present, one non-negative integer grade
    per document. Any problem raises :class:`DataFormatError` naming ``file:line`` (score and grade
    positions counted from 1). Returns one record per line: ``{"query_id", "query", "document_ids",
    "documents", "scores", "relevance"}`` with document texts and float scores; ``query_id``,
    ``document_ids`` and ``relevance`` are None where the line has none.

    ``qrels`` (``{query id: {document id: grade}}``, or a BEIR / TREC qrels file,
    :func:`~dense_encoders.data.retrieval.read_qrels`) grade every line's documents by its
    ``query_id`` and ``document_ids`` (unjudged: 0), replacing ``"relevance"`` fields with a warning;
    a line without those ids is an error, and so are qrels that judge none of the file's queries.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training file not found: {path}")
    source = "given"
    if isinstance(qrels, (str, Path)):
        source = Path(qrels).name
        qrels = read_qrels(qrels)
    records: list[dict] = []
    replaced: list[int] = []
    for line_number, record in json_lines(path):
        query_id = _optional_id(path, line_number, record, "query_id")
        query = _query_of(path, line_number, record, query_id, queries)
        document_ids = _string_list(path, line_number, record, "document_ids") if "document_ids" in record else None
        documents = _documents_of(path, line_number, record, document_ids, corpus)
        scores = _scores_of(path, line_number, record, documents)
        relevance = _relevance_of(path, line_number, record, documents)
        if qrels is not None:
            if relevance is not None:
                replaced.append(line_number)
            relevance = _grades_from_qrels(path, line_number, query_id, document_ids, qrels, source)
        records.append(
            {
                "query_id": query_id,
                "query": query,
                "document_ids": document_ids,
                "documents": documents,
                "scores": scores,
                "relevance": relevance,
                "line": line_number,
            }
        )
    if not records:
        raise ValueError(f"{path} holds no training examples")
    if qrels is not None:
        if not any(record["query_id"] in qrels for record in records):
            raise ValueError(
                f"the qrels {source} judge none of the {len(records)} queries of {path} (first query_id "
                f"{records[0]['query_id']!r}): give the qrels of the training queries"
            )
        if replaced:
            logger.warning(
                "%s: %d line(s) carry a 'relevance' field (first at line %d); the qrels %s replace them",
                path, len(replaced), replaced[0], source,
            )
    return records


# --------------------------------------------------------------------------------------------
# Sampling and batching
# --------------------------------------------------------------------------------------------

SAMPLING_STRATEGIES = ("random", "top", "log-random")


def sample_documents(
    scores: Sequence[float],
    k: int,
    strategy: str = "random",
    generator: torch.Generator | None = None,
    positives: Sequence[bool] | None = None,
) -> list[int]:
    """Indices of ``k`` of a query's documents, always including the teacher's best.

    ``top``: the teacher's k best. ``random``: the best plus k-1 drawn uniformly from the rest.
    ``log-random``: the best plus k-1 drawn without replacement with probability proportional to
    1 / (teacher rank - 1) (ranks 2, 3, ...), i.e. uniform over log-rank: hard negatives are likely,
    the tail is still seen. Fewer than k documents: all of them. Returned in teacher order.

    ``positives`` (one bool per document, the judged positives): with ``k >= 2`` the teacher-highest
    judged positive is kept as well, so P is never sampled away: ``top`` replaces the k-th document
    by it when it is not among the k best, ``random`` / ``log-random`` draw the other k-2 from the
    remaining documents (with their own rank weights). When the teacher's best is judged (or nothing
    is) the sample is the unlabelled one.
    """
    if strategy not in SAMPLING_STRATEGIES:
        raise ValueError(f"sampling strategy {strategy!r}: choose one of {SAMPLING_STRATEGIES}")
    if k < 1:
        raise ValueError(f"documents per query must be at least 1, got {k}")
    if positives is not None and len(positives) != len(scores):
        raise ValueError(f"{len(positives)} positive flags for {len(scores)} documents")
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))  # teacher ranking
    if len(order) <= k:
        return order
    judged = next((i for i in order if positives[i]), None) if positives is not None and k >= 2 else None
    kept = [order[0]] if judged is None or judged == order[0] else [order[0], judged]
    if strategy == "top":
        return order[:k] if judged is None or judged in order[:k] else order[: k - 1] + [judged]
    rank = {index: position for position, index in enumerate(order)}
    rest = [i for i in order if i not in kept]
    if strategy == "random":
        weights = torch.ones(len(rest))
    else:
        weights = 1.0 / torch.tensor([rank[i] for i in rest], dtype=torch.float64)
    count = k - len(kept)  # 0 when k == 1, or k == 2 with a judged positive below the teacher's best
    picked = torch.multinomial(weights, count, replacement=False, generator=generator).tolist() if count else []
    chosen = kept + [rest[i] for i in picked]
    return sorted(chosen, key=rank.__getitem__)


class DistillationCollator(PerEpochDraws):
    """Sample ``documents_per_query`` documents per query and tokenize queries and documents.

    Queries and documents have their own max lengths (32 / 512 by default, TITE's fine-tuning
    setup). Queries with fewer documents than asked get padded slots: a one-token placeholder with
    ``document_mask`` False, which every loss ignores. Sampling is seeded by (seed, epoch, example
    index) when examples carry ``example_index``, so a resumed run sees the same documents, and data-loader
    workers (persistent ones too) sample with the epoch the Trainer set last.

    Batch: ``query_input_ids`` / ``query_attention_mask`` [Q, Lq], ``document_input_ids`` /
    ``document_attention_mask`` [Q*K, Ld], ``teacher_scores`` and ``document_mask`` [Q, K].

    Relevance labels: when any example of the batch carries ``"relevance"`` (grades aligned with its
    documents), the batch also holds ``positives`` bool [Q, K], the positive set P of M3SE and
    RankDistil-B: a query's sampled documents graded at least ``relevance_level``, when there are
    some AND at least one sampled document is not; otherwise (no judged positive among its
    candidates, only judged positives sampled, no labels) its teacher's best document, which is P
    without labels. Sampling keeps the teacher-highest judged positive (:func:`sample_documents`).
    """

    def __init__(
        self,
        tokenizer,
        *,
        documents_per_query: int = 8,
        sampling: str = "random",
        query_max_length: int = 32,
        document_max_length: int = 512,
        min_documents: int = 1,
        query_prefix: str = "",
        document_prefix: str = "",
        seed: int | None = None,
        relevance_level: int = 1,
    ):
        if sampling not in SAMPLING_STRATEGIES:
            raise ValueError(f"sampling={sampling!r}: choose one of {SAMPLING_STRATEGIES}")
        if documents_per_query < min_documents:
            raise ValueError(
                f"documents_per_query={documents_per_query} but the configured losses need at least {min_documents}"
            )
        for name, value in (("query_max_length", query_max_length), ("document_max_length", document_max_length)):
            if value < 2:
                raise ValueError(f"{name}={value}: must leave room for at least one token besides the specials")
        check_relevance_level(relevance_level)
        self.tokenizer = tokenizer
        self.relevance_level = relevance_level
        self.documents_per_query = documents_per_query
        self.sampling = sampling
        self.query_max_length = query_max_length
        self.document_max_length = document_max_length
        self.min_documents = min_documents
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.seed = seed
        self._epoch = SharedEpoch(0)  # shared with data-loader workers, persistent ones too
        self.generator = torch.Generator().manual_seed(seed if seed is not None else 0)

    def _generator_for(self, example: Mapping[str, Any]) -> torch.Generator:
        if self.seed is not None and EXAMPLE_INDEX in example:
            return example_generator(self.seed, self.epoch, int(example[EXAMPLE_INDEX]))
        return self.generator

    def __call__(self, examples: list[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("empty batch")
        k = self.documents_per_query
        queries, documents, teacher, mask, positives = [], [], [], [], []
        labelled = any(example.get("relevance") is not None for example in examples)
        for example in examples:
            scores = [float(s) for s in example["scores"]]
            texts = example["documents"]
            where = f"query {example.get('query_id', '?')!r}"
            if len(scores) != len(texts):
                raise ValueError(f"{where}: {len(scores)} teacher scores for {len(texts)} documents")
            if not all(math.isfinite(s) for s in scores):
                raise ValueError(f"{where}: teacher scores must be finite, got {scores}")
            if len(texts) < self.min_documents:
                raise ValueError(
                    f"{where} has {len(texts)} document(s) but the configured losses need at least {self.min_documents}"
                )
            judged = self._judged(example, where, len(texts))
            chosen = sample_documents(scores, k, self.sampling, self._generator_for(example), positives=judged)
            if labelled:
                positives.append(positive_set([judged[i] for i in chosen] if judged else None, k))
            queries.append(self.query_prefix + example["query"])
            documents.extend(self.document_prefix + texts[i] for i in chosen)
            teacher.append([scores[i] for i in chosen] + [0.0] * (k - len(chosen)))
            mask.append([True] * len(chosen) + [False] * (k - len(chosen)))
            documents.extend([""] * (k - len(chosen)))  # placeholders, masked out
        query_batch = self.tokenizer(
            queries, padding=True, truncation=True, max_length=self.query_max_length, return_tensors="pt"
        )
        document_batch = self.tokenizer(
            documents, padding=True, truncation=True, max_length=self.document_max_length, return_tensors="pt"
        )
        batch = {
            "query_input_ids": query_batch["input_ids"],
            "query_attention_mask": query_batch["attention_mask"],
            "document_input_ids": document_batch["input_ids"],
            "document_attention_mask": document_batch["attention_mask"],
            "teacher_scores": torch.tensor(teacher, dtype=torch.float32),
            "document_mask": torch.tensor(mask, dtype=torch.bool),
        }
        if labelled:
            batch["positives"] = torch.tensor(positives, dtype=torch.bool)
        return batch

    def _judged(self, example: Mapping[str, Any], where: str, count: int) -> list[bool] | None:
        """One flag per document (grade >= relevance level), None without labels."""
        grades = example.get("relevance")
        if grades is None:
            return None
        if len(grades) != count:
            raise ValueError(f"{where}: {len(grades)} relevance grades for {count} documents")
        return [int(grade) >= self.relevance_level for grade in grades]


def positive_set(judged: Sequence[bool] | None, k: int) -> list[bool]:
    """A query's row of ``positives`` from the judged flags of its sampled documents (teacher order):
    the judged ones when there are some and at least one is not, else the teacher's best (the first)."""
    if judged and any(judged) and not all(judged):
        return list(judged) + [False] * (k - len(judged))
    return [True] + [False] * (k - 1)


def uses_labelled_positives(record: Mapping[str, Any], documents_per_query: int, relevance_level: int = 1) -> bool:
    """Whether the collator gives this query a labelled P: its candidates hold a document graded at least
    ``relevance_level`` and one graded below, and at least 2 documents are sampled (the judged positive is
    kept, so then a sampled negative is certain unless the teacher's best is judged too and every other
    sampled document happens to be judged: that step falls back to the teacher's best)."""
    grades = record.get("relevance")
    if grades is None or documents_per_query < 2:
        return False
    judged = [int(grade) >= relevance_level for grade in grades]
    return any(judged) and not all(judged)


def training_records_to_dataset(records: list[dict]):
    """Records of :func:`read_training_file` as a ``datasets.Dataset`` with ``query``, ``documents``,
    ``scores``, ``query_id`` and ``example_index`` columns, and ``relevance`` when any record has grades."""
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    if not records:
        raise ValueError("no training records")
    columns = {
        "query_id": [str(r.get("query_id", i)) for i, r in enumerate(records)],
        "query": [r["query"] for r in records],
        "documents": [list(r["documents"]) for r in records],
        "scores": [[float(s) for s in r["scores"]] for r in records],
        EXAMPLE_INDEX: list(range(len(records))),
    }
    if any(r.get("relevance") is not None for r in records):
        # every example carries grades (0 where its line has none), so every batch of the run (and of every
        # process) holds ``positives``
        columns["relevance"] = [[int(g) for g in r["relevance"]] if r.get("relevance") is not None
                                else [0] * len(r["documents"]) for r in records]
    return datasets.Dataset.from_dict(columns)


__all__ = [
    "SAMPLING_STRATEGIES",
    "DistillationCollator",
    "positive_set",
    "read_training_file",
    "run_to_training_file",
    "sample_documents",
    "training_line",
    "training_records_to_dataset",
    "uses_labelled_positives",
]
