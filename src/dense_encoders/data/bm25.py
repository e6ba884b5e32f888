"""BM25 candidates and hard negatives: a ``bm25s`` run over a :class:`RetrievalDataset`, and
(query, positive, BM25 negative) triplets mined from it (training data for infused dual encoders)."""

from __future__ import annotations

import random

import bm25s

from .retrieval import RetrievalDataset
from .runs import Run


def bm25_run(dataset: RetrievalDataset, k: int = 100) -> Run:
    """BM25 (``bm25s``, English stopwords) top-``k`` of every query of ``dataset``."""
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


__all__ = ["bm25_run", "mine_bm25_triplets"]
