"""TREC runs: ``qid Q0 docid rank score tag`` per line, read into and written from ``{qid: {docid: score}}``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from .format import DataFormatError, has_whitespace, parses_as_number, require_file, text_lines

Run = dict[str, dict[str, float]]


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


def write_trec_run(run: Run, path: str | Path, tag: str = "dense-encoders") -> Path:
    """Write ``run`` as a TREC run file, each query's documents by descending score (ties: doc id). An id with
    whitespace (which would add a column) is refused before anything is written."""
    ranked = []
    for query_id, documents in run.items():
        order = _ranked(documents)
        ranked.append((query_id, [doc_id for doc_id, _ in order], [score for _, score in order]))
    return write_ranked_trec_run(ranked, path, tag=tag)


def write_ranked_trec_run(ranked: Iterable[tuple[str, Sequence[str], Sequence[float]]], path: str | Path,
                          tag: str = "dense-encoders") -> Path:
    """Write a run given as ``(query id, doc ids, scores)`` per query, each query's documents already in the order
    of every run we write (descending score, ties by doc id; :func:`write_trec_run` sorts a run dict so). The
    same bytes as :func:`write_trec_run` of that run, without building it: what ``search`` writes from a top-k.
    An id with whitespace, or a document twice in one query, is refused before anything is written."""
    ranked = list(ranked)
    for query_id, doc_ids, scores in ranked:
        if len(doc_ids) != len(scores):
            raise ValueError(f"query {query_id!r}: {len(doc_ids)} documents for {len(scores)} scores")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError(f"query {query_id!r} lists a document twice: a run holds each document once per query")
    used = {tag, *(query_id for query_id, _, _ in ranked)}
    for _, doc_ids, _ in ranked:
        used.update(doc_ids)
    bad = next((i for i in used if not i or has_whitespace(i)), None)
    if bad is not None:
        raise ValueError(f"{bad!r} is empty or contains whitespace: a TREC run cannot hold it as an id or tag")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for query_id, doc_ids, scores in ranked:
            handle.write("".join(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n"
                                 for rank, (doc_id, score) in enumerate(zip(doc_ids, scores), start=1)))
    return path


def top_documents(run: Run, top_k: int) -> dict[str, list[str]]:
    """Each query's ``top_k`` documents by descending score (ties: document id, as in :func:`write_trec_run`)."""
    if top_k < 1:
        raise ValueError(f"top_k={top_k}: must be at least 1")
    return {query_id: [doc_id for doc_id, _ in _ranked(documents)[:top_k]] for query_id, documents in run.items()}


__all__ = ["Run", "read_trec_run", "top_documents", "write_ranked_trec_run", "write_trec_run"]
