"""Layer-wise retrieval quality of a cross-encoder vs a dual encoder (*Can Cross Encoders
Produce Useful Sentence Embeddings?*, Figures 3-5).

Layer-wise embeddings (the paper's Sec. 3.1): "to embed a single sentence, we simply pair it with
itself ... we mean pool over the tokens of the sentence for each layer, excluding padding and
separator tokens". The sentence occurs twice in the pair; by default both copies are pooled
(``copies="both"``: every token of the pair except padding and special tokens), ``copies="first"``
pools the first copy only (the other reading of "the tokens of the sentence"). Layer 0 is the
embedding output, layer i the output of encoder layer i. A dual encoder's layers are pooled the same
way over each text alone.

For every dataset and every layer, the layer's mean-pooled embeddings retrieve by cosine similarity
through the evaluation harness; Hits@10 and MRR@10 are reported per layer for both encoders, written
as CSV / JSON, plotted with matplotlib, and compared across datasets with a paired two-tailed t-test
at each layer (scipy).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from scipy import stats
from tqdm.auto import tqdm

from ..checkpoints.folder import clamp_to_positions, position_limit
from ..checkpoints.loading import cross_encoder_model_and_tokenizer, model_and_tokenizer
from ..data.files import DASHED_FLAGS, prepare_new_output_dir, write_json
from ..data.hub_datasets import revisions_for
from ..data.retrieval import RetrievalDataset, is_graded_pairs_file, load_dataset_for_evaluation
from ..models.infused.modeling_infused import mean_pool
from .harness import search_and_score

MEASURES = {"hits@10": "Success@10", "mrr@10": "RR@10"}


# --------------------------------------------------------------------------------------------
# Embeddings of every layer
# --------------------------------------------------------------------------------------------


def _resolve_layers(layers: Sequence[int] | None, num_layers: int) -> list[int]:
    if layers is None:
        return list(range(num_layers + 1))
    resolved = []
    for layer in layers:
        if not isinstance(layer, (int, np.integer)) or not -(num_layers + 1) <= layer <= num_layers:
            raise ValueError(
                f"layer {layer!r} is out of range: this model has layers 0 (embeddings) .. {num_layers}"
            )
        resolved.append(int(layer) % (num_layers + 1))
    return resolved


# tokenizers without a length limit report a huge model_max_length (transformers' VERY_LARGE_INTEGER)
NO_TOKENIZER_LIMIT = 10**9


def length_within_positions(max_length: int | None, tokenizer, model, name: str) -> int | None:
    """``max_length`` (default: the tokenizer's ``model_max_length``), brought down to ``model``'s positions with a
    line saying so, as ``evaluate`` does (a longer input would index past the position embeddings); the positions
    when neither sets a limit below them."""
    length = max_length if max_length is not None else getattr(tokenizer, "model_max_length", None)
    if not isinstance(length, int) or length >= NO_TOKENIZER_LIMIT:
        return position_limit(model.config)
    what = "--max-length" if max_length is not None else "the tokenizer's model_max_length"
    return clamp_to_positions(length, model.config, what, name)


@torch.no_grad()
def layerwise_embeddings(
    cross_encoder,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    *,
    tokenizer=None,
    copies: str = "both",
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | None = None,
    show_progress_bar: bool = False,
    trust_remote_code: bool = False,
) -> dict[int, np.ndarray]:
    """``{layer: [len(texts), hidden]}``: each text paired with itself, each layer mean-pooled over
    the text's tokens without padding and special/separator tokens (module doc, Sec. 3.1 of the paper).

    ``max_length`` bounds the PAIR (default: the tokenizer's limit), so each copy gets about half.
    """
    if copies not in ("both", "first"):
        raise ValueError(f"copies={copies!r}: choose 'both' (every token of the pair) or 'first'")
    if not texts:
        raise ValueError("no texts to embed")
    model, tokenizer = cross_encoder_model_and_tokenizer(cross_encoder, tokenizer, device,
                                                         trust_remote_code=trust_remote_code)
    max_length = length_within_positions(max_length, tokenizer, model, "the cross-encoder")
    num_layers = model.config.num_hidden_layers
    layers = _resolve_layers(layers, num_layers)
    base = model.base_model
    device = next(model.parameters()).device
    order = np.argsort([-len(t) for t in texts], kind="stable")  # length-sorted batches
    outputs = {layer: np.zeros((len(texts), model.config.hidden_size), dtype=np.float32) for layer in layers}
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="layer-wise CE embeddings", disable=not show_progress_bar):
        indices = order[start : start + batch_size]
        batch_texts = [texts[i] for i in indices]
        batch = tokenizer(
            batch_texts, batch_texts, padding=True, truncation=True, max_length=max_length,
            return_tensors="pt", return_special_tokens_mask=True,
        )
        keep = batch.pop("special_tokens_mask").eq(0) & batch["attention_mask"].bool()
        if copies == "first":
            sequence_ids = torch.tensor(
                [[s == 0 for s in batch.sequence_ids(row)] for row in range(len(batch_texts))], dtype=torch.bool
            )
            keep &= sequence_ids
        hidden = base(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True).hidden_states
        keep = keep.to(device)
        for layer in layers:
            outputs[layer][indices] = mean_pool(hidden[layer].float(), keep).cpu().numpy()
    return outputs


@torch.no_grad()
def dual_encoder_layerwise_embeddings(
    model,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    *,
    tokenizer=None,
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | None = None,
    show_progress_bar: bool = False,
    trust_remote_code: bool = False,
) -> dict[int, np.ndarray]:
    """The same for a dual encoder (path, SentenceTransformer or PreTrainedModel): each text alone,
    each layer mean-pooled over its tokens without padding and special tokens, for an equal comparison."""
    model, tokenizer = model_and_tokenizer(model, tokenizer, cross_encoder=False, device=device,
                                           trust_remote_code=trust_remote_code)
    if not texts:
        raise ValueError("no texts to embed")
    max_length = length_within_positions(max_length, tokenizer, model, "the dual encoder")
    layers = _resolve_layers(layers, model.config.num_hidden_layers)
    device = next(model.parameters()).device
    order = np.argsort([-len(t) for t in texts], kind="stable")
    outputs = {layer: np.zeros((len(texts), model.config.hidden_size), dtype=np.float32) for layer in layers}
    for start in tqdm(range(0, len(texts), batch_size), desc="layer-wise DE embeddings", disable=not show_progress_bar):
        indices = order[start : start + batch_size]
        batch = tokenizer([texts[i] for i in indices], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt", return_special_tokens_mask=True)
        keep = batch.pop("special_tokens_mask").eq(0) & batch["attention_mask"].bool()
        hidden = model(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True).hidden_states
        keep = keep.to(device)
        for layer in layers:
            if hidden[layer].shape[1] != keep.shape[1]:  # a TITE's pooled layers: fewer positions than tokens
                raise ValueError(
                    f"layer {layer} of the dual encoder ({type(model).__name__}) holds {hidden[layer].shape[1]} "
                    f"positions for {keep.shape[1]} tokens: it pools between layers, so its layers have no per-token "
                    "states to mean-pool; compare a dual encoder that keeps every token (BERT-like), or --layers "
                    "before its first pooling")
            outputs[layer][indices] = mean_pool(hidden[layer].float(), keep).cpu().numpy()
    return outputs


# --------------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------------


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
    pair_threshold: float | None = None,
    pair_scale: float | None = None,
    trust_remote_code: bool = False,
    overwrite_output_dir: bool = False,
    revision: str | None = None,
) -> dict:
    """Per-layer Hits@10 / MRR@10 of ``cross_encoder`` and ``dual_encoder`` on each dataset (a folder or Hub id
    that runs code of its own is refused unless ``trust_remote_code``).

    ``output_dir`` must be missing or empty, as a training run's (checked before anything is loaded); a
    non-empty one is refused unless ``overwrite_output_dir``, which deletes its contents first
    (:func:`~dense_encoders.data.files.prepare_new_output_dir`).

    ``pair_threshold`` / ``pair_scale`` apply to the graded pairs files among ``datasets`` (the paper's STSB
    task, :func:`~dense_encoders.data.retrieval.load_graded_pairs`); a graded dataset's rows are named
    ``name (split)``, the split naming the threshold. A dataset may be a Hub dataset id (``BeIR/scifact``), read
    at ``revision`` (each one given by Hub id) (:func:`~dense_encoders.data.retrieval.load_dataset_for_evaluation`).

    Returns ``{"rows": [{dataset, encoder, layer, hits@10, mrr@10}], "t_tests": [{layer, measure,
    t, p, datasets}]}``; with ``output_dir``: ``layerwise.csv``, ``layerwise.json``, ``layerwise.png``.
    """
    if not datasets:
        raise ValueError("give at least one dataset")
    graded = [not isinstance(s, RetrievalDataset) and is_graded_pairs_file(s) for s in datasets]
    if (pair_threshold is not None or pair_scale is not None) and not any(graded):
        raise ValueError("--pair-threshold / --pair-scale (pair_threshold, pair_scale) apply to graded pair files "
                         "(sentence1, sentence2, score); none of the datasets is one: leave them out")
    revisions = revisions_for([None if isinstance(s, RetrievalDataset) else s for s in datasets], revision)
    if output_dir is not None:
        inputs = [source for source in (cross_encoder, dual_encoder, *datasets) if isinstance(source, (str, Path))]
        prepare_new_output_dir(output_dir, overwrite=overwrite_output_dir, inputs=inputs, flags=DASHED_FLAGS)
    rows = []
    for source, is_graded, source_revision in zip(datasets, graded, revisions):
        pair_options = {"pair_threshold": pair_threshold, "pair_scale": pair_scale} if is_graded else {}
        dataset = source if isinstance(source, RetrievalDataset) else load_dataset_for_evaluation(
            source, split, revision=source_revision, **pair_options)
        label = f"{dataset.name} ({dataset.split})" if "pair_threshold" in dataset.extra else dataset.name
        queries, documents = dataset.query_texts(), dataset.document_texts()
        options = {"batch_size": batch_size, "max_length": max_length, "show_progress_bar": show_progress_bar,
                   "trust_remote_code": trust_remote_code}
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
                rows.append({"dataset": label, "encoder": encoder_name, "layer": layer, **metrics})

    results = {"rows": rows, "t_tests": _paired_t_tests_per_layer(rows), "copies": copies}
    if output_dir is not None:
        write_layerwise_outputs(results, output_dir)
    return results


def _paired_t_tests_per_layer(rows: list[dict]) -> list[dict]:
    """For each layer both encoders have and each measure, the paired t-test across datasets of the cross-encoder's
    against the dual encoder's value (``rows`` as :func:`layerwise_analysis` gives them): ``[{layer, measure, t, p,
    datasets}]``; ``t`` and ``p`` are ``None`` with fewer than two datasets, 0 and 1 where the values are equal."""
    t_tests = []
    names = sorted({row["dataset"] for row in rows})
    common_layers = sorted(
        {r["layer"] for r in rows if r["encoder"] == "cross-encoder"}
        & {r["layer"] for r in rows if r["encoder"] == "dual encoder"}
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
    return t_tests


def write_layerwise_outputs(results: dict, output_dir: str | Path) -> list[Path]:
    # slow to import (matplotlib); only plotting needs it
    import matplotlib

    matplotlib.use("Agg")
    # slow to import (matplotlib); only plotting needs it (after the Agg backend is chosen)
    import matplotlib.pyplot as plt

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    csv_path = output_dir / "layerwise.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["dataset", "encoder", "layer", *MEASURES])
        writer.writeheader()
        writer.writerows(results["rows"])
    json_path = output_dir / "layerwise.json"
    write_json(json_path, results, sort_keys=False)

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


__all__ = [
    "MEASURES",
    "NO_TOKENIZER_LIMIT",
    "dual_encoder_layerwise_embeddings",
    "format_layerwise",
    "layerwise_analysis",
    "length_within_positions",
    "layerwise_embeddings",
    "write_layerwise_outputs",
]
