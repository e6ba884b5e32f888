"""Re-scoring the top of a run with a cross-encoder (sentence-transformers ``CrossEncoder``)."""

from __future__ import annotations

import time

from ..data.retrieval import RetrievalDataset
from ..data.runs import Run, top_documents


def rerank(
    cross_encoder,
    dataset: RetrievalDataset,
    run: Run,
    *,
    top_k: int = 100,
    batch_size: int = 32,
    show_progress_bar: bool = True,
    device: str | None = None,
    score_cache: dict | None = None,
    allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
) -> tuple[Run, float]:
    """Scores of ``cross_encoder`` for the ``top_k`` documents of every query of ``run``.

    Returns the re-ranked run (only the re-scored documents, with the cross-encoder's scores) and
    the seconds spent scoring. Queries of ``run`` that ``dataset`` does not know raise a KeyError.
    ``score_cache`` (a dict, shared between calls with the same cross-encoder) keeps every pair's
    score so that re-ranking several runs of the same queries scores each pair once. A cross-encoder folder or Hub
    id that runs code of its own is refused unless ``trust_remote_code``.
    """
    from ..checkpoints.loading import load_cross_encoder  # sentence-transformers: imported when a run is re-ranked

    model = load_cross_encoder(cross_encoder, device=device, allow_missing_weights=allow_missing_weights,
                               trust_remote_code=trust_remote_code)
    owners: list[tuple[str, str]] = []
    pairs: list[tuple[str, str]] = []
    for query_id, doc_ids in top_documents(run, top_k).items():
        if query_id not in dataset.queries:
            raise KeyError(f"query {query_id!r} of the run is not in dataset {dataset.name!r}")
        query = dataset.queries[query_id]
        for doc_id in doc_ids:
            owners.append((query_id, doc_id))
            pairs.append((query, dataset.document_texts([doc_id])[0]))
    reranked: Run = {query_id: {} for query_id in run}
    cache = score_cache if score_cache is not None else {}
    todo = [i for i, owner in enumerate(owners) if owner not in cache]
    seconds = 0.0
    if todo:
        start = time.perf_counter()
        scores = model.predict([pairs[i] for i in todo], batch_size=batch_size, show_progress_bar=show_progress_bar,
                               convert_to_numpy=True)
        seconds = time.perf_counter() - start
        scores = scores.reshape(len(todo), -1)
        if scores.shape[1] != 1:
            raise ValueError(
                f"the cross-encoder gives {scores.shape[1]} scores per pair; re-ranking needs one relevance score "
                "(a CrossEncoder with num_labels=1)"
            )
        for i, score in zip(todo, scores[:, 0].tolist()):
            cache[owners[i]] = float(score)
    for owner in owners:
        reranked[owner[0]][owner[1]] = cache[owner]
    return reranked, seconds


__all__ = ["rerank"]
