"""Teacher scores for distillation: a cross-encoder or a bi-encoder scores the top of a first-stage run.

``dense-encoders score-teacher`` (:func:`score_teacher`) takes each query's ``top_k`` candidates of
a run, scores every (query, document) pair with a sentence-transformers ``CrossEncoder`` (its raw logits)
or a bi-encoder (a ``SentenceTransformer``, or a folder of one or of our encoders: the similarity it declares,
dot product or cosine, of its query and document vectors) and writes one JSON line per query in the
distillation training format of :mod:`dense_encoders.data.distillation`: ``"scores"`` are the teacher's
scores, documents in the teacher's ranking order (descending), their texts inlined as ``"documents"`` with
``include_texts``.

Scoring is resumable: the output is appended to and flushed after each query's line, so an
interrupted run leaves only complete lines (plus at most one partial final line, which the next run
removes). Rerunning the same command skips the queries already written. A sidecar
``<output>.meta.json`` records the settings that determine the output (the cross-encoder, ``top_k``,
``include_texts``, a hash of the candidates of the run); resuming with other settings is refused. It also
names the teacher without a local path (``teacher``: a Hub id and revision, or a folder's name), which
``distill`` records with the student it trains; :func:`record_teacher_settings` writes the same sidecar for a
training file made otherwise (``dense-encoders quickstart``'s, from its teacher's own run).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from tqdm.auto import tqdm

from ..checkpoints.folder import source_reference
from ..checkpoints.loading import (
    check_cross_encoder,
    declares_cross_encoder,
    load_cross_encoder,
    load_sentence_transformer,
)
from ..data.distillation import training_line
from ..data.files import atomic_write_bytes, write_json
from ..data.format import DataFormatError, document_text
from ..data.runs import Run, read_trec_run, top_documents

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
    if model is None and isinstance(cross_encoder, SentenceTransformer) and len(cross_encoder):
        model = getattr(cross_encoder[0], "auto_model", None)
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if name:
        return _normalize_name(str(name))
    cls = type(cross_encoder)
    return f"{cls.__module__}.{cls.__qualname__}"


def _teacher_reference(cross_encoder) -> dict:
    """How the records name the teacher (:func:`~dense_encoders.checkpoints.folder.source_reference`: a Hub id
    and revision, or a folder's name); a model object without a name is named by its class."""
    name = _cross_encoder_name(cross_encoder)
    if not isinstance(cross_encoder, (str, os.PathLike)) and name.endswith(type(cross_encoder).__qualname__):
        return {"name": type(cross_encoder).__name__, "hub": False, "revision": None}
    return source_reference(name)


def _candidates_sha256(candidates: Mapping[str, list[str]]) -> str:
    digest = hashlib.sha256()
    for query_id in sorted(candidates):
        digest.update(json.dumps([query_id, candidates[query_id]], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def teacher_settings(teacher, *, kind: str, top_k: int, include_texts: bool, run: str | Path | None,
                     candidates: Mapping[str, list[str]]) -> dict:
    """The settings file of a teacher-scores file (:func:`meta_path`): what decides its contents (the teacher
    ``teacher``, a model or its path / Hub id; ``top_k``; ``include_texts``; a hash of the ``candidates``, each
    query's documents, taken from the ``run`` file) and, for the records of a distillation, the teacher named
    without a local path (``{"name", "hub", "revision"}``:
    :func:`~dense_encoders.checkpoints.folder.source_reference`'s) and ``kind`` (``bi-encoder`` /
    ``cross-encoder``)."""
    return {
        "format": META_FORMAT,
        "version": META_VERSION,
        "cross_encoder": _cross_encoder_name(teacher),
        # for the records of a distillation: no local path, and what kind of model scored
        "teacher": {**_teacher_reference(teacher), "kind": kind},
        "top_k": top_k,
        "include_texts": bool(include_texts),
        "run": str(Path(run).resolve()) if run is not None else None,
        "run_sha256": _candidates_sha256(candidates),
    }


def record_teacher_settings(output: str | Path, teacher, *, run: str | Path, top_k: int, kind: str) -> Path:
    """Record the settings file of ``output``, a teacher-scores file written without :func:`score_teacher` from
    ``run`` (a TREC run file; each query's ``top_k`` documents, their texts not inlined), as :func:`score_teacher`
    records its own (:func:`teacher_settings`): ``dense-encoders quickstart``'s, whose teacher's own retrieval run
    gives the scores. ``distill`` then records the teacher, and the student's card names it. Returns its path."""
    candidates = top_documents(read_trec_run(run), top_k)
    settings = teacher_settings(teacher, kind=kind, top_k=top_k, include_texts=False, run=run, candidates=candidates)
    return _write_settings(output, settings)


def _write_settings(output: str | Path, settings: dict) -> Path:
    """The settings file of ``output`` (:func:`meta_path`), written whole (and to disk) or not at all."""
    path = meta_path(output)
    write_json(path, settings, durable=True, sort_keys=False)
    return path


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
        atomic_write_bytes(output, keep, durable=True)
        data = keep
    done: set[str] = set()
    for line_number, raw in enumerate(data.split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise DataFormatError(output, line_number,
                                  f"not valid JSON ({error}); delete the file to start over") from None
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
            f"{', '.join(repr(q) for q in missing_queries[:5])} "
            "(with --data, only queries judged in --split are loaded)"
        )
    missing_documents = sorted({doc_id for doc_ids in candidates.values() for doc_id in doc_ids
                                if doc_id not in corpus})
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
    trust_remote_code: bool = False,
    pooling: str | None = None,
) -> dict:
    """Write the teacher's scores of each run query's ``top_k`` documents to ``output``.

    ``cross_encoder``: the teacher. A sentence-transformers ``CrossEncoder``, or a path / Hub id whose config declares
    a sequence-classification head (:func:`~dense_encoders.checkpoints.loading.declares_cross_encoder`): its raw
    logits, one per pair (``num_labels=1``). Or a bi-encoder: a ``SentenceTransformer``, or any other path / Hub id
    (loaded by :func:`~dense_encoders.checkpoints.loading.load_sentence_transformer`: its sentence-transformers
    files, our native pipeline, or ``pooling`` for a plain checkpoint): ``model.similarity_pairwise`` of
    ``encode_query(query)`` and ``encode_document(document)``, i.e. the similarity the model declares (dot product
    or cosine). One that runs code of its own is refused unless ``trust_remote_code``. ``run``: a run
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
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be at least 1")
    teacher = cross_encoder  # as given (a path, an id or a model), before a path is loaded
    cross_encoder, bi_encoder = _checked_teacher(cross_encoder, pooling=pooling, device=device,
                                                 allow_missing_weights=allow_missing_weights,
                                                 trust_remote_code=trust_remote_code)
    candidates = _candidates(run, top_k, queries, corpus)
    output = Path(output)
    settings = teacher_settings(teacher, kind="bi-encoder" if bi_encoder else "cross-encoder", top_k=top_k,
                                include_texts=include_texts, candidates=candidates,
                                run=run if isinstance(run, (str, os.PathLike)) else None)
    done = _open_output(output, settings, candidates)

    pending = [query_id for query_id, doc_ids in candidates.items() if doc_ids and query_id not in done]
    stats = {"queries_written": 0, "queries_skipped_already_done": len(done), "pairs_scored": 0}
    if not pending:
        output.touch()
        return stats
    model = _load_teacher(cross_encoder, device, allow_missing_weights, trust_remote_code)
    progress = tqdm(
        total=sum(len(doc_ids) for doc_ids in candidates.values()),
        initial=sum(len(candidates[query_id]) for query_id in done),
        unit="pair",
        desc="Teacher scores",
        disable=not show_progress_bar,
    )
    try:
        with open(output, "ab") as handle:
            for batch_stats in _score_pending(model, pending, candidates, queries, corpus, handle,
                                              batch_size=batch_size, include_texts=include_texts):
                stats["queries_written"] += batch_stats["queries_written"]
                stats["pairs_scored"] += batch_stats["pairs_scored"]
                progress.update(batch_stats["pairs_scored"])
    finally:
        progress.close()
    return stats


def _checked_teacher(cross_encoder, *, pooling: str | None, device: str | None, allow_missing_weights: bool,
                     trust_remote_code: bool) -> tuple:
    """``(teacher, is_bi_encoder)``, checked before anything is written: a bi-encoder given as a path / Hub id is
    loaded (:func:`~dense_encoders.checkpoints.loading.load_sentence_transformer`, whose loading is its check of
    weights, code, tokenizer and ``pooling``), a cross-encoder's folder is checked without loading it
    (:func:`~dense_encoders.checkpoints.loading.check_cross_encoder`) and stays a path; a model is returned as
    given. ``pooling`` for a cross-encoder is refused."""
    bi_encoder = _is_bi_encoder(cross_encoder, trust_remote_code)
    if pooling is not None and not bi_encoder:
        raise ValueError(f"pooling={pooling!r} applies to a bi-encoder teacher; a cross-encoder scores pairs itself")
    if isinstance(cross_encoder, (str, os.PathLike)):
        if bi_encoder:
            cross_encoder = load_sentence_transformer(
                str(cross_encoder), pooling=pooling, device=device, allow_missing_weights=allow_missing_weights,
                trust_remote_code=trust_remote_code)
        else:
            check_cross_encoder(str(cross_encoder), allow_missing_weights=allow_missing_weights,
                                trust_remote_code=trust_remote_code)
    return cross_encoder, bi_encoder


def _candidates(run: Run | str | Path, top_k: int, queries: Mapping[str, str], corpus: Mapping) -> dict[str, list[str]]:
    """Each run query's ``top_k`` documents, every query and document checked against ``queries`` / ``corpus``."""
    if isinstance(run, (str, os.PathLike)):
        run = read_trec_run(run)
    candidates = top_documents(run, top_k)
    _validate_inputs(candidates, queries, corpus)
    empty = [query_id for query_id, doc_ids in candidates.items() if not doc_ids]
    if empty:
        logger.warning("%d queries of the run have no documents and are left out, e.g. %s", len(empty), empty[:3])
    return candidates


def _open_output(output: Path, settings: dict, candidates: Mapping[str, list[str]]) -> set[str]:
    """The query ids ``output`` already holds: an existing output is checked against ``settings`` and
    recovered; a new one gets its settings sidecar."""
    if output.exists():
        if not output.is_file():
            raise ValueError(f"{output} exists and is not a file; pick another --output")
        _check_settings(output, settings)
        return _recover_output(output, candidates)
    output.parent.mkdir(parents=True, exist_ok=True)
    _write_settings(output, settings)
    return set()


def _is_bi_encoder(teacher, trust_remote_code: bool) -> bool:
    """Whether ``teacher`` is scored as a bi-encoder (a ``SentenceTransformer``, or a path / Hub id whose config
    declares no sequence-classification head) rather than as a cross-encoder."""
    if isinstance(teacher, (str, os.PathLike)):
        return not declares_cross_encoder(str(teacher), trust_remote_code=trust_remote_code)
    return isinstance(teacher, SentenceTransformer)


def _one_score_per_pair(count: int) -> ValueError:
    return ValueError(
        f"the cross-encoder gives {count} scores per pair; teacher scores need one relevance "
        "logit per pair (a CrossEncoder with num_labels=1)"
    )


def _load_teacher(cross_encoder, device: str | None, allow_missing_weights: bool, trust_remote_code: bool = False):
    """The cross-encoder (:func:`~dense_encoders.checkpoints.loading.load_cross_encoder`) on ``device``,
    refused unless it gives one score per pair; a bi-encoder (``SentenceTransformer``) on ``device``."""
    if isinstance(cross_encoder, SentenceTransformer):
        return cross_encoder.to(device) if device is not None else cross_encoder
    model = load_cross_encoder(cross_encoder, device=device, allow_missing_weights=allow_missing_weights,
                               trust_remote_code=trust_remote_code)
    if device is not None and not isinstance(cross_encoder, (str, os.PathLike)):
        model.to(device)
    if model.num_labels != 1:
        raise _one_score_per_pair(model.num_labels)
    return model


def _score_pending(
    model, pending: list[str], candidates, queries, corpus, handle, *, batch_size: int, include_texts: bool
) -> Iterator[dict]:
    """Score the pending queries' pairs in batches of ``batch_size`` (filled across queries) and append each
    query's line to ``handle`` once all its pairs are scored; yields ``{"queries_written", "pairs_scored"}``
    per batch."""
    identity = torch.nn.Identity()
    remaining = {query_id: len(candidates[query_id]) for query_id in pending}
    scored: dict[str, list[tuple[str, float]]] = {query_id: [] for query_id in pending}
    pair_iterator = _pairs(pending, candidates, queries, corpus)
    while True:
        batch = [pair for _, pair in zip(range(batch_size), pair_iterator)]
        if not batch:
            return
        pairs = [(query, document) for _, _, query, document in batch]
        if isinstance(model, SentenceTransformer):
            scores = _bi_encoder_scores(model, pairs, batch_size)
        else:
            scores = model.predict(pairs, batch_size=batch_size, show_progress_bar=False, activation_fn=identity,
                                   convert_to_numpy=True)
        scores = scores.reshape(len(batch), -1)
        if scores.shape[1] != 1:
            raise _one_score_per_pair(scores.shape[1])
        written = 0
        for (query_id, doc_id, query, _), score in zip(batch, scores[:, 0].tolist()):
            if not math.isfinite(score):
                raise ValueError(f"the cross-encoder scored query {query_id!r}, document {doc_id!r} as {score}")
            scored[query_id].append((doc_id, float(score)))
            remaining[query_id] -= 1
            if remaining[query_id] == 0:
                handle.write(training_line(query_id, query, scored.pop(query_id), corpus, include_texts))
                handle.flush()
                written += 1
        yield {"queries_written": written, "pairs_scored": len(batch)}


def _bi_encoder_scores(model: SentenceTransformer, pairs: list[tuple[str, str]], batch_size: int) -> np.ndarray:
    """The bi-encoder's similarity (``similarity_pairwise``: the function it declares) of each (query, document)
    pair's ``encode_query`` and ``encode_document`` vectors; each distinct query is encoded once."""
    queries = list(dict.fromkeys(query for query, _ in pairs))
    row = {query: index for index, query in enumerate(queries)}
    options = dict(batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    with torch.inference_mode():
        query_vectors = model.encode_query(queries, **options)
        document_vectors = model.encode_document([document for _, document in pairs], **options)
        scores = model.similarity_pairwise(query_vectors[[row[query] for query, _ in pairs]], document_vectors)
    return scores.float().cpu().numpy()


__all__ = ["meta_path", "record_teacher_settings", "score_teacher", "teacher_settings"]
