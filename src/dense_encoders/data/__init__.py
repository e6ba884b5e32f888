"""Data pipeline for Condenser / coCondenser pre-training: corpora, whole-word masking, spans."""

from .corpus import SUPPORTED_EXTENSIONS, default_corpus_path, load_corpus, tokenize_for_condenser
from .masking import WholeWordMaskingCollator
from .spans import CoCondenserCollator, add_spans, split_into_spans

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "default_corpus_path",
    "load_corpus",
    "tokenize_for_condenser",
    "WholeWordMaskingCollator",
    "CoCondenserCollator",
    "add_spans",
    "split_into_spans",
]
