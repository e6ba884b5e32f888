"""Tokenization utilities (bundled WordPiece tokenizer, whole-word grouping)."""

from .wordpiece import bundled_tokenizer_path, load_tokenizer, word_ids

__all__ = ["bundled_tokenizer_path", "load_tokenizer", "word_ids"]
