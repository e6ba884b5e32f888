"""Retrieval evaluation: encoding with any encoder, exact/FAISS search, ir-measures metrics, significance
tests, cross-encoder re-ranking, and a results JSON that cards and reports read.

The data it reads (BEIR folders, pairs files, qrels, TREC runs) is read by :mod:`dense_encoders.data`:
``dense_encoders.data.retrieval`` (``load_beir``, ``load_dataset_for_evaluation``, ``RetrievalDataset``, ...),
``dense_encoders.data.runs`` (``read_trec_run``, ``write_trec_run``) and ``dense_encoders.data.format``
(``DataFormatError``); import them from there.
"""

from .encoding import EncodedTexts, RetrievalEncoder
from .harness import (
    EvaluationArguments,
    RetrievalResults,
    evaluate_retrieval,
    format_summary,
    load_results,
    save_results,
)
from .metrics import DEFAULT_MEASURES, compute_metrics, holm_bonferroni, paired_t_test
from .rerank import rerank
from .search import exact_search, faiss_search, search, topk_to_run

__all__ = [
    "DEFAULT_MEASURES",
    "EncodedTexts",
    "EvaluationArguments",
    "RetrievalEncoder",
    "RetrievalResults",
    "compute_metrics",
    "evaluate_retrieval",
    "exact_search",
    "faiss_search",
    "format_summary",
    "holm_bonferroni",
    "load_results",
    "paired_t_test",
    "rerank",
    "save_results",
    "search",
    "topk_to_run",
]
