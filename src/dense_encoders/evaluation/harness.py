"""One retrieval evaluation: encode, search, score (and optionally re-rank), write a results JSON.

:class:`EvaluationArguments` holds the settings (the flags of ``dense-encoders evaluate``),
:func:`evaluate_retrieval` runs the evaluation, and :class:`RetrievalResults` is what it returns;
``RetrievalResults.to_dict()`` is the results JSON that model cards and reports read.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import sentence_transformers
import torch
import transformers

from .. import __version__
from ..data.embedding_shards import EmbeddingShards
from ..data.retrieval import RetrievalDataset, load_dataset_for_evaluation
from ..data.run_records import RESULTS_FORMAT, read_results, write_results
from ..data.runs import write_trec_run
from ..settings.evaluation import (  # noqa: F401 (re-exported: --help reads them there, without torch)
    DEFAULT_MEASURES,
    ENCODER_FIELDS,
    POSITIVE_FIELDS,
    EvaluationArguments,
)
from ..vectors import SIMILARITIES
from .backends import SearchBackend, backend_class, get_backend
from .encoding import EncodedTexts, RetrievalEncoder
from .metrics import compute_metrics, holm_bonferroni, paired_t_test
from .rerank import rerank
from .search import search, topk_to_run

# the model name that evaluates the lexical baseline instead of an encoder (evaluate_retrieval("bm25", data))
BM25 = "bm25"
# fields of EvaluationArguments that only an encoder uses: refused with BM25
ENCODER_ONLY_FIELDS = ("pooling", "similarity", "query_prompt", "document_prompt", "query_max_length",
                       "document_max_length", "cache_dir", "corpus_embeddings", "backend", "device", "runtime")

@dataclass
class RetrievalResults:
    """What :func:`evaluate_retrieval` measured; :meth:`to_dict` is the results JSON (``format``
    :data:`RESULTS_FORMAT`), :meth:`from_dict` reads it back.

    * ``dataset``: ``name``, ``split``, ``source``, ``num_queries``, ``num_documents``; a graded pairs file adds
      ``pair_threshold`` and ``pair_scale`` (its split names the threshold, ``pairs@0.5``); a Hub dataset adds
      ``hub``: ``repo_id``, ``revision`` (the commit read), ``layout`` and, for BEIR's layout, ``qrels`` (the
      companion repository and its commit); its ``source`` is ``hf://datasets/<id>@<commit>``.
    * ``settings``: ``k``, ``similarity``, ``search_backend`` (``exact``, or ``faiss``: an ``IndexFlatIP``) and
      ``search_backend_label`` (the backend's ``label``: how a model card names the search), ``relevance_level``,
      ``pooling`` (given for a plain checkpoint; None: the model's own), the encoder's settings (``batch_size``,
      ``prompts``, ``max_lengths``, ...), ``corpus_embeddings`` and ``corpus_embeddings_dtype`` (the stored shards'
      dtype, float16 by default; None when the documents were encoded in this run). The BM25 baseline
      (``model`` ``"bm25"``): similarity ``bm25``, search backend ``bm25s``, ``stopwords``; its ``timings`` hold only
      ``search_s`` (indexing included), its throughput ``None``.
    * ``metrics``: measure -> value (``ndcg@10``, ``mrr@10``, ``recall@100``, ``recall@1000``, ``hits@10``);
      ``per_query``: measure -> query id -> value.
    * ``rerank``: ``None``, or ``model``, ``top_k``, ``metrics``, ``per_query``, ``seconds``, ``pairs_per_s``.
    * ``timings``: ``encode_queries_s``, ``encode_documents_s``, ``search_s``, ``queries_cached``,
      ``documents_cached``; ``throughput``: ``queries_per_s``, ``documents_per_s`` (``None`` when read from the
      cache).
    * ``environment``: device, threads and library versions; ``created``: ISO time.
    """

    model: str
    model_fingerprint: str
    dataset: dict
    settings: dict
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    rerank: dict | None
    timings: dict
    throughput: dict
    environment: dict
    created: str
    format: str = RESULTS_FORMAT

    def to_dict(self) -> dict:
        """The results JSON's mapping (``format`` first, then the fields in their order)."""
        return {"format": self.format, **{item.name: getattr(self, item.name) for item in fields(self)
                                          if item.name != "format"}}

    @classmethod
    def from_dict(cls, data: dict, source: str | Path = "the results") -> "RetrievalResults":
        """The results of a results JSON's mapping (format checked)."""
        if data.get("format") != RESULTS_FORMAT:
            raise ValueError(f"{source} is not a dense-encoders results file (format {data.get('format')!r})")
        return cls(**data)


def _environment(encoder: RetrievalEncoder) -> dict:
    return {"device": str(encoder.model.device), **_environment_versions()}


def _environment_versions() -> dict:
    return {
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "dense_encoders": __version__,
    }


def search_and_score(
    dataset: RetrievalDataset,
    query_embeddings,
    document_embeddings,
    *,
    k: int = 1000,
    similarity: str = "cosine",
    search_backend: str = "exact",
    measures: dict[str, str] | None = None,
    relevance_level: int = 1,
) -> tuple[dict, dict, dict, float]:
    """Retrieval metrics of precomputed embeddings (rows in ``dataset``'s query / document order):
    ``(metrics, per_query, run, search_seconds)``. Used by :func:`evaluate_retrieval` and by
    analyses that produce their own embeddings (e.g. layer-wise cross-encoder embeddings)."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r}: choose one of {SIMILARITIES}")
    query_ids, doc_ids = dataset.query_ids(), dataset.document_ids()
    if len(query_embeddings) != len(query_ids) or len(document_embeddings) != len(doc_ids):
        raise ValueError(
            f"{len(query_embeddings)} query / {len(document_embeddings)} document embeddings for "
            f"{len(query_ids)} queries / {len(doc_ids)} documents"
        )
    start = time.perf_counter()
    scores, indices = search(query_embeddings, document_embeddings, k, similarity=similarity, backend=search_backend)
    seconds = time.perf_counter() - start
    run = topk_to_run(query_ids, doc_ids, scores, indices)
    metrics, per_query = compute_metrics(
        dataset.qrels, run, measures or DEFAULT_MEASURES, relevance_level=relevance_level
    )
    return metrics, per_query, run, seconds


def evaluate_retrieval(
    model,
    data: RetrievalDataset | str | Path,
    args: EvaluationArguments | None = None,
    *,
    cross_encoder=None,
    measures: dict[str, str] | None = None,
    rerank_batch_size: int = 32,
    rerank_cache: dict | None = None,
    **settings,
) -> RetrievalResults:
    """Evaluate ``model`` (anything :class:`RetrievalEncoder` accepts, or a RetrievalEncoder) on ``data`` (a loaded
    :class:`RetrievalDataset`, or what :func:`~dense_encoders.data.retrieval.load_dataset_for_evaluation` reads: a
    BEIR folder, a pairs file, a Hub dataset id at ``args.dataset_revision``) with the settings ``args``
    (:class:`EvaluationArguments`; keyword ``settings`` replace its fields, e.g. ``k=10``).
    ``model="bm25"`` (:data:`BM25`) evaluates the lexical baseline instead: ``bm25s`` with English stopwords over
    the corpus (:func:`~dense_encoders.data.bm25.bm25_run`); its run is a first stage like an encoder's.

    ``similarity`` defaults to the one the model declares (sentence-transformers ``similarity_fn_name``); the
    encoder settings (pooling, prompts, max lengths, batch size, cache_dir, ...) go to :class:`RetrievalEncoder`.
    Returns the :class:`RetrievalResults`, also written to ``args.output`` as JSON; ``args.run_output`` gets the
    first-stage run in TREC format.

    ``relevance_level`` (default 1; TREC DL uses 2) is the grade from which binary measures (RR, Recall, Hits)
    count a document as relevant; nDCG keeps the graded values; the evaluated queries are those with at least
    one document at or above it. ``allow_empty_documents`` keeps corpus documents without text (an error by
    default). ``pair_threshold`` / ``pair_scale`` turn a graded pairs file into a task
    (:func:`~dense_encoders.data.retrieval.load_graded_pairs`); the results record them. ``corpus_embeddings``:
    a folder of embedding shards of this corpus (``dense-encoders encode``) searched instead of encoding the
    documents: the same model, document prompt, length and normalisation, and exactly the corpus's document
    ids, or a one-line error.

    The top ``rerank_top_k`` of each query are re-scored by ``cross_encoder`` (a loaded sentence-transformers
    CrossEncoder, a folder or a Hub id) or by ``args.rerank``, ``rerank_batch_size`` pairs at a time;
    ``rerank_cache`` maps (query, document) to scores shared between evaluations. ``measures``: name ->
    ir-measures measure, default :data:`~dense_encoders.evaluation.metrics.DEFAULT_MEASURES`.
    """
    args = replace(args or EvaluationArguments(), **settings)
    if cross_encoder is not None and args.rerank is not None:
        raise ValueError(f"two cross-encoders to re-rank with: cross_encoder={cross_encoder!r} and "
                         f"rerank={args.rerank!r}; give one")
    if isinstance(model, str) and model == BM25:
        return _evaluate_bm25(data, args, cross_encoder=cross_encoder, measures=measures,
                              rerank_batch_size=rerank_batch_size, rerank_cache=rerank_cache)
    dataset = _dataset(data, args)
    encoder, similarity = _encoder(model, args)
    # both sides in one runtime, chosen for all the texts encoded here (--runtime auto)
    encoder.settle_runtime(len(dataset.queries) + (len(dataset.corpus) if args.corpus_embeddings is None else 0))
    queries = encoder.encode_queries(dataset.query_texts(dataset.query_ids()))
    documents, metrics, per_query, run, search_seconds = _first_stage(encoder, dataset, queries, similarity, args,
                                                                      measures)
    cross_encoder = cross_encoder if cross_encoder is not None else args.rerank
    reranked = None
    if cross_encoder is not None:
        reranked = _rerank_stage(
            cross_encoder, dataset, run, top_k=args.rerank_top_k, batch_size=rerank_batch_size, measures=measures,
            relevance_level=args.relevance_level, show_progress_bar=encoder.show_progress_bar,
            score_cache=rerank_cache, allow_missing_weights=args.allow_missing_weights,
            trust_remote_code=args.trust_remote_code,
        )
    results = RetrievalResults(
        model=encoder.name, model_fingerprint=encoder.fingerprint, dataset=_dataset_record(dataset),
        settings=_settings_record(args, similarity, encoder), metrics=metrics, per_query=per_query, rerank=reranked,
        timings={"encode_queries_s": queries.seconds, "encode_documents_s": documents.seconds,
                 "search_s": search_seconds, "queries_cached": queries.cached, "documents_cached": documents.cached},
        throughput={"queries_per_s": queries.texts_per_second, "documents_per_s": documents.texts_per_second},
        environment=_environment(encoder), created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if args.output is not None:
        save_results(results, args.output)
    if args.run_output is not None:
        write_trec_run(run, args.run_output)
    return results


def _evaluate_bm25(data, args: EvaluationArguments, *, cross_encoder, measures, rerank_batch_size: int,
                   rerank_cache: dict | None) -> RetrievalResults:
    """:func:`evaluate_retrieval` of the BM25 baseline: the run of :func:`~dense_encoders.data.bm25.bm25_run`,
    scored (and re-ranked) as an encoder's would be; the encoders' settings are refused."""
    if Path(BM25).exists():
        raise ValueError(f"model {BM25!r} names the BM25 baseline, and ./{BM25} exists here too: pass ./{BM25} to "
                         "evaluate that folder")
    defaults = EvaluationArguments()
    given = [name for name in ENCODER_ONLY_FIELDS if getattr(args, name) != getattr(defaults, name)]
    if given:
        raise ValueError(f"{', '.join('--' + name.replace('_', '-') for name in given)}: an encoder's settings; "
                         f"{BM25} (bm25s over the corpus's words) takes none of them")
    import bm25s  # slow to import: only here

    from ..data.bm25 import bm25_run

    dataset = _dataset(data, args)
    start = time.perf_counter()
    run = bm25_run(dataset, args.k)
    seconds = time.perf_counter() - start
    metrics, per_query = compute_metrics(dataset.qrels, run, measures or DEFAULT_MEASURES,
                                         relevance_level=args.relevance_level)
    cross_encoder = cross_encoder if cross_encoder is not None else args.rerank
    reranked = None
    if cross_encoder is not None:
        reranked = _rerank_stage(
            cross_encoder, dataset, run, top_k=args.rerank_top_k, batch_size=rerank_batch_size, measures=measures,
            relevance_level=args.relevance_level, show_progress_bar=not args.no_progress, score_cache=rerank_cache,
            allow_missing_weights=args.allow_missing_weights, trust_remote_code=args.trust_remote_code,
        )
    results = RetrievalResults(
        model=BM25, model_fingerprint=f"bm25s-{bm25s.__version__}-stopwords-en", dataset=_dataset_record(dataset),
        settings={"k": args.k, "similarity": "bm25", "search_backend": "bm25s", "relevance_level": args.relevance_level,
                  "stopwords": "en", "corpus_embeddings": None},
        metrics=metrics, per_query=per_query, rerank=reranked, timings={"search_s": seconds},
        throughput={"queries_per_s": None, "documents_per_s": None},
        environment={**_environment_versions(), "bm25s": bm25s.__version__},
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if args.output is not None:
        save_results(results, args.output)
    if args.run_output is not None:
        write_trec_run(run, args.run_output)
    return results


def _first_stage(encoder: RetrievalEncoder, dataset: RetrievalDataset, queries: EncodedTexts, similarity: str,
                 args: EvaluationArguments, measures: dict[str, str] | None = None):
    """``(documents, metrics, per_query, run, search_seconds)`` of the first stage: the documents encoded and
    searched, or the stored embedding shards of ``args.corpus_embeddings`` searched."""
    if args.corpus_embeddings is not None:
        backend = get_backend(args.backend)
        if backend.shards_refusal is not None:
            raise ValueError(backend.shards_refusal)
        return _search_stored_corpus(encoder, dataset, queries, args.corpus_embeddings, k=args.k, backend=backend,
                                     similarity=similarity, measures=measures, relevance_level=args.relevance_level)
    documents = encoder.encode_documents(dataset.document_texts(dataset.document_ids()))
    metrics, per_query, run, search_seconds = search_and_score(
        dataset, queries.embeddings, documents.embeddings, k=args.k, similarity=similarity,
        search_backend=args.backend, measures=measures, relevance_level=args.relevance_level,
    )
    return documents, metrics, per_query, run, search_seconds


def _settings_record(args: EvaluationArguments, similarity: str, encoder: RetrievalEncoder) -> dict:
    """The ``settings`` entry of the results: ``pooling`` is the one given for a plain transformers checkpoint
    (None: the model's own), which ``push`` needs to load the model as it was evaluated;
    ``corpus_embeddings_dtype`` is the dtype of the stored document embeddings searched (None: encoded here,
    float32)."""
    stored = EmbeddingShards.open(args.corpus_embeddings) if args.corpus_embeddings is not None else None
    return {
        "k": args.k, "similarity": similarity, "search_backend": args.backend,
        "search_backend_label": backend_class(args.backend).label,
        "relevance_level": args.relevance_level, "pooling": args.pooling, **encoder.settings(),
        "corpus_embeddings": str(args.corpus_embeddings) if stored is not None else None,
        "corpus_embeddings_dtype": stored.settings.get("dtype") if stored is not None else None,
    }


def _dataset_record(dataset: RetrievalDataset) -> dict:
    """The ``dataset`` entry of the results."""
    return {
        "name": dataset.name,
        "split": dataset.split,
        "source": dataset.source,
        "num_queries": len(dataset.query_ids()),
        "num_documents": len(dataset.document_ids()),
        **{key: dataset.extra[key] for key in ("pair_threshold", "pair_scale", "hub") if key in dataset.extra},
    }


def _search_stored_corpus(encoder: RetrievalEncoder, dataset: RetrievalDataset, queries: EncodedTexts, folder, *,
                          k: int, backend: SearchBackend, similarity: str, measures, relevance_level: int):
    """Search the corpus's stored embedding shards instead of encoding it: ``(documents, metrics, per_query,
    run, seconds)``; shards of another model, prompt, length or corpus are refused."""
    shards = EmbeddingShards.open(folder)
    wanted = {"side": "document", "fingerprint": encoder.fingerprint, "prompt": encoder.prompts["document"],
              "max_length": encoder.max_lengths["document"], "normalize": encoder.normalize}
    differences = [f"{key}: {shards.settings.get(key)!r} there, {value!r} here" for key, value in wanted.items()
                   if shards.settings.get(key) != value]
    if differences:
        if any(item.startswith("fingerprint") for item in differences):
            differences = ["they come from another model (weights or pipeline)"] + [
                item for item in differences if not item.startswith("fingerprint")]
        raise ValueError(f"{shards.folder} was encoded differently ({'; '.join(differences)}): encode the corpus "
                         "again with this model and these settings, or drop --corpus-embeddings")
    stored_ids = list(shards.ids())
    stored, corpus = set(stored_ids), set(dataset.document_ids())
    if stored != corpus:
        raise ValueError(f"{shards.folder} holds {len(stored)} documents, {len(stored - corpus)} of them not in "
                         f"{dataset.name}'s corpus of {len(corpus)} ({len(corpus - stored)} missing): encode this "
                         "corpus")
    start = time.perf_counter()
    scores, indices = backend.search_shards(queries.embeddings, shards, k, similarity=similarity)
    seconds = time.perf_counter() - start
    run = topk_to_run(dataset.query_ids(), stored_ids, scores, indices)
    metrics, per_query = compute_metrics(dataset.qrels, run, measures or DEFAULT_MEASURES,
                                         relevance_level=relevance_level)
    documents = EncodedTexts(np.empty((0, shards.dimension), dtype=np.float32), 0.0, True, str(shards.folder))
    return documents, metrics, per_query, run, seconds


def _dataset(data: RetrievalDataset | str | Path, args: EvaluationArguments) -> RetrievalDataset:
    """``data`` loaded as ``args`` say (split, graded pair threshold and scale, empty documents, the revision of a
    Hub dataset)."""
    if isinstance(data, RetrievalDataset) and (args.pair_threshold is not None or args.pair_scale is not None):
        raise ValueError("pair_threshold / pair_scale apply when loading a graded pairs file; this dataset is "
                         "already loaded: pass the file's path, or load it with load_graded_pairs")
    if isinstance(data, RetrievalDataset) and args.dataset_revision is not None:
        raise ValueError("dataset_revision applies when loading a Hub dataset; this dataset is already loaded: pass "
                         "its Hub id, or load it with load_beir(id, revision=...)")
    dataset = data if isinstance(data, RetrievalDataset) else load_dataset_for_evaluation(
        data, split=args.split, allow_empty_documents=args.allow_empty_documents, pair_threshold=args.pair_threshold,
        pair_scale=args.pair_scale, revision=args.dataset_revision)
    if not dataset.queries or not dataset.corpus:
        raise ValueError(f"dataset {dataset.name!r} ({dataset.split}) has no queries or no documents")
    return dataset


def _encoder(model, args: EvaluationArguments) -> tuple[RetrievalEncoder, str]:
    """The :class:`RetrievalEncoder` of ``model`` and the similarity to search with (the model's own by default)."""
    if isinstance(model, RetrievalEncoder):
        defaults = EvaluationArguments()
        given = [name for name in (*ENCODER_FIELDS, "no_progress") if getattr(args, name) != getattr(defaults, name)]
        if given:
            raise ValueError(f"encoder options {sorted(given)} given together with a ready RetrievalEncoder")
        encoder = model
    else:
        encoder = RetrievalEncoder(model, **args.encoder_options())
    similarity = args.similarity or encoder.similarity
    if similarity not in SIMILARITIES:
        raise ValueError(
            f"similarity {similarity!r} (declared by the model or given) is not supported for retrieval; "
            f"pass similarity= one of {SIMILARITIES}"
        )
    return encoder, similarity


def _rerank_stage(
    cross_encoder, dataset: RetrievalDataset, run: dict, *, top_k: int, measures, relevance_level: int = 1,
    **rerank_options
) -> dict:
    """The ``"rerank"`` entry of the results: ``cross_encoder`` re-scores each query's ``top_k`` of ``run``."""
    rerank_run, seconds = rerank(cross_encoder, dataset, run, top_k=top_k, **rerank_options)
    metrics, per_query = compute_metrics(
        dataset.qrels, rerank_run, measures or DEFAULT_MEASURES, relevance_level=relevance_level
    )
    pairs = sum(len(documents_of_query) for documents_of_query in rerank_run.values())
    return {
        "model": str(cross_encoder) if isinstance(cross_encoder, (str, Path)) else type(cross_encoder).__name__,
        "top_k": top_k,
        "metrics": metrics,
        "per_query": per_query,
        "seconds": seconds,
        "pairs_per_s": pairs / seconds if seconds > 0 else None,
    }


def compare_systems(
    results_a: list[RetrievalResults | dict], results_b: list[RetrievalResults | dict], *, measure: str = "ndcg@10",
    alpha: float = 0.05
) -> list[dict]:
    """System A vs B on several datasets: a paired t-test per dataset over the per-query values of
    ``measure``, Holm-Bonferroni across the datasets (Schlatt et al. 2025, TITE: Token-Independent Text Encoder
    for Information Retrieval, Sec. 5). ``results_a[i]`` and ``results_b[i]`` (:class:`RetrievalResults` or
    their JSON mappings) must be results of the same dataset and split (a BEIR test and dev split, or two
    graded-pair thresholds, are separate hypotheses). One row per dataset and split."""
    if len(results_a) != len(results_b) or not results_a:
        raise ValueError("give one results dict of system A and one of system B per dataset, in the same order")
    rows, seen = [], set()
    for a, b in zip(map(_as_mapping, results_a), map(_as_mapping, results_b)):
        task_a = (a["dataset"]["name"], a["dataset"].get("split"))
        task_b = (b["dataset"]["name"], b["dataset"].get("split"))
        if task_a != task_b:
            raise ValueError(
                f"results of different datasets paired: {_task_label(*task_a)!r} vs {_task_label(*task_b)!r}")
        if task_a in seen:
            raise ValueError(f"{_task_label(*task_a)!r} is given twice: each dataset and split is one hypothesis")
        seen.add(task_a)
        per_query_a, per_query_b = a["per_query"][measure], b["per_query"][measure]
        t, p = paired_t_test(per_query_a, per_query_b)
        common = sorted(set(per_query_a) & set(per_query_b))
        rows.append({
            "dataset": task_a[0],
            "split": task_a[1],
            "queries": len(common),
            "mean_a": sum(per_query_a[q] for q in common) / len(common),
            "mean_b": sum(per_query_b[q] for q in common) / len(common),
            "t": t,
            "p": p,
        })
    adjusted = holm_bonferroni({_task_label(row["dataset"], row["split"]): row["p"] for row in rows}, alpha=alpha)
    for row in rows:
        row["p_holm"], row["significant"] = adjusted[_task_label(row["dataset"], row["split"])]
    return rows


def _as_mapping(results: RetrievalResults | dict) -> dict:
    return results.to_dict() if isinstance(results, RetrievalResults) else results


def _task_label(name: str, split: str | None) -> str:
    return name if split is None else f"{name} ({split})"


def save_results(results: RetrievalResults | dict, path: str | Path) -> Path:
    """Write ``results`` (or the JSON mapping of results) as the results JSON at ``path``."""
    return write_results(path, _as_mapping(results))


def load_results(path: str | Path) -> RetrievalResults:
    """The :class:`RetrievalResults` of a results JSON written by :func:`evaluate_retrieval` (format checked)."""
    return RetrievalResults.from_dict(read_results(path), source=path)


def format_summary(results: RetrievalResults) -> str:
    """A short human-readable table of ``results``."""
    dataset, settings = results.dataset, results.settings
    lines = [
        f"{results.model} on {dataset['name']} ({dataset['split']}): "
        f"{dataset['num_queries']} queries, {dataset['num_documents']} documents, {settings['similarity']}",
    ]
    stages = [("retrieve", results.metrics)]
    if results.rerank:
        stages.append((f"+ rerank top {results.rerank['top_k']}", results.rerank["metrics"]))
    names = list(results.metrics)
    lines.append("| stage | " + " | ".join(names) + " |")
    lines.append("|:--|" + "--:|" * len(names))
    for stage, metrics in stages:
        lines.append(f"| {stage} | " + " | ".join(f"{metrics[name]:.4f}" for name in names) + " |")
    level = settings.get("relevance_level", 1)
    lines.append(f"relevance level: {level} (binary measures count grade >= {level} as relevant; nDCG is graded)")
    throughput = results.throughput
    if throughput["documents_per_s"]:
        lines.append(
            f"encode: {throughput['documents_per_s']:.1f} documents/s, "
            f"{throughput['queries_per_s']:.1f} queries/s on {results.environment['device']}"
        )
    elif settings.get("search_backend") == "bm25s":
        lines.append(f"retrieve: BM25 (bm25s, English stopwords) in {results.timings['search_s']:.1f} s")
    elif settings.get("corpus_embeddings"):
        lines.append(f"encode: documents read from the embedding shards {settings['corpus_embeddings']}")
    else:
        lines.append("encode: embeddings read from the cache")
    return "\n".join(lines)


__all__ = [
    "BM25",
    "RESULTS_FORMAT",
    "EvaluationArguments",
    "RetrievalResults",
    "compare_systems",
    "evaluate_retrieval",
    "format_summary",
    "load_results",
    "save_results",
    "search_and_score",
]
