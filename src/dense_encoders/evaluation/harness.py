"""One retrieval evaluation: encode, search, score (and optionally re-rank), write a results JSON.

The results JSON is what model cards and reports read::

    {"format": "dense-encoders/retrieval-results/1", "model": ..., "model_fingerprint": ...,
     "dataset": {"name", "split", "source", "num_queries", "num_documents"},  # graded pairs add
                "pair_threshold", "pair_scale"; their split names the threshold ("pairs@0.5")
     "settings": {"k", "similarity", "search_backend", "batch_size", "prompts", "max_lengths", ...},
     "metrics": {"ndcg@10": ..., "mrr@10": ..., "recall@100": ..., "recall@1000": ..., "hits@10": ...},
     "per_query": {"ndcg@10": {query_id: value}, ...},
     "rerank": null | {"model", "top_k", "metrics", "per_query", "seconds", "pairs_per_s"},
     "timings": {"encode_queries_s", "encode_documents_s", "search_s", "queries_cached", "documents_cached"},
     "throughput": {"queries_per_s", "documents_per_s"},   # null when read from the cache
     "environment": {...}, "created": ISO time}
"""

from __future__ import annotations

import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from ..data.retrieval import RetrievalDataset, load_dataset_for_evaluation
from ..data.runs import write_trec_run
from ..vectors import SIMILARITIES
from .encoding import EncodedTexts, RetrievalEncoder
from .metrics import DEFAULT_MEASURES, compute_metrics, holm_bonferroni, paired_t_test
from .rerank import rerank
from .search import search, topk_to_run

RESULTS_FORMAT = "dense-encoders/retrieval-results/1"


def _environment(encoder: RetrievalEncoder) -> dict:
    import sentence_transformers
    import transformers

    from .. import __version__

    return {
        "device": str(encoder.model.device),
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
    *,
    split: str = "test",
    k: int = 1000,
    similarity: str | None = None,
    search_backend: str = "exact",
    measures: dict[str, str] | None = None,
    cross_encoder=None,
    rerank_top_k: int = 100,
    rerank_batch_size: int = 32,
    rerank_cache: dict | None = None,
    output: str | Path | None = None,
    run_output: str | Path | None = None,
    relevance_level: int = 1,
    allow_empty_documents: bool = False,
    pair_threshold: float | None = None,
    pair_scale: float | None = None,
    corpus_embeddings: str | Path | None = None,
    **encoder_options,
) -> dict:
    """Evaluate ``model`` (anything :class:`RetrievalEncoder` accepts, or a RetrievalEncoder) on ``data``.

    ``similarity`` defaults to the one the model declares (sentence-transformers
    ``similarity_fn_name``); ``encoder_options`` go to :class:`RetrievalEncoder` (pooling, prompts,
    max lengths, batch size, cache_dir, ...). Returns the results dict (module doc), also written to
    ``output`` as JSON; ``run_output`` gets the first-stage run in TREC format.

    ``relevance_level`` (default 1; TREC DL uses 2) is the grade from which binary measures (RR,
    Recall, Hits) count a document as relevant; nDCG keeps the graded values; the evaluated queries
    are those with at least one document at or above it. ``allow_empty_documents`` keeps corpus
    documents without text (an error by default). ``pair_threshold`` / ``pair_scale`` turn a graded pairs
    file into a task (:func:`~dense_encoders.data.retrieval.load_graded_pairs`); the results record them.
    ``corpus_embeddings``: a folder of embedding shards of this corpus (``dense-encoders encode``) searched
    instead of encoding the documents: the same model, document prompt, length and normalisation, and exactly
    the corpus's document ids, or a one-line error.
    """
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, int) or relevance_level < 1:
        raise ValueError(f"relevance level must be an integer >= 1, got {relevance_level!r}")
    dataset = _dataset(data, split, allow_empty_documents=allow_empty_documents, pair_threshold=pair_threshold,
                       pair_scale=pair_scale)
    encoder, similarity = _encoder(model, similarity, encoder_options)
    query_ids, doc_ids = dataset.query_ids(), dataset.document_ids()
    queries = encoder.encode_queries(dataset.query_texts(query_ids))
    if corpus_embeddings is not None:
        if search_backend != "exact":
            raise ValueError("corpus embeddings are searched exactly, shard by shard; for a FAISS index use "
                             "`dense-encoders index` and `dense-encoders search`")
        documents, metrics, per_query, run, search_seconds = _search_stored_corpus(
            encoder, dataset, queries, corpus_embeddings, k=k, similarity=similarity, measures=measures,
            relevance_level=relevance_level)
    else:
        documents = encoder.encode_documents(dataset.document_texts(doc_ids))
        metrics, per_query, run, search_seconds = search_and_score(
            dataset, queries.embeddings, documents.embeddings, k=k, similarity=similarity,
            search_backend=search_backend, measures=measures, relevance_level=relevance_level,
        )
    reranked = None
    if cross_encoder is not None:
        reranked = _rerank_stage(
            cross_encoder, dataset, run, top_k=rerank_top_k, batch_size=rerank_batch_size, measures=measures,
            relevance_level=relevance_level,
            show_progress_bar=encoder.show_progress_bar, score_cache=rerank_cache,
            allow_missing_weights=encoder_options.get("allow_missing_weights", False),
        )
    results = {
        "format": RESULTS_FORMAT,
        "model": encoder.name,
        "model_fingerprint": encoder.fingerprint,
        "dataset": {
            "name": dataset.name,
            "split": dataset.split,
            "source": dataset.source,
            "num_queries": len(query_ids),
            "num_documents": len(doc_ids),
            **{key: dataset.extra[key] for key in ("pair_threshold", "pair_scale") if key in dataset.extra},
        },
        "settings": {
            "k": k, "similarity": similarity, "search_backend": search_backend,
            "relevance_level": relevance_level, **encoder.settings(),
            "corpus_embeddings": str(corpus_embeddings) if corpus_embeddings is not None else None,
        },
        "metrics": metrics,
        "per_query": per_query,
        "rerank": reranked,
        "timings": {
            "encode_queries_s": queries.seconds,
            "encode_documents_s": documents.seconds,
            "search_s": search_seconds,
            "queries_cached": queries.cached,
            "documents_cached": documents.cached,
        },
        "throughput": {"queries_per_s": queries.texts_per_second, "documents_per_s": documents.texts_per_second},
        "environment": _environment(encoder),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if output is not None:
        save_results(results, output)
    if run_output is not None:
        write_trec_run(run, run_output)
    return results


def _search_stored_corpus(encoder: RetrievalEncoder, dataset: RetrievalDataset, queries: EncodedTexts, folder, *,
                          k: int, similarity: str, measures, relevance_level: int):
    """Search the corpus's stored embedding shards instead of encoding it: ``(documents, metrics, per_query,
    run, seconds)``; shards of another model, prompt, length or corpus are refused."""
    from ..data.embedding_shards import EmbeddingShards
    from .shard_search import search_shards

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
    scores, indices = search_shards(queries.embeddings, shards, k, similarity=similarity)
    seconds = time.perf_counter() - start
    run = topk_to_run(dataset.query_ids(), stored_ids, scores, indices)
    metrics, per_query = compute_metrics(dataset.qrels, run, measures or DEFAULT_MEASURES,
                                         relevance_level=relevance_level)
    documents = EncodedTexts(np.empty((0, shards.dimension), dtype=np.float32), 0.0, True, str(shards.folder))
    return documents, metrics, per_query, run, seconds


def _dataset(data: RetrievalDataset | str | Path, split: str, allow_empty_documents: bool = False,
             pair_threshold: float | None = None, pair_scale: float | None = None) -> RetrievalDataset:
    if isinstance(data, RetrievalDataset) and (pair_threshold is not None or pair_scale is not None):
        raise ValueError("pair_threshold / pair_scale apply when loading a graded pairs file; this dataset is "
                         "already loaded: pass the file's path, or load it with load_graded_pairs")
    dataset = data if isinstance(data, RetrievalDataset) else load_dataset_for_evaluation(
        data, split=split, allow_empty_documents=allow_empty_documents, pair_threshold=pair_threshold,
        pair_scale=pair_scale)
    if not dataset.queries or not dataset.corpus:
        raise ValueError(f"dataset {dataset.name!r} ({dataset.split}) has no queries or no documents")
    return dataset


def _encoder(model, similarity: str | None, encoder_options: dict) -> tuple[RetrievalEncoder, str]:
    """The :class:`RetrievalEncoder` of ``model`` and the similarity to search with (the model's own by default)."""
    encoder = model if isinstance(model, RetrievalEncoder) else RetrievalEncoder(model, **encoder_options)
    if isinstance(model, RetrievalEncoder) and encoder_options:
        raise ValueError(f"encoder options {sorted(encoder_options)} given together with a ready RetrievalEncoder")
    similarity = similarity or encoder.similarity
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
    results_a: list[dict], results_b: list[dict], *, measure: str = "ndcg@10", alpha: float = 0.05
) -> list[dict]:
    """System A vs B on several datasets: a paired t-test per dataset over the per-query values of
    ``measure``, Holm-Bonferroni across the datasets (TITE paper, Sec. 5). ``results_a[i]`` and
    ``results_b[i]`` must be results of the same dataset and split (a BEIR test and dev split, or two
    graded-pair thresholds, are separate hypotheses). One row per dataset and split."""
    if len(results_a) != len(results_b) or not results_a:
        raise ValueError("give one results dict of system A and one of system B per dataset, in the same order")
    rows, seen = [], set()
    for a, b in zip(results_a, results_b):
        task_a = (a["dataset"]["name"], a["dataset"].get("split"))
        task_b = (b["dataset"]["name"], b["dataset"].get("split"))
        if task_a != task_b:
            raise ValueError(f"results of different datasets paired: {_task_label(*task_a)!r} vs {_task_label(*task_b)!r}")
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


def _task_label(name: str, split: str | None) -> str:
    return name if split is None else f"{name} ({split})"


def save_results(results: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load_results(path: str | Path) -> dict:
    """A results JSON written by :func:`evaluate_retrieval` (format checked)."""
    results = json.loads(Path(path).read_text(encoding="utf-8"))
    if results.get("format") != RESULTS_FORMAT:
        raise ValueError(f"{path} is not a dense-encoders results file (format {results.get('format')!r})")
    return results


def format_summary(results: dict) -> str:
    """A short human-readable table of a results dict."""
    dataset = results["dataset"]
    lines = [
        f"{results['model']} on {dataset['name']} ({dataset['split']}): "
        f"{dataset['num_queries']} queries, {dataset['num_documents']} documents, {results['settings']['similarity']}",
    ]
    stages = [("retrieve", results["metrics"])]
    if results.get("rerank"):
        stages.append((f"+ rerank top {results['rerank']['top_k']}", results["rerank"]["metrics"]))
    names = list(results["metrics"])
    lines.append("| stage | " + " | ".join(names) + " |")
    lines.append("|:--|" + "--:|" * len(names))
    for stage, metrics in stages:
        lines.append(f"| {stage} | " + " | ".join(f"{metrics[name]:.4f}" for name in names) + " |")
    level = results["settings"].get("relevance_level", 1)
    lines.append(f"relevance level: {level} (binary measures count grade >= {level} as relevant; nDCG is graded)")
    throughput = results["throughput"]
    if throughput["documents_per_s"]:
        lines.append(
            f"encode: {throughput['documents_per_s']:.1f} documents/s, "
            f"{throughput['queries_per_s']:.1f} queries/s on {results['environment']['device']}"
        )
    elif results["settings"].get("corpus_embeddings"):
        lines.append(f"encode: documents read from the embedding shards {results['settings']['corpus_embeddings']}")
    else:
        lines.append("encode: embeddings read from the cache")
    return "\n".join(lines)


__all__ = ["RESULTS_FORMAT", "compare_systems", "evaluate_retrieval", "search_and_score", "format_summary", "load_results", "save_results"]
