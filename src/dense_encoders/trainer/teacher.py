"""Teacher scores for distillation: a cross-encoder scores the top of a first-stage run.

``dense-encoders score-teacher`` (:func:`score_teacher`) takes each query's ``top_k`` candidates of
a run, scores every (query, document) pair with a sentence-transformers ``CrossEncoder`` and writes
one JSON line per query in the distillation training format read by :func:`read_training_file`.

Training format (jsonl, one query per line)::

  {"query_id": "q1", "query": "query text", "document_ids": ["d3", "d7", ...], "scores": [8.21, 1.5, ...]}

optional ``"documents": ["doc text", ...]`` (same length as ``document_ids``) when texts are inlined;
``"scores"`` are raw teacher scores (cross-encoder logits), same length as the documents, in the
teacher's ranking order (descending).

Scoring is resumable: the output is appended to and flushed after each query's line, so an
interrupted run leaves only complete lines (plus at most one partial final line, which the next run
removes). Rerunning the same command skips the queries already written. A sidecar
``<output>.meta.json`` records the settings that determine the output (the cross-encoder, ``top_k``,
``include_texts``, a hash of the candidates of the run); resuming with other settings is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from tqdm.auto import tqdm

from ..evaluation.data import (
    DataFormatError,
    Run,
    document_text,
    json_lines,
    load_beir,
    read_corpus_jsonl,
    read_queries_jsonl,
    read_trec_run,
)
from ..evaluation.rerank import load_cross_encoder, top_documents

logger = logging.getLogger(__name__)

META_SUFFIX = ".meta.json"
META_FORMAT = "dense-encoders/teacher-scores"
META_VERSION = 1
# The settings that decide what the output holds; a resume must agree on all of them.
_COMPARED_SETTINGS = ("cross_encoder", "top_k", "include_texts", "run_sha256")


# --------------------------------------------------------------------------------------------
# Settings sidecar
# --------------------------------------------------------------------------------------------


def meta_path(output: str | Path) -> Path:
    """The sidecar of ``output``: ``<output>.meta.json``."""
    output = Path(output)
    return output.with_name(output.name + META_SUFFIX)


def _normalize_name(name: str) -> str:
    """A local path as an absolute path (so ``./teacher`` and ``/abs/teacher`` agree); a Hub id as is."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def _cross_encoder_name(cross_encoder) -> str:
    if isinstance(cross_encoder, (str, os.PathLike)):
        return _normalize_name(os.fspath(cross_encoder))
    model = getattr(cross_encoder, "model", None)  # the transformers model; None on other backends
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if name:
        return _normalize_name(str(name))
    cls = type(cross_encoder)
    return f"{cls.__module__}.{cls.__qualname__}"


def _candidates_sha256(candidates: Mapping[str, list[str]]) -> str:
    digest = hashlib.sha256()
    for query_id in sorted(candidates):
        digest.update(json.dumps([query_id, candidates[query_id]], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` through a temporary file in the same folder and ``os.replace``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _check_settings(output: Path, settings: dict) -> None:
    """Refuse to resume ``output`` when its sidecar is missing, unreadable or records other settings."""
    sidecar = meta_path(output)
    advice = f"pick a new --output, or delete {output} and {sidecar} to start over"
    if not sidecar.is_file():
        raise ValueError(
            f"{output} exists but has no settings file {sidecar}, so it cannot be resumed safely; {advice}"
        )
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{sidecar} is not valid JSON ({error}); {advice}") from None
    if not isinstance(recorded, dict) or recorded.get("format") != META_FORMAT:
        raise ValueError(f"{sidecar} is not a {META_FORMAT} settings file; {advice}")
    differences = [
        "the run's top-k candidates differ (run_sha256)"
        if key == "run_sha256"
        else f"{key}: {recorded.get(key)!r} in {sidecar.name}, now {settings[key]!r}"
        for key in _COMPARED_SETTINGS
        if recorded.get(key) != settings[key]
    ]
    if differences:
        raise ValueError(
            f"{output} was written with other settings ({'; '.join(differences)}); resuming would mix teacher "
            f"scores of different settings. {advice[0].upper()}{advice[1:]}."
        )


# --------------------------------------------------------------------------------------------
# Resuming an interrupted output
# --------------------------------------------------------------------------------------------


def _recover_output(output: Path, candidates: Mapping[str, list[str]]) -> set[str]:
    """The query ids ``output`` already holds; a partial final line (no newline) is cut away first."""
    data = output.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data[: data.rfind(b"\n") + 1]  # rfind -1 -> keep nothing
        logger.warning(
            "%s: removing an incomplete final line (%d bytes) left by an interrupted run", output, len(data) - len(keep)
        )
        _write_atomically(output, keep)
        data = keep
    done: set[str] = set()
    for line_number, raw in enumerate(data.split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise DataFormatError(output, line_number, f"not valid JSON ({error}); delete the file to start over") from None
        if not isinstance(record, dict):
            raise DataFormatError(output, line_number, f"expected a JSON object, got {type(record).__name__}")
        query_id = record.get("query_id")
        if not isinstance(query_id, str):
            raise DataFormatError(output, line_number, "missing string field 'query_id'")
        document_ids, scores = record.get("document_ids"), record.get("scores")
        if not isinstance(document_ids, list) or not isinstance(scores, list) or len(document_ids) != len(scores):
            raise DataFormatError(output, line_number, "'document_ids' and 'scores' must be lists of the same length")
        if query_id in done:
            raise DataFormatError(output, line_number, f"query {query_id!r} appears twice")
        if query_id not in candidates:
            raise DataFormatError(output, line_number, f"query {query_id!r} is not a query of the run")
        done.add(query_id)
    return done


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


def _validate_inputs(candidates: Mapping[str, list[str]], queries: Mapping[str, str], corpus: Mapping) -> None:
    missing_queries = [query_id for query_id in candidates if query_id not in queries]
    if missing_queries:
        raise ValueError(
            f"{len(missing_queries)} queries of the run have no text in the queries given, e.g. "
            f"{', '.join(repr(q) for q in missing_queries[:5])} (with --data, only queries judged in --split are loaded)"
        )
    missing_documents = sorted({doc_id for doc_ids in candidates.values() for doc_id in doc_ids if doc_id not in corpus})
    if missing_documents:
        raise ValueError(
            f"{len(missing_documents)} documents of the run are not in the corpus, e.g. "
            f"{', '.join(repr(d) for d in missing_documents[:5])}"
        )


def _pairs(pending: list[str], candidates, queries, corpus) -> Iterator[tuple[str, str, str, str]]:
    for query_id in pending:
        query = queries[query_id]
        for doc_id in candidates[query_id]:
            yield query_id, doc_id, query, document_text(corpus[doc_id])


def _line(query_id: str, query: str, scored: list[tuple[str, float]], corpus, include_texts: bool) -> bytes:
    ranked = sorted(scored, key=lambda item: (-item[1], item[0]))
    record = {"query_id": query_id, "query": query, "document_ids": [doc_id for doc_id, _ in ranked]}
    if include_texts:
        record["documents"] = [document_text(corpus[doc_id]) for doc_id, _ in ranked]
    record["scores"] = [score for _, score in ranked]
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def score_teacher(
    cross_encoder,
    run: Run | str | Path,
    output: str | Path,
    *,
    queries: dict[str, str],
    corpus: dict[str, dict],
    top_k: int = 100,
    batch_size: int = 32,
    include_texts: bool = False,
    show_progress_bar: bool = True,
    device: str | None = None,
    allow_missing_weights: bool = False,
) -> dict:
    """Write the cross-encoder's raw scores of each run query's ``top_k`` documents to ``output``.

    ``cross_encoder``: a sentence-transformers ``CrossEncoder`` or a path / Hub id of one (loaded with
    ``trust_remote_code=True``); it must give one score per pair (``num_labels=1``). ``run``: a run
    dict ``{qid: {docid: score}}`` or a TREC run file. Every run query needs a text in ``queries`` and
    each candidate document an entry in ``corpus`` (else ValueError). Pairs are scored in batches of
    ``batch_size`` filled across queries; a query's line (its documents by descending teacher score,
    ties by document id) is appended and flushed once all its pairs are scored.

    An existing ``output`` written with the same settings is resumed: its queries are skipped and an
    incomplete final line is removed. Returns ``{"queries_written", "queries_skipped_already_done",
    "pairs_scored"}`` for this call.

    A cross-encoder checkpoint whose weights miss (or add) tensors of its model is refused before anything
    is written, unless ``allow_missing_weights``: teacher scores from a partly random model are no scores.
    """
    import torch

    from ..checkpoint_folder import check_checkpoint_weights

    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be at least 1")
    if isinstance(cross_encoder, (str, os.PathLike)):
        check_checkpoint_weights(
            str(cross_encoder), auto_class="AutoModelForSequenceClassification",
            allow_missing_weights=allow_missing_weights,
        )
    run_path = None
    if isinstance(run, (str, os.PathLike)):
        run_path = str(Path(run).resolve())
        run = read_trec_run(run)
    candidates = top_documents(run, top_k)
    _validate_inputs(candidates, queries, corpus)
    empty = [query_id for query_id, doc_ids in candidates.items() if not doc_ids]
    if empty:
        logger.warning("%d queries of the run have no documents and are left out, e.g. %s", len(empty), empty[:3])

    output = Path(output)
    settings = {
        "format": META_FORMAT,
        "version": META_VERSION,
        "cross_encoder": _cross_encoder_name(cross_encoder),
        "top_k": top_k,
        "include_texts": bool(include_texts),
        "run": run_path,
        "run_sha256": _candidates_sha256(candidates),
    }
    if output.exists():
        if not output.is_file():
            raise ValueError(f"{output} exists and is not a file; pick another --output")
        _check_settings(output, settings)
        done = _recover_output(output, candidates)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(meta_path(output), (json.dumps(settings, indent=2) + "\n").encode("utf-8"))
        done = set()

    pending = [query_id for query_id, doc_ids in candidates.items() if doc_ids and query_id not in done]
    stats = {"queries_written": 0, "queries_skipped_already_done": len(done), "pairs_scored": 0}
    total_pairs = sum(len(doc_ids) for doc_ids in candidates.values())
    done_pairs = sum(len(candidates[query_id]) for query_id in done)
    if not pending:
        output.touch()
        return stats

    model = load_cross_encoder(cross_encoder, device=device, allow_missing_weights=allow_missing_weights)
    if device is not None and not isinstance(cross_encoder, (str, os.PathLike)):
        model.to(device)
    if model.num_labels != 1:
        raise ValueError(
            f"the cross-encoder gives {model.num_labels} scores per pair; teacher scores need one relevance "
            "logit per pair (a CrossEncoder with num_labels=1)"
        )
    identity = torch.nn.Identity()

    remaining = {query_id: len(candidates[query_id]) for query_id in pending}
    scored: dict[str, list[tuple[str, float]]] = {query_id: [] for query_id in pending}
    progress = tqdm(
        total=total_pairs, initial=done_pairs, unit="pair", desc="Teacher scores", disable=not show_progress_bar
    )
    pair_iterator = _pairs(pending, candidates, queries, corpus)
    try:
        with open(output, "ab") as handle:
            while True:
                batch = [pair for _, pair in zip(range(batch_size), pair_iterator)]
                if not batch:
                    break
                scores = model.predict(
                    [(query, document) for _, _, query, document in batch],
                    batch_size=batch_size,
                    show_progress_bar=False,
                    activation_fn=identity,
                    convert_to_numpy=True,
                )
                scores = scores.reshape(len(batch), -1)
                if scores.shape[1] != 1:
                    raise ValueError(
                        f"the cross-encoder gives {scores.shape[1]} scores per pair; teacher scores need one "
                        "relevance logit per pair (a CrossEncoder with num_labels=1)"
                    )
                for (query_id, doc_id, query, _), score in zip(batch, scores[:, 0].tolist()):
                    if not math.isfinite(score):
                        raise ValueError(f"the cross-encoder scored query {query_id!r}, document {doc_id!r} as {score}")
                    scored[query_id].append((doc_id, float(score)))
                    remaining[query_id] -= 1
                    if remaining[query_id] == 0:
                        handle.write(_line(query_id, query, scored.pop(query_id), corpus, include_texts))
                        handle.flush()
                        stats["queries_written"] += 1
                stats["pairs_scored"] += len(batch)
                progress.update(len(batch))
    finally:
        progress.close()
    return stats


# --------------------------------------------------------------------------------------------
# Reading the training format
# --------------------------------------------------------------------------------------------


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional_id(path: Path, line_number: int, record: dict, name: str) -> str | None:
    value = record.get(name)
    if value is None:
        return None
    if _is_number(value):
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


def read_training_file(
    path: str | Path,
    *,
    corpus: Mapping[str, Mapping[str, str]] | None = None,
    queries: Mapping[str, str] | None = None,
) -> list[dict]:
    """Read and validate a distillation training file (the format of this module's docstring).

    Each line needs the query (``"query"`` text, or a ``"query_id"`` found in ``queries``), at least
    one document (``"documents"`` texts, or ``"document_ids"`` found in ``corpus``) and ``"scores"``:
    one finite number per document. Any problem raises :class:`DataFormatError` naming ``file:line``
    (score positions counted from 1). Returns one record per line: ``{"query_id", "query",
    "document_ids", "documents", "scores"}`` with document texts and float scores; ``query_id`` and
    ``document_ids`` are None where the line has none.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training file not found: {path}")
    records: list[dict] = []
    for line_number, record in json_lines(path):
        query_id = _optional_id(path, line_number, record, "query_id")
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

        document_ids = _string_list(path, line_number, record, "document_ids") if "document_ids" in record else None
        if record.get("documents") is not None:
            documents = _string_list(path, line_number, record, "documents")
            if document_ids is not None and len(document_ids) != len(documents):
                raise DataFormatError(
                    path, line_number, f"{len(document_ids)} document_ids for {len(documents)} documents"
                )
        elif document_ids is None:
            raise DataFormatError(path, line_number, "needs 'documents' texts or 'document_ids'")
        elif corpus is None:
            raise DataFormatError(
                path, line_number, "no 'documents' texts, and no corpus was given to look up 'document_ids'"
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

        if "scores" not in record:
            raise DataFormatError(path, line_number, "missing field 'scores'")
        scores = record["scores"]
        if not isinstance(scores, list):
            raise DataFormatError(path, line_number, f"'scores' must be a list, got {type(scores).__name__}")
        if len(scores) != len(documents):
            raise DataFormatError(path, line_number, f"{len(scores)} scores for {len(documents)} documents")
        for position, score in enumerate(scores, start=1):
            if not _is_number(score):
                raise DataFormatError(path, line_number, f"score {position} is not a number: {score!r}")
            if math.isnan(score):
                raise DataFormatError(path, line_number, f"score {position} is NaN")
            if math.isinf(score):
                raise DataFormatError(path, line_number, f"score {position} is {'inf' if score > 0 else '-inf'}")
        records.append(
            {
                "query_id": query_id,
                "query": query,
                "document_ids": document_ids,
                "documents": documents,
                "scores": [float(score) for score in scores],
                "line": line_number,
            }
        )
    if not records:
        raise ValueError(f"{path} holds no training examples")
    return records


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


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

SCORE_TEACHER_EXAMPLES = """\
examples:
  # BM25 (or any first stage) top 100 of the MS MARCO train queries, scored by a cross-encoder
  dense-encoders score-teacher cross-encoder/ms-marco-MiniLM-L6-v2 --run bm25.train.trec \\
      --data data/msmarco --split train --output teacher/msmarco-train.jsonl --top-k 100 --batch-size 128

  # plain queries / corpus files, document texts inlined in the output
  dense-encoders score-teacher runs/my-cross-encoder --run run.trec --queries queries.jsonl \\
      --corpus corpus.jsonl --output teacher.jsonl --include-texts

  # interrupted? run the same command again: finished queries are kept and skipped
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dense-encoders score-teacher",
        description="Score each query's top-k documents of a run with a cross-encoder (raw logits) and write "
        "the distillation training file (jsonl, one query per line, documents by descending teacher score). "
        "Resumable: rerunning the same command continues an interrupted output.",
        epilog=SCORE_TEACHER_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("cross_encoder", help="A sentence-transformers CrossEncoder: a local path or a Hub id.")
    parser.add_argument("--run", required=True, help="TREC run file (qid Q0 docid rank score tag) with the candidates.")
    parser.add_argument("--data", metavar="BEIR_FOLDER", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
    parser.add_argument("--split", default="train", help="Qrels split whose queries are used with --data (default: %(default)s).")
    parser.add_argument("--queries", help="queries.jsonl ({'_id', 'text'} per line), with --corpus instead of --data.")
    parser.add_argument("--corpus", help="corpus.jsonl ({'_id', 'title', 'text'} per line), with --queries.")
    parser.add_argument("--output", required=True, help="Output jsonl; an existing one with the same settings is resumed.")
    parser.add_argument("--top-k", type=int, default=100, help="Documents per query scored (default: %(default)s).")
    parser.add_argument("--batch-size", type=int, default=32, help="Pairs per cross-encoder batch (default: %(default)s).")
    parser.add_argument("--include-texts", action="store_true", help="Also write the document texts into each line.")
    parser.add_argument("--device", help="Device for the cross-encoder, e.g. cuda:0 (default: the best available).")
    parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")
    parser.add_argument("--allow-missing-weights", action="store_true",
                        help="Score with a cross-encoder whose weights miss (or add) tensors of its model; refused by default.")
    return parser


def main(argv: list[str]) -> int:
    """``dense-encoders score-teacher``; errors are raised (ValueError / FileNotFoundError)."""
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.data is not None:
        if options.queries is not None or options.corpus is not None:
            parser.error("give either --data or --queries with --corpus, not both")
        dataset = load_beir(options.data, split=options.split)
        queries, corpus = dataset.queries, dataset.corpus
    elif options.queries is not None and options.corpus is not None:
        queries, corpus = read_queries_jsonl(options.queries), read_corpus_jsonl(options.corpus)
    else:
        parser.error("give --data BEIR_FOLDER, or both --queries and --corpus")
    stats = score_teacher(
        options.cross_encoder,
        options.run,
        options.output,
        queries=queries,
        corpus=corpus,
        top_k=options.top_k,
        batch_size=options.batch_size,
        include_texts=options.include_texts,
        show_progress_bar=not options.no_progress,
        device=options.device,
        allow_missing_weights=options.allow_missing_weights,
    )
    print(
        f"Wrote teacher scores of {stats['queries_written']} queries ({stats['pairs_scored']} pairs) to "
        f"{options.output}; {stats['queries_skipped_already_done']} queries were already done."
    )
    return 0


__all__ = ["build_parser", "main", "meta_path", "read_training_file", "run_to_training_file", "score_teacher"]
