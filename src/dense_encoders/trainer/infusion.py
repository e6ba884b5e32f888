"""Training cross-encoder-infused dual encoders (seed 002) and the retrieve + rerank report.

Two ways to train a DE-2-CE (or DE-2-Rand) built by :func:`dense_encoders.cross_encoders.infuse`:

* ``mnrl`` (as in the seed): sentence-transformers' ``SentenceTransformerTrainer`` with
  ``MultipleNegativesRankingLoss`` on (query, positive, BM25 hard negative) triplets, negatives
  mined with ``bm25s`` (top BM25 documents that are not judged relevant);
* ``distill``: our ``DistillationTrainer`` with the cross-encoder's own scores on the BM25
  candidates as teacher (``score_teacher``), losses configurable (default Margin-MSE + InfoNCE).
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

from ..cross_encoders import infuse, save_dual_encoder
from ..evaluation.data import RetrievalDataset, Run, load_beir

logger = logging.getLogger(__name__)

METHODS = ("mnrl", "distill")


def bm25_run(dataset: RetrievalDataset, k: int = 100) -> Run:
    """BM25 (``bm25s``, English stopwords) top-``k`` of every query of ``dataset``."""
    import bm25s

    doc_ids = dataset.document_ids()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(dataset.document_texts(doc_ids), stopwords="en", show_progress=False),
                    show_progress=False)
    query_ids = dataset.query_ids()
    k = min(k, len(doc_ids))
    indices, scores = retriever.retrieve(
        bm25s.tokenize(dataset.query_texts(query_ids), stopwords="en", show_progress=False), k=k, show_progress=False
    )
    return {
        query_id: {doc_ids[int(j)]: float(s) for j, s in zip(indices[row], scores[row])}
        for row, query_id in enumerate(query_ids)
    }


def mine_bm25_triplets(
    dataset: RetrievalDataset, *, negatives_from_top: int = 30, seed: int = 0, run: Run | None = None
) -> list[dict[str, str]]:
    """(anchor, positive, negative) triplets: every judged-relevant document of a query with one
    hard negative drawn from the query's BM25 top ``negatives_from_top`` minus its relevant ones."""
    run = run if run is not None else bm25_run(dataset, negatives_from_top)
    generator = random.Random(seed)
    triplets = []
    for query_id, judged in dataset.qrels.items():
        positives = [d for d, grade in judged.items() if grade > 0 and d in dataset.corpus]
        ranked = sorted(run.get(query_id, {}).items(), key=lambda item: -item[1])[:negatives_from_top]
        candidates = [d for d, _ in ranked if d not in judged]
        if not positives or not candidates:
            continue
        for positive in positives:
            negative = generator.choice(candidates)
            triplets.append({
                "anchor": dataset.queries[query_id],
                "positive": dataset.document_texts([positive])[0],
                "negative": dataset.document_texts([negative])[0],
            })
    if not triplets:
        raise ValueError(f"{dataset.name}: no (query, positive, BM25 negative) triplet could be built")
    return triplets


def train_mnrl(
    model_folder: str | Path,
    triplets: list[dict[str, str]],
    output_dir: str | Path,
    *,
    epochs: float = 1.0,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    max_length: int = 256,
    seed: int = 0,
) -> Path:
    """The seed's recipe: ``MultipleNegativesRankingLoss`` (in-batch + BM25 negatives), no duplicate
    texts in a batch, with ``SentenceTransformerTrainer``."""
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    model = SentenceTransformer(str(model_folder), trust_remote_code=True, device="cpu" if _no_gpu() else None)
    model.max_seq_length = max_length
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, warmup_steps=0.1, batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no", logging_steps=10, report_to="none", seed=seed,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(triplets),
        loss=MultipleNegativesRankingLoss(model),
    )
    trainer.train()
    model.save(str(output_dir))
    from .output_dir import write_training_args

    write_training_args(args, output_dir)  # JSON, never the Trainer's pickle
    return Path(output_dir)


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def train_infused(
    cross_encoder: str | Path,
    train_data: str | Path | RetrievalDataset,
    output_dir: str | Path,
    *,
    method: str = "mnrl",
    split: str = "train",
    random_init: bool = False,
    num_copied_layers: int = 1,
    num_new_layers: int = 1,
    epochs: float = 1.0,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    max_length: int = 256,
    losses: str = "margin_mse+infonce",
    candidates: int = 30,
    seed: int = 0,
) -> Path:
    """Build DE-(N+M)-CE (or -Rand with ``random_init``) from ``cross_encoder`` and train it on the
    ``split`` of a BEIR folder by ``method`` (module doc). Returns the saved folder.

    ``output_dir`` is not checked here: ``dense-encoders infuse`` checks (or clears) its ``--output-dir``
    once for all the models it trains into it (:func:`dense_encoders.trainer.output_dir.prepare_output_dir`)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    dataset = train_data if isinstance(train_data, RetrievalDataset) else load_beir(train_data, split=split)
    output_dir = Path(output_dir)
    initial = output_dir / "initial"
    model, tokenizer = infuse(cross_encoder, num_copied_layers=num_copied_layers, num_new_layers=num_new_layers,
                              random_init=random_init, seed=seed)
    save_dual_encoder(model, tokenizer, initial)
    run = bm25_run(dataset, candidates)
    if method == "mnrl":
        triplets = mine_bm25_triplets(dataset, negatives_from_top=candidates, seed=seed, run=run)
        logger.info("training on %d BM25 triplets", len(triplets))
        train_mnrl(initial, triplets, output_dir, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                   max_length=max_length, seed=seed)
    else:
        from .distillation import DistillationArguments, DistillationSetup, distill
        from .teacher import score_teacher

        train_file = output_dir / "teacher-scores.jsonl"
        score_teacher(cross_encoder, run, train_file, queries=dataset.queries, corpus=dataset.corpus,
                      top_k=candidates, include_texts=True, batch_size=batch_size)
        setup = DistillationSetup(student=str(initial), train_file=str(train_file), losses=losses,
                                  documents_per_query=8, query_max_length=64, document_max_length=max_length)
        args = DistillationArguments(output_dir=str(output_dir), num_train_epochs=epochs,
                                     per_device_train_batch_size=batch_size,
                                     learning_rate=learning_rate, seed=seed, use_cpu=_no_gpu())
        distill(setup, args, check_output_dir=False)  # the folder already holds initial/ and the teacher scores
    return output_dir


def retrieve_rerank_report(
    cross_encoder: str | Path,
    dual_encoders: dict[str, str | Path],
    data: str | Path | RetrievalDataset,
    *,
    split: str = "test",
    top_k: int = 50,
    batch_size: int = 32,
    baseline: str | None = None,
) -> dict:
    """Seed 002 Table 1: Hits@10 / MRR@10 of each dual encoder for retrieve and retrieve + rerank by
    ``cross_encoder`` (top ``top_k``), and each encoder's corpus encode speed (documents/s) with the
    speed-up over ``baseline`` (default: the first entry), all measured in this one run."""
    from ..evaluation import evaluate_retrieval, load_dataset_for_evaluation

    dataset = data if isinstance(data, RetrievalDataset) else load_dataset_for_evaluation(data, split=split)
    from ..evaluation.rerank import load_cross_encoder

    baseline = baseline or next(iter(dual_encoders))
    reranker = load_cross_encoder(cross_encoder)
    scores: dict = {}  # (query, document) -> CE score, shared: each pair is scored once for all encoders
    rows = []
    for name, model in dual_encoders.items():
        start = time.perf_counter()
        results = evaluate_retrieval(str(model), dataset, k=max(top_k, 100), cross_encoder=reranker,
                                     rerank_top_k=top_k, batch_size=batch_size, show_progress_bar=False,
                                     rerank_cache=scores)
        rows.append({
            "model": name,
            "path": str(model),
            "retrieve": {m: results["metrics"][m] for m in ("hits@10", "mrr@10")},
            "rerank": {m: results["rerank"]["metrics"][m] for m in ("hits@10", "mrr@10")},
            "documents_per_s": results["throughput"]["documents_per_s"],
            "seconds": time.perf_counter() - start,
            "per_query": {"retrieve": results["per_query"], "rerank": results["rerank"]["per_query"]},
        })
    reference = next(r for r in rows if r["model"] == baseline)
    for row in rows:
        row["speedup"] = row["documents_per_s"] / reference["documents_per_s"]
    return {"dataset": dataset.name, "split": dataset.split, "top_k": top_k, "cross_encoder": str(cross_encoder),
            "baseline": baseline, "rows": rows}


def format_report(report: dict) -> str:
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


__all__ = [
    "METHODS",
    "bm25_run",
    "format_report",
    "mine_bm25_triplets",
    "retrieve_rerank_report",
    "train_infused",
    "train_mnrl",
]
