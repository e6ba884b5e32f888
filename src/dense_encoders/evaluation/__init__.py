"""Retrieval evaluation: encoding with any encoder, exact/FAISS search, ir-measures metrics, significance
tests, cross-encoder re-ranking, and a results JSON that cards and reports read.

The data it reads (BEIR folders, pairs files, qrels, TREC runs) is read by :mod:`dense_encoders.data`:
``dense_encoders.data.retrieval`` (``load_beir``, ``load_dataset_for_evaluation``, ``RetrievalDataset``, ...),
``dense_encoders.data.runs`` (``read_trec_run``, ``write_trec_run``) and ``dense_encoders.data.format``
(``DataFormatError``); import them from there.
"""

# imported here: the names ``search`` and ``rerank`` are both modules of this package and their functions, which a
# later import of the module would replace (they import torch and numpy, not sentence-transformers)
from .rerank import rerank
from .search import exact_search, faiss_search, search, topk_to_run

# every other public name -> the module that defines it, imported on first use (PEP 562): the search and index
# commands import the search backends below this package without sentence-transformers and transformers' models,
# which the encoding and the harness need (seconds of CPU at every start of a command)
_EXPORTS = {
    "EncodedTexts": "encoding", "RetrievalEncoder": "encoding",
    "EvaluationArguments": "harness", "RetrievalResults": "harness", "evaluate_retrieval": "harness",
    "format_summary": "harness", "load_results": "harness", "save_results": "harness",
    "DEFAULT_MEASURES": "metrics", "compute_metrics": "metrics", "holm_bonferroni": "metrics",
    "paired_t_test": "metrics",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
