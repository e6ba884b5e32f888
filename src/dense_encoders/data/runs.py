"""TREC runs: ``qid Q0 docid rank score tag`` per line, read into and written from ``{qid: {docid: score}}``.

Every run we write goes through :func:`write_ranked_trec_run`, which writes a :class:`RankedRun` (a run as arrays,
each query's documents in the order of every run we write: descending score, ties by doc id). A run dict becomes
one (:meth:`RankedRun.from_run`, what :func:`write_trec_run` does), and so does a top-k of row indices
(:meth:`RankedRun.from_rows`, what ``search`` writes from, without a tuple or a dict per result). The lines are
written without formatting anything per line: each id's, rank's and query's bytes are made once, a score's are put
together from tables (:func:`_six_decimals`), and a block of lines is those rows side by side (:func:`_trec_bytes`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .format import DataFormatError, has_whitespace, parses_as_number, require_file, text_lines

Run = dict[str, dict[str, float]]

# a score's text comes from tables when its magnitude is below this (:func:`_six_decimals`); others are formatted
TABLE_SCORE_LIMIT = 1000
# the byte that pads every piece of a line to its column's width, dropped before the line is written: a tab, which
# no id, tag or number of a run holds
_PAD = ord("\t")
# about this many bytes of lines are put together at a time (:func:`_trec_bytes`)
_BYTES_PER_WRITE = 1 << 25


def _table(texts: Sequence[str]) -> np.ndarray:
    """A table of texts as :func:`_trec_bytes` takes them: each text's UTF-8 bytes padded with ``_PAD`` to the
    longest (at least one byte), one raw numpy value (``V{width}``) per text, so that taking rows is one copy each."""
    encoded = [text.encode("utf-8") for text in texts]
    width = max(1, *map(len, encoded)) if encoded else 1
    return np.frombuffer(b"".join(text.ljust(width, b"\t") for text in encoded), dtype=f"V{width}")


# a score's sign and integer part with its point ("0.", "-0.", ..., "-1000."), three decimals ("000" .. "999"); the
# last row of each is blank, for the scores Python formats
_INTEGER_PARTS = _table([f"{whole}." for whole in range(TABLE_SCORE_LIMIT + 1)]
                        + [f"-{whole}." for whole in range(TABLE_SCORE_LIMIT + 1)] + [""])
_THREE_DIGITS = _table([f"{value:03d}" for value in range(1000)] + [""])


def read_trec_run(path: str | Path) -> Run:
    """TREC run: ``qid Q0 docid rank score tag`` separated by whitespace."""
    path = require_file(Path(path), "run file")
    run: Run = {}
    for line_number, line in text_lines(path):
        if not line.strip():
            continue
        columns = line.split()
        if len(columns) != 6:
            raise DataFormatError(
                path, line_number, f"expected 6 columns (qid Q0 docid rank score tag), got {len(columns)}"
            )
        query_id, _, doc_id, rank, score, _ = columns
        if not parses_as_number(rank) or not parses_as_number(score):
            raise DataFormatError(path, line_number, f"rank {rank!r} and score {score!r} must be numbers")
        documents = run.setdefault(query_id, {})
        if doc_id in documents:
            raise DataFormatError(path, line_number, f"document {doc_id!r} appears twice for query {query_id!r}")
        documents[doc_id] = float(score)
    return run


def _ranked(documents: dict[str, float]) -> list[tuple[str, float]]:
    """A query's documents by descending score, ties by document id: the order of every run we write."""
    return sorted(documents.items(), key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True, eq=False)
class RankedRun:
    """A run as arrays, each query's documents already in the order of every run we write (descending score, ties
    by doc id), as :func:`write_ranked_trec_run` writes it.

    Attributes:
        query_ids: the queries, in the order they are written.
        doc_ids: the distinct ids of the documents the run holds (made an object array).
        documents: ``[lines]`` each line's document, an index into ``doc_ids``: the first query's lines, then the
            second's, ...
        scores: ``[lines]`` each line's score (float32 from a search; any float).
        counts: ``[queries]`` how many lines each query has.
    """

    query_ids: Sequence[str]
    doc_ids: np.ndarray
    documents: np.ndarray
    scores: np.ndarray
    counts: np.ndarray

    def __post_init__(self):
        for name, dtype in (("documents", np.int64), ("scores", None), ("counts", np.int64)):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=dtype).reshape(-1))
        if not (isinstance(self.doc_ids, np.ndarray) and self.doc_ids.dtype == object):
            object.__setattr__(self, "doc_ids", _object_array(list(self.doc_ids)))
        if len(set(self.doc_ids.tolist())) != len(self.doc_ids):
            raise ValueError("doc_ids holds an id twice: give each document one index")
        if len(self.counts) != len(self.query_ids):
            raise ValueError(f"{len(self.counts)} counts for {len(self.query_ids)} queries")
        if len(self.documents) and not 0 <= self.documents.min() <= self.documents.max() < len(self.doc_ids):
            raise ValueError(f"documents are indices into doc_ids: each must be in [0, {len(self.doc_ids)})")
        lines = int(np.sum(self.counts))
        if len(self.documents) != lines or len(self.scores) != lines:
            raise ValueError(f"{len(self.documents)} documents and {len(self.scores)} scores for {lines} lines")

    @classmethod
    def from_run(cls, run: Run) -> "RankedRun":
        """A run dict ``{query id: {doc id: score}}``, each query's documents sorted into the order of every run
        we write."""
        index: dict[str, int] = {}
        documents, scores, counts = [], [], []
        for documents_of_query in run.values():
            ranked = _ranked(documents_of_query)
            documents += [index.setdefault(doc_id, len(index)) for doc_id, _ in ranked]
            scores += [score for _, score in ranked]
            counts.append(len(ranked))
        return cls(list(run), _object_array(list(index)), np.array(documents, dtype=np.int64),
                   np.array(scores, dtype=np.float64), np.array(counts, dtype=np.int64))

    @classmethod
    def from_rows(cls, query_ids: Sequence[str], doc_ids: Sequence[str], documents, scores) -> "RankedRun":
        """A top-k: row ``i`` holds query ``i``'s documents (indices into ``doc_ids``, ``-1`` for none: FAISS's
        padding, skipped) and their scores, ``[queries, k]``, best first as every search answers. Documents that
        tie on score are put in doc id order (a search puts them in row order); a row that is not best first (a
        score below a later one, a NaN, or a ``-1`` before a document) is sorted whole, by (-score, doc id)."""
        documents, scores = np.array(documents, dtype=np.int64), np.array(scores)
        if documents.ndim != 2 or documents.shape != scores.shape or len(documents) != len(query_ids):
            raise ValueError(f"documents {documents.shape} and scores {scores.shape} for {len(query_ids)} queries")
        # an id given at two positions is one document: doc_ids made distinct
        index: dict[str, int] = {}
        distinct = np.array([index.setdefault(doc_id, len(index)) for doc_id in doc_ids], dtype=np.int64)
        documents = np.where(documents >= 0, distinct[np.maximum(documents, 0)], -1) if len(doc_ids) else documents
        doc_ids = _object_array(list(index))
        found = documents >= 0
        best_first = ((found[:, 1:] <= found[:, :-1]) & ((scores[:, 1:] <= scores[:, :-1]) | ~found[:, 1:])).all(1)
        for row in np.flatnonzero(~best_first).tolist():
            _sort_row(documents[row], scores[row], doc_ids)
        _order_ties(documents, scores, doc_ids, found & best_first[:, None])
        found = documents >= 0
        return cls(list(query_ids), doc_ids, documents[found], scores[found], found.sum(axis=1))

    def queries(self) -> Iterator[tuple[str, list[str], list[float]]]:
        """``(query id, doc ids, scores)`` of each query, in order."""
        ends = np.cumsum(self.counts).tolist()
        doc_ids, scores = self.doc_ids[self.documents].tolist(), self.scores.tolist()
        start = 0
        for query_id, end in zip(self.query_ids, ends):
            yield query_id, doc_ids[start:end], scores[start:end]
            start = end

    def to_run(self) -> Run:
        """``{query id: {doc id: score}}``."""
        return {query_id: dict(zip(doc_ids, scores)) for query_id, doc_ids, scores in self.queries()}


def _object_array(items: list) -> np.ndarray:
    """``items`` as a 1-D object array (``np.array`` would make a list of strings a unicode array)."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def _sort_row(documents: np.ndarray, scores: np.ndarray, doc_ids: np.ndarray) -> None:
    """Sort one row of a top-k in place by (-score, doc id), its documents first and its ``-1`` after them."""
    found = documents >= 0
    pairs = sorted(zip(scores[found].tolist(), doc_ids[documents[found]].tolist(), documents[found].tolist()),
                   key=lambda pair: (-pair[0], pair[1]))
    count = len(pairs)
    documents[:count] = [document for _, _, document in pairs]
    scores[:count] = [score for score, _, _ in pairs]
    documents[count:] = -1


def _order_ties(documents: np.ndarray, scores: np.ndarray, doc_ids: np.ndarray, ranked: np.ndarray) -> None:
    """In place, in the rows of a top-k whose ``ranked`` entries come best first: each run of equal scores put in
    doc id order (the scores move with their documents: 0.0 and -0.0 are equal but print differently)."""
    tied = ranked[:, 1:] & ranked[:, :-1] & (scores[:, 1:] == scores[:, :-1])
    if not tied.any():
        return
    width = documents.shape[1]
    rows, columns = np.nonzero(tied)
    pairs = rows * width + columns  # flat places of the first of two tied neighbours
    members = np.union1d(pairs, pairs + 1)  # every place in a run of ties, in order
    # a run starts where a member is not the second of a tied pair
    group = np.cumsum(~np.isin(members, pairs + 1))
    flat_documents, flat_scores = documents.reshape(-1), scores.reshape(-1)
    keys = list(zip(group.tolist(), doc_ids[flat_documents[members]].tolist()))
    order = sorted(range(len(members)), key=keys.__getitem__)
    sources = members[order]
    flat_documents[members], flat_scores[members] = flat_documents[sources], flat_scores[sources]


def write_trec_run(run: Run, path: str | Path, tag: str = "dense-encoders") -> Path:
    """Write ``run`` as a TREC run file, each query's documents by descending score (ties: doc id). An id with
    whitespace (which would add a column) is refused before anything is written."""
    return write_ranked_trec_run(RankedRun.from_run(run), path, tag=tag)


def write_ranked_trec_run(ranked: RankedRun, path: str | Path, tag: str = "dense-encoders") -> Path:
    """Write a :class:`RankedRun` as a TREC run file, each query's documents in the order given: every run we write
    (:func:`write_trec_run`, ``search``) is written here. An id with whitespace or an empty one (query, document or
    tag), or a document twice in one query, is refused before anything is written."""
    _refuse_repeats(ranked)
    used = ranked.doc_ids[np.bincount(ranked.documents, minlength=len(ranked.doc_ids)) > 0].tolist()
    bad = _bad_id([tag, *ranked.query_ids, *used])
    if bad is not None:
        raise ValueError(f"{bad!r} is empty or contains whitespace: a TREC run cannot hold it as an id or tag")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the tables of the columns, each made once: "{qid} Q0 ", the doc ids, " {rank} "; and each line's row of each
    queries, documents = _table([f"{query_id} Q0 " for query_id in ranked.query_ids]), _table(ranked.doc_ids.tolist())
    ranks = _table([f" {rank} " for rank in range(1, int(ranked.counts.max(initial=0)) + 1)])
    line_queries = np.repeat(np.arange(len(ranked.counts)), ranked.counts)
    line_ranks = np.arange(len(line_queries)) - np.repeat(np.cumsum(ranked.counts) - ranked.counts, ranked.counts)
    # text mode would write os.linesep for each "\n": the same bytes, written here without a text layer
    end = _table([f" {tag}{os.linesep}"])
    width = sum(table.itemsize for table in (queries, documents, ranks, _INTEGER_PARTS, end)) + 6
    step = max(1, _BYTES_PER_WRITE // width)
    with open(path, "wb") as handle:
        for start in range(0, len(line_queries), step):
            lines = slice(start, start + step)
            handle.write(_trec_bytes([(queries, line_queries[lines]), (documents, ranked.documents[lines]),
                                      (ranks, line_ranks[lines]), *_six_decimals(ranked.scores[lines]), (end, None)]))
    return path


def _refuse_repeats(ranked: RankedRun) -> None:
    """A ValueError naming the first query that lists a document twice."""
    queries = np.repeat(np.arange(len(ranked.counts), dtype=np.int64), ranked.counts)
    keys = np.sort(queries * max(len(ranked.doc_ids), 1) + ranked.documents)
    repeats = np.flatnonzero(keys[1:] == keys[:-1])
    if repeats.size:
        query_id = ranked.query_ids[int(keys[repeats[0]]) // max(len(ranked.doc_ids), 1)]
        raise ValueError(f"query {query_id!r} lists a document twice: a run holds each document once per query")


def _bad_id(ids: list[str]) -> str | None:
    """The first of ``ids`` that is empty or holds whitespace, None when none is."""
    if all(ids) and not has_whitespace("".join(ids)):
        return None
    return next(identifier for identifier in ids if not identifier or has_whitespace(identifier))


def _trec_bytes(columns: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    """Lines as bytes: line ``i`` is row ``rows[i]`` of each column's ``(table, rows)`` (a :func:`_table`; rows
    None: its one row on every line), side by side, the padding dropped. Nothing is formatted per line: each piece
    is a row of a table made once, taken with one copy, and the padding goes in one pass over the block: 1,000,000
    lines of a search take about 0.1 s, where an f-string per line takes 0.9 s (and a ``str.join`` of the same
    pieces as strings 0.3 s)."""
    lines = next(len(rows) for _, rows in columns if rows is not None)
    layout = np.dtype([(f"column {place}", table.dtype) for place, (table, _) in enumerate(columns)])
    block = np.empty(lines, dtype=layout)
    for place, (table, rows) in enumerate(columns):
        block[f"column {place}"] = table[0] if rows is None else table.take(rows)
    data = block.view(np.uint8)
    return data[data != _PAD]


def _six_decimals(scores: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The columns (:func:`_trec_bytes`) that write each score as ``f"{score:.6f}"``, taken from tables.

    A float32 value ``s`` times 1e6, computed in float64, is exact (24 significant bits times 15625 * 2**6: at
    most 38 bits), so ``np.rint`` of it (round half to even) is the integer that Python's correctly rounded
    ``.6f`` prints, ties included. Its text is the sign (the sign bit's: ``-0.0``, and a negative score that rounds
    to zero, print ``-0.000000`` as Python does) with the integer part and its point (:data:`_INTEGER_PARTS`), then
    two groups of three decimals (:data:`_THREE_DIGITS`). A score that is no float32 value (a float64 of a run
    dict), not finite, or at least ``TABLE_SCORE_LIMIT`` in magnitude is formatted by Python, in a fourth column
    (blank on the other lines, as the tables' last rows are on its lines)."""
    scores = np.asarray(scores)
    with np.errstate(over="ignore", invalid="ignore"):  # signalling NaNs, float64s beyond float32's range
        wide = scores.astype(np.float64)
        tabled = np.abs(wide) < TABLE_SCORE_LIMIT  # False for NaN
        if not np.can_cast(scores.dtype, np.float32):  # float64 scores: those that are float32 values
            tabled &= wide.astype(np.float32) == wide
    micros = np.rint(np.abs(np.where(tabled, wide, 0.0)) * 1e6).astype(np.int64)
    whole, fraction = np.divmod(micros, 1_000_000)
    high, low = np.divmod(fraction, 1000)
    whole += (TABLE_SCORE_LIMIT + 1) * np.signbit(wide)
    others = np.flatnonzero(~tabled)
    formatted = _table(["", *(f"{score:.6f}" for score in wide[others].tolist())])
    rows = np.zeros(len(wide), dtype=np.int64)
    rows[others] = np.arange(1, len(others) + 1)
    whole[others], high[others], low[others] = len(_INTEGER_PARTS) - 1, len(_THREE_DIGITS) - 1, len(_THREE_DIGITS) - 1
    return [(_INTEGER_PARTS, whole), (_THREE_DIGITS, high), (_THREE_DIGITS, low), (formatted, rows)]


def top_documents(run: Run, top_k: int) -> dict[str, list[str]]:
    """Each query's ``top_k`` documents by descending score (ties: document id, as in :func:`write_trec_run`)."""
    if top_k < 1:
        raise ValueError(f"top_k={top_k}: must be at least 1")
    return {query_id: [doc_id for doc_id, _ in _ranked(documents)[:top_k]] for query_id, documents in run.items()}


__all__ = ["RankedRun", "Run", "read_trec_run", "top_documents", "write_ranked_trec_run", "write_trec_run"]
