"""Layer-wise retrieval quality of a cross-encoder vs a dual encoder (seed 002, Figures 3-5).

For every dataset and every layer, the layer's mean-pooled embeddings (see
:mod:`dense_encoders.cross_encoders`) retrieve by cosine similarity through the evaluation harness;
Hits@10 and MRR@10 are reported per layer for both encoders, written as CSV / JSON, plotted with
matplotlib, and compared across datasets with a paired two-tailed t-test at each layer (scipy).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from ..cross_encoders import dual_encoder_layerwise_embeddings, layerwise_embeddings
from .data import RetrievalDataset, load_dataset_for_evaluation
from .harness import search_and_score

MEASURES = {"hits@10": "Success@10", "mrr@10": "RR@10"}


def layerwise_analysis(
    cross_encoder,
    dual_encoder,
    datasets: Sequence[RetrievalDataset | str | Path],
    *,
    split: str = "test",
    layers: Sequence[int] | None = None,
    copies: str = "both",
    batch_size: int = 32,
    max_length: int | None = None,
    k: int = 100,
    output_dir: str | Path | None = None,
    show_progress_bar: bool = True,
) -> dict:
    """Per-layer Hits@10 / MRR@10 of ``cross_encoder`` and ``dual_encoder`` on each dataset.

    Returns ``{"rows": [{dataset, encoder, layer, hits@10, mrr@10}], "t_tests": [{layer, measure,
    t, p, datasets}]}``; with ``output_dir``: ``layerwise.csv``, ``layerwise.json``, ``layerwise.png``.
    """
    from scipy import stats

    if not datasets:
        raise ValueError("give at least one dataset")
    rows = []
    for source in datasets:
        dataset = source if isinstance(source, RetrievalDataset) else load_dataset_for_evaluation(source, split)
        queries, documents = dataset.query_texts(), dataset.document_texts()
        options = {"batch_size": batch_size, "max_length": max_length, "show_progress_bar": show_progress_bar}
        encoders = {
            "cross-encoder": lambda texts: layerwise_embeddings(cross_encoder, texts, layers, copies=copies, **options),
            "dual encoder": lambda texts: dual_encoder_layerwise_embeddings(dual_encoder, texts, layers, **options),
        }
        for encoder_name, embed in encoders.items():
            query_layers, document_layers = embed(queries), embed(documents)
            for layer in sorted(query_layers):
                metrics, _, _, _ = search_and_score(
                    dataset, query_layers[layer], document_layers[layer], k=k, similarity="cosine", measures=MEASURES
                )
                rows.append({"dataset": dataset.name, "encoder": encoder_name, "layer": layer, **metrics})

    t_tests = []
    names = sorted({row["dataset"] for row in rows})
    common_layers = sorted(
        {r["layer"] for r in rows if r["encoder"] == "cross-encoder"} & {r["layer"] for r in rows if r["encoder"] == "dual encoder"}
    )
    value = {(r["dataset"], r["encoder"], r["layer"]): r for r in rows}
    for layer in common_layers:
        for measure in MEASURES:
            ce = [value[(n, "cross-encoder", layer)][measure] for n in names]
            de = [value[(n, "dual encoder", layer)][measure] for n in names]
            if len(names) < 2:
                t, p = None, None  # a t-test across datasets needs at least two
            elif all(a == b for a, b in zip(ce, de)):
                t, p = 0.0, 1.0
            else:
                result = stats.ttest_rel(ce, de)
                t, p = float(result.statistic), float(result.pvalue)
            t_tests.append({"layer": layer, "measure": measure, "t": t, "p": p, "datasets": len(names)})
    results = {"rows": rows, "t_tests": t_tests, "copies": copies}
    if output_dir is not None:
        write_layerwise_outputs(results, output_dir)
    return results


def write_layerwise_outputs(results: dict, output_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    csv_path = output_dir / "layerwise.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["dataset", "encoder", "layer", *MEASURES])
        writer.writeheader()
        writer.writerows(results["rows"])
    json_path = output_dir / "layerwise.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")

    names = sorted({row["dataset"] for row in results["rows"]})
    figure, axes = plt.subplots(len(names), len(MEASURES), figsize=(5 * len(MEASURES), 3.2 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        for j, measure in enumerate(MEASURES):
            axis = axes[i][j]
            for encoder, style in (("cross-encoder", "o-"), ("dual encoder", "s--")):
                points = sorted((r["layer"], r[measure]) for r in results["rows"]
                                if r["dataset"] == name and r["encoder"] == encoder)
                axis.plot([p[0] for p in points], [p[1] for p in points], style, label=encoder)
            axis.set_title(f"{name}: {measure}")
            axis.set_xlabel("layer (0 = embeddings)")
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            axis.legend()
    figure.tight_layout()
    png_path = output_dir / "layerwise.png"
    figure.savefig(png_path, dpi=120)
    plt.close(figure)
    return [csv_path, json_path, png_path]


def format_layerwise(results: dict) -> str:
    """A markdown table: one row per (dataset, layer), CE and DE side by side."""
    value = {(r["dataset"], r["encoder"], r["layer"]): r for r in results["rows"]}
    lines = ["| dataset | layer | CE Hits@10 | DE Hits@10 | CE MRR@10 | DE MRR@10 |", "|:--|--:|--:|--:|--:|--:|"]
    for dataset, layer in sorted({(r["dataset"], r["layer"]) for r in results["rows"]}):
        cells = []
        for measure in MEASURES:
            for encoder in ("cross-encoder", "dual encoder"):
                row = value.get((dataset, encoder, layer))
                cells.append(f"{row[measure]:.4f}" if row else "-")
        lines.append(f"| {dataset} | {layer} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    tests = [t for t in results["t_tests"] if t["p"] is not None]
    if tests:
        lines.append("")
        lines.append("paired two-tailed t-test across datasets, CE vs DE: " + "; ".join(
            f"layer {t['layer']} {t['measure']} p={t['p']:.3g}" for t in tests))
    return "\n".join(lines)


__all__ = ["MEASURES", "format_layerwise", "layerwise_analysis", "write_layerwise_outputs"]
