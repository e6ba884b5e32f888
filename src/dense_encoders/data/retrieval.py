"""Retrieval data: BEIR folders (corpus, queries, qrels), TREC qrels, plain (query, positive) pairs, graded
sentence pairs (STSB-style, thresholded into a retrieval task).

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``; ``id`` / ``docid`` and ``contents``
are read too, :func:`corpus_record`), ``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv``
(``query-id  corpus-id  score`` with a header). Each file may be gzip-compressed (``corpus.jsonl.gz``,
``qrels/test.tsv.gz``). A dataset on the Hub (``BeIR/scifact``, ``mteb/scifact``) is read from the files
:func:`~dense_encoders.data.hub_datasets.resolve_dataset` gives (JSON lines, tab-separated or Parquet). Every
malformed line raises :class:`~dense_encoders.data.format.DataFormatError` naming the file and the line number.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .format import (
    DOCUMENT_ID_FIELDS,
    GZIP_SUFFIX,
    DataFormatError,
    UniqueIds,
    data_suffix,
    document_record,
    document_text,
    is_blank,
    is_json_number,
    is_parquet,
    json_lines,
    parses_as_number,
    records,
    require_file,
    string_field,
    text_lines,
)
from .hub_datasets import DatasetFiles, resolve_dataset

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


QUERY_ID_FIELDS = ("_id", "id", "qid")


def corpus_record(path: Path, line_number: int, record: dict) -> tuple[str, dict[str, str]]:
    """``(id, {"title", "text"})`` of one line of a BEIR ``corpus.jsonl``: ``_id`` (or ``id``, ``docid``; a
    JSON number is written as a string) and the document as
    :func:`~dense_encoders.data.format.document_record` reads it (``text`` or ``contents``, optional
    ``title``). Every reader of a corpus with ids goes through here; the id is checked by
    :class:`~dense_encoders.data.format.UniqueIds`."""
    doc_id = string_field(path, line_number, record, *DOCUMENT_ID_FIELDS)
    return doc_id, document_record(path, line_number, record)


def query_record(path: Path, line_number: int, record: dict) -> tuple[str, str]:
    """``(id, text)`` of one line of a BEIR ``queries.jsonl``: ``_id`` (or ``id``, ``qid``), ``text`` (or ``query``)."""
    return (string_field(path, line_number, record, *QUERY_ID_FIELDS),
            string_field(path, line_number, record, "text", "query"))


def beir_ids(path: Path, side: str = "document") -> UniqueIds:
    """The id checker of a BEIR ``corpus.jsonl`` (``side="document"``) or ``queries.jsonl`` (``"query"``)."""
    fields = DOCUMENT_ID_FIELDS if side == "document" else QUERY_ID_FIELDS
    return UniqueIds(path, f"{side} id", lambda: ((line_number, string_field(path, line_number, record, *fields))
                                          for line_number, record in records(path)))


def require_records(path: str | Path, what: str) -> Path | str:
    """``path`` when it holds records (:func:`~dense_encoders.data.format.records`): a file, a folder of Parquet
    shards, or an ``hf://`` URL; else a FileNotFoundError naming ``what``."""
    if str(path).startswith("hf://") or is_parquet(path):
        return path
    return require_file(Path(path), what)


def read_corpus_jsonl(path: str | Path, *, allow_empty_documents: bool = False) -> dict[str, dict[str, str]]:
    """BEIR ``corpus.jsonl``: ``{"_id", "title", "text"}`` per line (:func:`corpus_record`); also gzip-compressed
    (``corpus.jsonl.gz``) or Parquet with those columns (a file, or a folder of shards: a Hub dataset's corpus).

    Ids are unique, not empty and without whitespace (:func:`~dense_encoders.data.format.check_id`).
    Documents whose title and text are both empty or blank are an error naming their count and the
    first ``file:line`` (they would be encoded as the empty string); ``allow_empty_documents=True``
    keeps them with one counted warning.
    """
    path = require_records(path, "corpus file")
    corpus: dict[str, dict[str, str]] = {}
    ids = beir_ids(path)
    empty_lines: list[int] = []
    for line_number, record in records(path):
        doc_id, document = corpus_record(path, line_number, record)
        corpus[ids.add(line_number, doc_id)] = document
        if is_blank(document_text(document)):
            empty_lines.append(line_number)
    ids.check()
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
    """BEIR ``queries.jsonl``: ``{"_id", "text"}`` per line (:func:`query_record`); ids as in a corpus; gzip or
    Parquet as :func:`read_corpus_jsonl` reads them."""
    path = require_records(path, "queries file")
    queries: dict[str, str] = {}
    ids = beir_ids(path, "query")
    for line_number, record in records(path):
        query_id, text = query_record(path, line_number, record)
        if is_blank(text):
            raise DataFormatError(
                path, line_number, f"query {query_id!r} has an empty or blank text; fill it in or remove the line"
            )
        queries[ids.add(line_number, query_id)] = text
    ids.check()
    return queries


def tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, columns) of a tab-separated file: no quoting, one row per line (:func:`text_lines`)."""
    for line_number, line in text_lines(path):
        yield line_number, line.split("\t")


def _grade(path: Path, line_number: int, value: str) -> int:
    try:
        grade = float(value)
    except ValueError:
        raise DataFormatError(path, line_number, f"relevance {value!r} is not a number") from None
    if grade != int(grade):
        raise DataFormatError(path, line_number, f"relevance {value!r} is not an integer grade")
    return int(grade)


def _judgements(path: Path, qrels: Qrels):
    """The function that adds one judgement of ``path`` (line ``line_number``) to ``qrels``. A (query, document)
    pair judged again with another grade is a DataFormatError naming both lines (which grade holds is not for
    us to guess, as for a document listed twice in a run); a repeat of the same grade changes nothing and
    passes."""
    first_line: dict[tuple[str, str], int] = {}

    def judge(query_id: str, doc_id: str, grade: int, line_number: int) -> None:
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != grade:
            raise DataFormatError(
                path, line_number, f"document {doc_id!r} is judged twice for query {query_id!r}, with grade "
                f"{judged[doc_id]} (line {first_line[query_id, doc_id]}) and grade {grade}: keep one of the two lines"
            )
        first_line.setdefault((query_id, doc_id), line_number)
        judged[doc_id] = grade

    return judge


QRELS_COLUMNS = ("query-id", "corpus-id", "score")


def read_beir_qrels(path: str | Path) -> Qrels:
    """BEIR ``qrels/<split>.tsv`` (also ``.tsv.gz``): a ``query-id  corpus-id  score`` header, then tab-separated
    rows; or records with those three columns (Parquet or JSON lines, as MTEB's Hub datasets hold them). A pair
    judged twice with different grades is an error naming ``file:line`` (:func:`_judgements`)."""
    path = require_records(path, "qrels file")
    qrels: Qrels = {}
    judge = _judgements(path, qrels)
    if is_parquet(path) or data_suffix(path) == ".jsonl":  # records; anything else is read as tab-separated text
        for number, record in records(path):
            query_id, doc_id = (string_field(path, number, record, name) for name in QRELS_COLUMNS[:2])
            grade = record.get("score")
            if not is_json_number(grade):
                raise DataFormatError(path, number, f"relevance {grade!r} is not a number")
            judge(query_id, doc_id, _grade(path, number, str(grade)), number)
        return qrels
    for line_number, line in text_lines(path):
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
        judge(query_id, doc_id, _grade(path, line_number, grade), line_number)
    return qrels


def read_trec_qrels(path: str | Path) -> Qrels:
    """TREC qrels: ``qid iteration docid relevance`` separated by whitespace. A pair judged twice with
    different grades is an error naming ``file:line`` (:func:`_judgements`)."""
    path = require_file(Path(path), "qrels file")
    qrels: Qrels = {}
    judge = _judgements(path, qrels)
    for line_number, line in text_lines(path):
        if not line.strip():
            continue
        columns = line.split()
        if len(columns) != 4:
            raise DataFormatError(path, line_number, f"expected 4 columns (qid iter docid rel), got {len(columns)}")
        query_id, _, doc_id, grade = columns
        judge(query_id, doc_id, _grade(path, line_number, grade), line_number)
    return qrels


def check_relevance_level(level: Any, name: str = "relevance_level=") -> int:
    """``level``, the qrels grade from which a document counts as relevant, if it is an integer >= 1; else a
    ValueError naming it as ``name`` (``"--relevance-level "`` on the command line)."""
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise ValueError(f"{name}{level!r}: give a grade >= 1, an integer (TREC DL convention: 2)")
    return level


def read_qrels(path: str | Path) -> Qrels:
    """Qrels in either format, told apart by the first non-blank line: tab-separated 3 columns is BEIR
    (``query-id  corpus-id  score``, header optional), whitespace-separated 4 columns is TREC
    (``qid iteration docid relevance``)."""
    path = require_file(Path(path), "qrels file")
    line_number, first = next(((n, line) for n, line in text_lines(path) if line.strip()), (1, ""))
    if len(first.split("\t")) == 3:
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


def beir_file(folder: Path, name: str) -> Path:
    """``folder/name`` (``corpus.jsonl``, ``qrels/test.tsv``), or its gzip-compressed ``name.gz`` when only that one
    exists (the plain name when neither does, for the error that follows)."""
    plain, compressed = folder / name, folder / (name + GZIP_SUFFIX)
    if plain.is_file() and compressed.is_file():
        raise ValueError(f"{folder} holds both {name} and {name}{GZIP_SUFFIX}: keep one of the two")
    return compressed if compressed.is_file() else plain


def beir_folder_files(folder: str | Path, split: str | None = "test") -> DatasetFiles:
    """The :class:`~dense_encoders.data.hub_datasets.DatasetFiles` of a local BEIR folder: ``corpus.jsonl``,
    ``queries.jsonl`` and ``qrels/<split>.tsv`` (each possibly ``.gz``); ``split=None`` asks for no judgements. A
    missing split is a FileNotFoundError naming the splits the folder has."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"BEIR folder not found: {folder}")
    qrels = ()
    if split is not None:
        qrels_path = beir_file(folder / "qrels", f"{split}.tsv")
        if not qrels_path.is_file():
            available = sorted({p.name.split(".")[0] for p in (folder / "qrels").iterdir() if data_suffix(p) == ".tsv"}
                               ) if (folder / "qrels").is_dir() else []
            raise FileNotFoundError(f"{folder / 'qrels' / f'{split}.tsv'} not found: a BEIR folder needs "
                                    f"qrels/<split>.tsv; splits here: {available or 'none'}")
        qrels = (qrels_path,)
    return DatasetFiles(name=folder.name or folder.resolve().name, source=str(folder.resolve()), split=split,
                        qrels=qrels, corpus_files=(beir_file(folder, "corpus.jsonl"),),
                        queries_files=(beir_file(folder, "queries.jsonl"),))


def read_dataset_part(source: str | Path, part: str, *, revision: str | None = None):
    """The corpus (``part="corpus"``: :func:`read_corpus_jsonl`) or the queries (``"queries"``:
    :func:`read_queries_jsonl`) of ``source``: its file (``corpus.jsonl``, also ``.gz``), a BEIR folder, or a
    dataset on the Hub by id at ``revision`` (:func:`~dense_encoders.data.hub_datasets.resolve_dataset`)."""
    if part not in ("corpus", "queries"):
        raise ValueError(f"part={part!r}: choose corpus or queries")
    resolved = resolve_dataset(source, revision=revision, parts=(part,), split=None)
    if isinstance(resolved, DatasetFiles):
        path = resolved.part(part)
    else:
        path = beir_file(resolved, f"{part}.jsonl") if resolved.is_dir() else resolved
    return read_corpus_jsonl(path) if part == "corpus" else read_queries_jsonl(path)


def load_beir(source: str | Path | DatasetFiles, split: str = "test", *, allow_empty_documents: bool = False,
              revision: str | None = None) -> RetrievalDataset:
    """A BEIR-format folder, or a retrieval dataset on the Hub (``BeIR/scifact``, ``mteb/scifact`` at
    ``revision``: :func:`~dense_encoders.data.hub_datasets.resolve_dataset`), as a :class:`RetrievalDataset` of
    ``split``.

    Only queries judged in ``qrels/<split>.tsv`` are kept. Judged documents missing from the corpus
    are logged (they can never be retrieved, so they only lower recall). An empty corpus or queries
    file is an error naming the file; so are blank queries and (unless ``allow_empty_documents``)
    blank documents (:func:`read_corpus_jsonl`). A Hub dataset's ``extra["hub"]`` records its repository and
    the commit read.
    """
    files = source if isinstance(source, DatasetFiles) else resolve_dataset(source, revision=revision, split=split)
    if not isinstance(files, DatasetFiles):
        files = beir_folder_files(files, split)
    corpus_path, queries_path = files.corpus, files.queries
    corpus = read_corpus_jsonl(corpus_path, allow_empty_documents=allow_empty_documents)
    if not corpus:
        raise ValueError(f"{corpus_path} has no documents: a BEIR corpus needs one JSON object per line")
    all_queries = read_queries_jsonl(queries_path)
    if not all_queries:
        raise ValueError(f"{queries_path} has no queries: a BEIR queries file needs one JSON object per line")
    qrels: Qrels = {}
    for qrels_path in files.qrels:
        for query_id, judged in read_beir_qrels(qrels_path).items():
            repeated = {doc for doc, grade in judged.items() if qrels.get(query_id, {}).get(doc, grade) != grade}
            if repeated:
                raise ValueError(f"{qrels_path} grades document {sorted(repeated)[0]!r} of query {query_id!r} "
                                 f"otherwise than {files.qrels[0]}: keep one judgement")
            qrels.setdefault(query_id, {}).update(judged)
    qrels_path = files.qrels[0] if len(files.qrels) == 1 else f"the {files.split} qrels of {files.source}"
    if not qrels:
        raise ValueError(f"{qrels_path} has no judgements: expected query-id, corpus-id, score rows")
    missing_queries = sorted(set(qrels) - set(all_queries))
    if missing_queries:
        raise ValueError(
            f"{qrels_path} judges {len(missing_queries)} queries that {Path(str(queries_path)).name} lacks, e.g. "
            f"{missing_queries[:3]}"
        )
    missing_documents = {doc for judged in qrels.values() for doc in judged if doc not in corpus}
    if missing_documents:
        logger.warning("%s: %d judged documents are not in the corpus", qrels_path, len(missing_documents))
    queries = {query_id: text for query_id, text in all_queries.items() if query_id in qrels}
    return RetrievalDataset(name=files.name, split=split, corpus=corpus, queries=queries, qrels=qrels,
                            source=files.source, extra={"hub": files.hub} if files.hub else {})


def load_pairs(path: str | Path, name: str | None = None) -> RetrievalDataset:
    """(query, positive) pairs as a retrieval task: the corpus is the set of distinct positives.

    ``.tsv``: ``query<TAB>positive`` per line (no header); ``.jsonl``: ``{"query": ..., "positive": ...}``
    (also ``anchor``/``positive`` as in sentence-transformers datasets). A query repeated with several
    positives gets all of them judged relevant.
    """
    path = require_file(Path(path), "pairs file")
    pairs: list[tuple[int, str, str]] = []
    if data_suffix(path) == ".jsonl":
        for line_number, record in json_lines(path):
            query = string_field(path, line_number, record, "query", "anchor")
            positive = string_field(path, line_number, record, "positive", "document", "passage")
            pairs.append((line_number, query, positive))
    elif data_suffix(path) in (".tsv", ".txt"):
        for line_number, row in tsv_rows(path):
            if not row or not "".join(row).strip():
                continue
            if len(row) != 2:
                raise DataFormatError(path, line_number,
                                      f"expected 2 tab-separated columns (query, positive), got {len(row)}")
            pairs.append((line_number, row[0], row[1]))
    else:
        raise ValueError(f"{path}: pairs must be a .tsv (query<TAB>positive) or .jsonl file (either also .gz), got "
                         f"{data_suffix(path)!r}")
    if not pairs:
        raise ValueError(f"{path} holds no (query, positive) pairs")
    query_ids: dict[str, str] = {}
    doc_ids: dict[str, str] = {}
    qrels: Qrels = {}
    for line_number, query, positive in pairs:
        if is_blank(query) or is_blank(positive):
            raise DataFormatError(path, line_number, "empty query or positive")
        query_id = query_ids.setdefault(query, f"q{len(query_ids)}")
        doc_id = doc_ids.setdefault(positive, f"d{len(doc_ids)}")
        qrels.setdefault(query_id, {})[doc_id] = 1
    return RetrievalDataset(
        name=name or _stem(path),
        split="pairs",
        corpus={doc_id: {"title": "", "text": text} for text, doc_id in doc_ids.items()},
        queries={query_id: text for text, query_id in query_ids.items()},
        qrels=qrels,
        source=str(path.resolve()),
    )


GRADED_SCORE_FIELDS = ("score", "label")


def _stem(path: Path) -> str:
    """A data file's name without its suffixes: ``stsbenchmark`` of ``stsbenchmark.tsv`` and ``.tsv.gz``."""
    return path.name.removesuffix(GZIP_SUFFIX).rsplit(".", 1)[0] if "." in path.name else path.name


def _score(path: Path, line_number: int, value) -> float:
    """A graded pair's score: a finite number >= 0 (a JSON number, or a tsv column that reads as one)."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    else:
        number = float(value) if is_json_number(value) else None
    if number is None or not math.isfinite(number):
        raise DataFormatError(path, line_number, f"score {value!r} is not a number; give the relatedness as a number")
    if number < 0:
        raise DataFormatError(path, line_number,
                              f"score {value!r} is negative; scores run from 0 to the scale (1 or 5)")
    return number


def _check_pair_options(threshold: float, scale: float | None) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise ValueError(
            f"pair threshold {threshold!r} is not in (0, 1]: give a fraction of the score scale, e.g. 0.5 "
            "(2.5 on a 0-5 scale)"
        )
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0):
        raise ValueError(f"pair scale {scale!r}: give the largest possible score, 1 or 5 (STSB), or leave it unset")


def _graded_tsv_rows(path: Path, split: str | None) -> tuple[list[tuple[int, str, str, str]], str | None]:
    """(line, sentence1, sentence2, score text) of a graded tsv, and the split kept. A header naming ``sentence1``,
    ``sentence2``, ``score`` picks its columns by name; a ``split`` column then keeps the rows of ``split``."""
    rows: list[tuple[int, str, str, str]] = []
    columns, width, split_column = (0, 1, 2), 3, None
    splits_seen: set[str] = set()
    first = True
    for line_number, row in tsv_rows(path):
        if not row or not "".join(row).strip():
            continue
        if first:
            first = False
            names = [name.strip().lower() for name in row]
            if {"sentence1", "sentence2", "score"} <= set(names):
                columns = (names.index("sentence1"), names.index("sentence2"), names.index("score"))
                width, split_column = len(row), names.index("split") if "split" in names else None
                continue
            if len(row) == 3 and not parses_as_number(row[2]):
                continue  # a header of three other names: columns by position
            if len(row) != 3:
                raise DataFormatError(
                    path, line_number, f"expected 3 tab-separated columns (sentence1, sentence2, score), got "
                    f"{len(row)}; a file with more columns needs a header naming sentence1, sentence2 and score"
                )
        if len(row) != width:
            expected = "(sentence1, sentence2, score)" if width == 3 else "(as many as the header)"
            raise DataFormatError(path, line_number,
                                  f"expected {width} tab-separated columns {expected}, got {len(row)}")
        if split_column is not None:
            splits_seen.add(row[split_column])
            if split is not None and row[split_column] != split:
                continue
        rows.append((line_number, row[columns[0]], row[columns[1]], row[columns[2]]))
    if split_column is not None and split is not None and not rows and splits_seen:
        raise ValueError(f"{path} has no pairs of split {split!r}; its split column holds {sorted(splits_seen)}")
    return rows, (split if split_column is not None else None)


def load_graded_pairs(
    path: str | Path,
    threshold: float = 0.5,
    scale: float | None = None,
    name: str | None = None,
    split: str | None = None,
) -> RetrievalDataset:
    """Graded sentence pairs (STSB-style) as a retrieval task, as *Can Cross Encoders Produce Useful
    Sentence Embeddings?* evaluates STSB: a pair is relevant when ``score >= threshold * scale``.

    ``.tsv``: ``sentence1<TAB>sentence2<TAB>score``, header optional; a header naming ``sentence1``,
    ``sentence2`` and ``score`` picks those columns (extra columns allowed, e.g. sentence-transformers'
    ``stsbenchmark.tsv``; a ``split`` column then keeps the rows of ``split``). ``.jsonl``:
    ``{"sentence1", "sentence2", "score"}`` per line (``label`` accepted for ``score``).

    ``scale`` (largest possible score) is inferred when unset: 1 when every score is within [0, 1], 5
    when within [0, 5]. ``threshold`` is a fraction of it, in (0, 1]. Queries: each distinct first
    sentence with at least one relevant pair (ids ``q<n>`` count every distinct first sentence in order
    of appearance, so an id names the same sentence at every threshold); corpus: every distinct second
    sentence (``d<n>``), non-relevant ones included as distractors; qrels: grade 1. The split records the
    threshold (``pairs@0.5``), so two thresholds are two tasks in results and model cards.
    """
    _check_pair_options(threshold, scale)
    path = require_file(Path(path), "graded pairs file")
    triples: list[tuple[int, str, str, float]] = []
    if data_suffix(path) == ".jsonl":
        split = None  # jsonl records carry no split
        for line_number, record in json_lines(path):
            first = string_field(path, line_number, record, "sentence1")
            second = string_field(path, line_number, record, "sentence2")
            field_name = next((f for f in GRADED_SCORE_FIELDS if record.get(f) is not None), None)
            if field_name is None:
                raise DataFormatError(path, line_number, "missing field 'score' or 'label'")
            triples.append((line_number, first, second, _score(path, line_number, record[field_name])))
    elif data_suffix(path) in (".tsv", ".txt"):
        rows, split = _graded_tsv_rows(path, split)
        for line_number, first, second, score in rows:
            triples.append((line_number, first, second, _score(path, line_number, score)))
    else:
        raise ValueError(f"{path}: graded pairs must be a .tsv (sentence1<TAB>sentence2<TAB>score) or .jsonl file "
                         f"(either also .gz), got {data_suffix(path)!r}")
    largest = max((score for *_, score in triples), default=None)
    if scale is None and largest is not None:
        if largest > 5:
            raise ValueError(f"{path}: the largest score is {largest:g}, beyond the 0-1 and 0-5 scales; pass the "
                             "scale (--pair-scale, scale=)")
        scale = 1 if largest <= 1 else 5
        logger.info("%s: score scale inferred as 0-%g (largest score %g)", path, scale, largest)
    cut = threshold * scale if scale is not None else None
    query_ids: dict[str, str] = {}
    doc_ids: dict[str, str] = {}
    qrels: Qrels = {}
    for line_number, first, second, score in triples:
        if is_blank(first) or is_blank(second):
            raise DataFormatError(path, line_number, "empty sentence1 or sentence2; fill it in or remove the line")
        if score > scale:
            raise DataFormatError(path, line_number, f"score {score:g} is above the scale 0-{scale:g}; pass the "
                                  "scale of this file (--pair-scale, scale=)")
        query_id = query_ids.setdefault(first, f"q{len(query_ids)}")
        doc_id = doc_ids.setdefault(second, f"d{len(doc_ids)}")
        if score >= cut or math.isclose(score, cut):  # 3.0 at 0.6 x 5 (= 3.0000000000000004) is relevant
            qrels.setdefault(query_id, {})[doc_id] = 1
    if not triples:
        raise ValueError(f"{path} holds no graded pairs (sentence1, sentence2, score), so none reaches the threshold "
                         f"{threshold:g}; largest score: none. Fill in the file")
    if not qrels:
        where = f" (split {split!r})" if split is not None else ""
        raise ValueError(
            f"{path}{where}: no pair reaches the threshold {threshold:g} (score >= {cut:g}); the largest score is "
            f"{largest:g}. Lower the threshold (--pair-threshold) or check the scale (--pair-scale)"
        )
    return RetrievalDataset(
        name=name or _stem(path),
        split=f"{split or 'pairs'}@{threshold:g}",
        corpus={doc_id: {"title": "", "text": text} for text, doc_id in doc_ids.items()},
        queries={query_id: text for text, query_id in query_ids.items() if query_id in qrels},
        qrels=qrels,
        source=str(path.resolve()),
        extra={"pair_threshold": threshold, "pair_scale": scale},
    )


def is_graded_pairs_file(path: str | Path) -> bool:
    """Whether ``path`` holds graded pairs (:func:`load_graded_pairs`) rather than (query, positive) pairs:
    jsonl records carrying ``score`` or ``label``; a tsv whose first row has three or more columns."""
    path = Path(path)
    if not path.is_file():
        return False
    first = next((line for _, line in text_lines(path) if line.strip()), None)
    if first is None:
        return False
    if data_suffix(path) == ".jsonl":
        try:
            record = json.loads(first)
        except json.JSONDecodeError:
            return False
        return isinstance(record, dict) and any(f in record for f in GRADED_SCORE_FIELDS)
    if data_suffix(path) in (".tsv", ".txt"):
        return len(first.split("\t")) >= 3
    return False


def load_dataset_for_evaluation(
    source: str | Path,
    split: str = "test",
    *,
    allow_empty_documents: bool = False,
    pair_threshold: float | None = None,
    pair_scale: float | None = None,
    revision: str | None = None,
) -> RetrievalDataset:
    """A BEIR folder, a (query, positive) pairs file, a graded pairs file (``.tsv`` / ``.jsonl``, either also
    ``.gz``), or a retrieval dataset on the Hub by id (``BeIR/scifact``, ``mteb/scifact``, at ``revision``:
    :func:`~dense_encoders.data.hub_datasets.resolve_dataset`; a local path of the same name wins).

    ``pair_threshold`` (default 0.5) and ``pair_scale`` go to :func:`load_graded_pairs`; they are refused
    for the other sources, which have no scores to threshold. A graded file with a ``split`` column keeps
    the rows of ``split``."""
    pair_options = [n for n, v in (("pair_threshold", pair_threshold), ("pair_scale", pair_scale)) if v is not None]
    resolved = resolve_dataset(source, revision=revision, split=split)
    if isinstance(resolved, DatasetFiles):
        if pair_options:
            raise ValueError(f"{' and '.join(pair_options)} (--pair-threshold / --pair-scale) apply to graded pair "
                             f"files (sentence1, sentence2, score); {source} is a retrieval dataset: leave them out")
        return load_beir(resolved, split=split, allow_empty_documents=allow_empty_documents)
    source = resolved
    if source.is_file() and is_graded_pairs_file(source):
        threshold = 0.5 if pair_threshold is None else pair_threshold
        return load_graded_pairs(source, threshold=threshold, scale=pair_scale, split=split)
    if pair_options and (source.is_dir() or source.is_file()):
        kind = "a BEIR folder" if source.is_dir() else "a (query, positive) pairs file"
        raise ValueError(
            f"{' and '.join(pair_options)} (--pair-threshold / --pair-scale) apply to graded pair files "
            f"(sentence1, sentence2, score); {source} is {kind}: leave them out"
        )
    if source.is_dir():
        return load_beir(source, split=split, allow_empty_documents=allow_empty_documents)
    if source.is_file():
        return load_pairs(source)
    raise FileNotFoundError(
        f"{source}: expected a BEIR folder (corpus.jsonl, queries.jsonl, qrels/), a pairs file, a graded pairs file "
        "or the id of a Hub dataset (namespace/name, e.g. BeIR/scifact)"
    )


__all__ = [
    "check_relevance_level",
    "QUERY_ID_FIELDS",
    "Qrels",
    "RetrievalDataset",
    "QRELS_COLUMNS",
    "beir_file",
    "beir_folder_files",
    "beir_ids",
    "corpus_record",
    "require_records",
    "is_graded_pairs_file",
    "load_beir",
    "load_dataset_for_evaluation",
    "load_graded_pairs",
    "load_pairs",
    "read_beir_qrels",
    "read_corpus_jsonl",
    "read_dataset_part",
    "read_qrels",
    "read_queries_jsonl",
    "query_record",
    "read_trec_qrels",
    "tsv_rows",
]
