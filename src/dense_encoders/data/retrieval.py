"""Retrieval data: BEIR folders (corpus, queries, qrels), TREC qrels, plain (query, positive) pairs.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
``text``) and ``qrels/<split>.tsv`` (``query-id  corpus-id  score`` with a header). Every malformed
line raises :class:`~dense_encoders.data.format.DataFormatError` naming the file and the line number.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

from .format import DataFormatError, document_text, json_lines, parses_as_number, require_file, string_field

logger = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]


@dataclass
class RetrievalDataset:
    """Queries, a corpus and relevance judgements of one split.

    ``corpus`` maps a document id to ``{"title": ..., "text": ...}``; ``queries`` maps a query id to
    its text and holds only queries that have judgements in ``qrels`` (as BEIR's loader does).
    """

    name: str
    split: str
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: Qrels
    source: str = ""
    extra: dict = field(default_factory=dict)

    def document_ids(self) -> list[str]:
        return list(self.corpus)

    def query_ids(self) -> list[str]:
        return list(self.queries)

    def document_texts(self, ids: list[str] | None = None) -> list[str]:
        """Each document as :func:`~dense_encoders.data.format.document_text` writes it: ``title + " " + text``."""
        return [document_text(self.corpus[doc_id]) for doc_id in (ids if ids is not None else self.corpus)]

    def query_texts(self, ids: list[str] | None = None) -> list[str]:
        return [self.queries[query_id] for query_id in (ids if ids is not None else self.queries)]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def read_corpus_jsonl(path: str | Path, *, allow_empty_documents: bool = False) -> dict[str, dict[str, str]]:
    """BEIR ``corpus.jsonl``: ``{"_id", "title", "text"}`` per line (``id`` accepted for ``_id``).

    Documents whose title and text are both empty or blank are an error naming their count and the
    first ``file:line`` (they would be encoded as the empty string); ``allow_empty_documents=True``
    keeps them with one counted warning.
    """
    path = require_file(Path(path), "corpus file")
    corpus: dict[str, dict[str, str]] = {}
    empty_lines: list[int] = []
    for line_number, record in json_lines(path):
        doc_id = string_field(path, line_number, record, "_id", "id", "docid")
        if doc_id in corpus:
            raise DataFormatError(path, line_number, f"duplicate document id {doc_id!r}")
        text = string_field(path, line_number, record, "text", "contents")
        title = string_field(path, line_number, record, "title", required=False) or ""
        corpus[doc_id] = {"title": title, "text": text}
        if not document_text(corpus[doc_id]):
            empty_lines.append(line_number)
    if empty_lines:
        problem = f"{len(empty_lines)} documents in {path} have no text (first at line {empty_lines[0]})"
        if not allow_empty_documents:
            raise DataFormatError(
                path, empty_lines[0], f"{problem}; fill in their title or text, remove them, or pass "
                "--allow-empty-documents (allow_empty_documents=True) to keep them"
            )
        logger.warning("%s; kept (allow_empty_documents)", problem)
    return corpus


def read_queries_jsonl(path: str | Path) -> dict[str, str]:
    """BEIR ``queries.jsonl``: ``{"_id", "text"}`` per line."""
    path = require_file(Path(path), "queries file")
    queries: dict[str, str] = {}
    for line_number, record in json_lines(path):
        query_id = string_field(path, line_number, record, "_id", "id", "qid")
        if query_id in queries:
            raise DataFormatError(path, line_number, f"duplicate query id {query_id!r}")
        text = string_field(path, line_number, record, "text", "query")
        if not text.strip():
            raise DataFormatError(
                path, line_number, f"query {query_id!r} has an empty or blank text; fill it in or remove the line"
            )
        queries[query_id] = text
    return queries


def _grade(path: Path, line_number: int, value: str) -> int:
    try:
        grade = float(value)
    except ValueError:
        raise DataFormatError(path, line_number, f"relevance {value!r} is not a number") from None
    if grade != int(grade):
        raise DataFormatError(path, line_number, f"relevance {value!r} is not an integer grade")
    return int(grade)


def read_beir_qrels(path: str | Path) -> Qrels:
    """BEIR ``qrels/<split>.tsv``: a ``query-id  corpus-id  score`` header, then tab-separated rows."""
    path = require_file(Path(path), "qrels file")
    qrels: Qrels = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            columns = line.split("\t")
            if line_number == 1 and not parses_as_number(columns[-1]):
                continue  # header
            if len(columns) != 3:
                raise DataFormatError(
                    path, line_number, f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(columns)}"
                )
            query_id, doc_id, grade = columns
            qrels.setdefault(query_id, {})[doc_id] = _grade(path, line_number, grade)
    return qrels


def read_trec_qrels(path: str | Path) -> Qrels:
    """TREC qrels: ``qid iteration docid relevance`` separated by whitespace."""
    path = require_file(Path(path), "qrels file")
    qrels: Qrels = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            columns = line.split()
            if len(columns) != 4:
                raise DataFormatError(path, line_number, f"expected 4 columns (qid iter docid rel), got {len(columns)}")
            query_id, _, doc_id, grade = columns
            qrels.setdefault(query_id, {})[doc_id] = _grade(path, line_number, grade)
    return qrels


def read_qrels(path: str | Path) -> Qrels:
    """Qrels in either format, told apart by the first non-blank line: tab-separated 3 columns is BEIR
    (``query-id  corpus-id  score``, header optional), whitespace-separated 4 columns is TREC
    (``qid iteration docid relevance``)."""
    path = require_file(Path(path), "qrels file")
    with open(path, encoding="utf-8") as handle:
        line_number, first = next(((n, line) for n, line in enumerate(handle, start=1) if line.strip()), (1, ""))
    if len(first.rstrip("\r\n").split("\t")) == 3:
        return read_beir_qrels(path)
    if len(first.split()) == 4:
        return read_trec_qrels(path)
    raise DataFormatError(
        path, line_number, "expected BEIR qrels (query-id<TAB>corpus-id<TAB>score, with a header) or TREC qrels "
        f"(qid 0 docid grade), got {len(first.split())} column(s)"
    )


# --------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------


def load_beir(folder: str | Path, split: str = "test", *, allow_empty_documents: bool = False) -> RetrievalDataset:
    """A BEIR-format folder as a :class:`RetrievalDataset` of ``split``.

    Only queries judged in ``qrels/<split>.tsv`` are kept. Judged documents missing from the corpus
    are logged (they can never be retrieved, so they only lower recall). An empty corpus or queries
    file is an error naming the file; so are blank queries and (unless ``allow_empty_documents``)
    blank documents (:func:`read_corpus_jsonl`).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"BEIR folder not found: {folder}")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise FileNotFoundError(
            f"{qrels_path} not found: a BEIR folder needs qrels/<split>.tsv; splits here: {available or 'none'}"
        )
    corpus = read_corpus_jsonl(folder / "corpus.jsonl", allow_empty_documents=allow_empty_documents)
    if not corpus:
        raise ValueError(f"{folder / 'corpus.jsonl'} has no documents: a BEIR corpus needs one JSON object per line")
    all_queries = read_queries_jsonl(folder / "queries.jsonl")
    if not all_queries:
        raise ValueError(f"{folder / 'queries.jsonl'} has no queries: a BEIR queries file needs one JSON object per line")
    qrels = read_beir_qrels(qrels_path)
    if not qrels:
        raise ValueError(f"{qrels_path} has no judgements: expected query-id, corpus-id, score rows")
    missing_queries = sorted(set(qrels) - set(all_queries))
    if missing_queries:
        raise ValueError(
            f"{qrels_path} judges {len(missing_queries)} queries that queries.jsonl lacks, e.g. {missing_queries[:3]}"
        )
    missing_documents = {doc for judged in qrels.values() for doc in judged if doc not in corpus}
    if missing_documents:
        logger.warning("%s: %d judged documents are not in the corpus", qrels_path, len(missing_documents))
    queries = {query_id: text for query_id, text in all_queries.items() if query_id in qrels}
    return RetrievalDataset(
        name=folder.name, split=split, corpus=corpus, queries=queries, qrels=qrels, source=str(folder.resolve())
    )


def load_pairs(path: str | Path, name: str | None = None) -> RetrievalDataset:
    """(query, positive) pairs as a retrieval task: the corpus is the set of distinct positives.

    ``.tsv``: ``query<TAB>positive`` per line (no header); ``.jsonl``: ``{"query": ..., "positive": ...}``
    (also ``anchor``/``positive`` as in sentence-transformers datasets). A query repeated with several
    positives gets all of them judged relevant.
    """
    path = require_file(Path(path), "pairs file")
    pairs: list[tuple[int, str, str]] = []
    if path.suffix == ".jsonl":
        for line_number, record in json_lines(path):
            query = string_field(path, line_number, record, "query", "anchor")
            positive = string_field(path, line_number, record, "positive", "document", "passage")
            pairs.append((line_number, query, positive))
    elif path.suffix in (".tsv", ".txt"):
        with open(path, encoding="utf-8", newline="") as handle:
            for line_number, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
                if not row or not "".join(row).strip():
                    continue
                if len(row) != 2:
                    raise DataFormatError(path, line_number, f"expected 2 tab-separated columns (query, positive), got {len(row)}")
                pairs.append((line_number, row[0], row[1]))
    else:
        raise ValueError(f"{path}: pairs must be a .tsv (query<TAB>positive) or .jsonl file, got {path.suffix!r}")
    if not pairs:
        raise ValueError(f"{path} holds no (query, positive) pairs")
    query_ids: dict[str, str] = {}
    doc_ids: dict[str, str] = {}
    qrels: Qrels = {}
    for line_number, query, positive in pairs:
        if not query.strip() or not positive.strip():
            raise DataFormatError(path, line_number, "empty query or positive")
        query_id = query_ids.setdefault(query, f"q{len(query_ids)}")
        doc_id = doc_ids.setdefault(positive, f"d{len(doc_ids)}")
        qrels.setdefault(query_id, {})[doc_id] = 1
    return RetrievalDataset(
        name=name or path.stem,
        split="pairs",
        corpus={doc_id: {"title": "", "text": text} for text, doc_id in doc_ids.items()},
        queries={query_id: text for text, query_id in query_ids.items()},
        qrels=qrels,
        source=str(path.resolve()),
    )


def load_dataset_for_evaluation(
    source: str | Path, split: str = "test", *, allow_empty_documents: bool = False
) -> RetrievalDataset:
    """A BEIR folder, or a pairs file (``.tsv`` / ``.jsonl``)."""
    source = Path(source)
    if source.is_dir():
        return load_beir(source, split=split, allow_empty_documents=allow_empty_documents)
    if source.is_file():
        return load_pairs(source)
    raise FileNotFoundError(f"{source}: expected a BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a pairs file")


__all__ = [
    "Qrels",
    "RetrievalDataset",
    "load_beir",
    "load_dataset_for_evaluation",
    "load_pairs",
    "read_beir_qrels",
    "read_corpus_jsonl",
    "read_qrels",
    "read_queries_jsonl",
    "read_trec_qrels",
]
