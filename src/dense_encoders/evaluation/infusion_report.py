"""The retrieve + rerank report of infused dual encoders (*Can Cross Encoders Produce
Useful Sentence Embeddings?*, Table 1): each dual encoder retrieves, the cross-encoder it was
infused from re-ranks the top, and encode speeds are measured side by side in one run.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..checkpoints.loading import load_cross_encoder
from ..data.files import write_json
from ..data.retrieval import RetrievalDataset, load_dataset_for_evaluation
from .harness import EvaluationArguments, evaluate_retrieval


def _hub_record(dataset: RetrievalDataset) -> dict:
    """``{"hub": ...}``: the repository and commit of a dataset read from the Hub; nothing for a local one."""
    return {"hub": dataset.extra["hub"]} if "hub" in dataset.extra else {}


def retrieve_rerank_report(
    cross_encoder: str | Path,
    dual_encoders: dict[str, str | Path],
    data: str | Path | RetrievalDataset,
    *,
    split: str = "test",
    top_k: int = 50,
    batch_size: int = 32,
    baseline: str | None = None,
    pair_threshold: float | None = None,
    pair_scale: float | None = None,
    output: str | Path | None = None,
    trust_remote_code: bool = False,
    revision: str | None = None,
) -> dict:
    """The paper's Table 1: Hits@10 / MRR@10 of each dual encoder for retrieve and retrieve + rerank by
    ``cross_encoder`` (top ``top_k``), and each encoder's corpus encode speed (documents/s) with the
    speed-up over ``baseline`` (default: the first entry), all measured in this one run. ``pair_threshold`` /
    ``pair_scale``: for a graded pairs file (:func:`~dense_encoders.data.retrieval.load_graded_pairs`). The report
    is also written to ``output`` as JSON. Models that run code of their own (the cross-encoder, a baseline) are
    refused unless ``trust_remote_code``. ``data`` may be a Hub dataset id, read at ``revision``."""
    dataset = data if isinstance(data, RetrievalDataset) else load_dataset_for_evaluation(
        data, split=split, pair_threshold=pair_threshold, pair_scale=pair_scale, revision=revision)
    baseline = baseline or next(iter(dual_encoders))
    reranker = load_cross_encoder(cross_encoder, trust_remote_code=trust_remote_code)
    scores: dict = {}  # (query, document) -> CE score, shared: each pair is scored once for all encoders
    settings = EvaluationArguments(k=max(top_k, 100), rerank_top_k=top_k, batch_size=batch_size, no_progress=True,
                                   trust_remote_code=trust_remote_code)
    rows = []
    for name, model in dual_encoders.items():
        start = time.perf_counter()
        results = evaluate_retrieval(str(model), dataset, settings, cross_encoder=reranker, rerank_cache=scores)
        rows.append({
            "model": name,
            "path": str(model),
            "retrieve": {m: results.metrics[m] for m in ("hits@10", "mrr@10")},
            "rerank": {m: results.rerank["metrics"][m] for m in ("hits@10", "mrr@10")},
            "documents_per_s": results.throughput["documents_per_s"],
            "seconds": time.perf_counter() - start,
            "per_query": {"retrieve": results.per_query, "rerank": results.rerank["per_query"]},
        })
    reference = next(r for r in rows if r["model"] == baseline)
    for row in rows:
        row["speedup"] = row["documents_per_s"] / reference["documents_per_s"]
    graded = {key: dataset.extra[key] for key in ("pair_threshold", "pair_scale") if key in dataset.extra}
    report = {"dataset": dataset.name, "split": dataset.split, **graded, **_hub_record(dataset), "top_k": top_k,
              "cross_encoder": str(cross_encoder), "baseline": baseline, "rows": rows}
    if output is not None:
        write_json(output, report, sort_keys=False)
    return report


def format_report(report: dict) -> str:
    """The report of :func:`retrieve_rerank_report` as a markdown table."""
    lines = [
        f"{report['dataset']} ({report['split']}), rerank top {report['top_k']} with {report['cross_encoder']}",
        "| model | Hits@10 | MRR@10 | Hits@10 +rerank | MRR@10 +rerank | documents/s | speed-up |",
        "|:--|--:|--:|--:|--:|--:|--:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['model']} | {row['retrieve']['hits@10']:.4f} | {row['retrieve']['mrr@10']:.4f} | "
            f"{row['rerank']['hits@10']:.4f} | {row['rerank']['mrr@10']:.4f} | {row['documents_per_s']:.1f} | "
            f"{row['speedup']:.2f}x |"
        )
    return "\n".join(lines)


__all__ = ["format_report", "retrieve_rerank_report"]
