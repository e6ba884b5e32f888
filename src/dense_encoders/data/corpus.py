"""Pre-training corpora: load documents into a one-column (``text``) dataset and tokenize them.

Sources: ``.txt`` (one document per non-empty line), ``.jsonl``/``.json`` (one JSON object per
line, BEIR-style ``title`` + ``text``), ``.parquet`` (those columns), each also gzip-compressed (``.gz``), a
directory of such files, the corpus of a dataset on the Hub given by id (``BeIR/scifact``, ``mteb/scifact``:
:mod:`~dense_encoders.data.hub_datasets`; streamed from the Hub when the corpus is streamed), or an existing
``datasets.Dataset``/``IterableDataset``. :func:`tokenize_for_condenser` cuts documents into
consecutive blocks that fit Condenser's ``max_length`` once ``[CLS]``/``[SEP]`` are added.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Optional, Union

from .format import (
    DOCUMENT_TEXT_FIELDS,
    data_suffix,
    document_record,
    document_text,
    is_blank,
    records,
    text_lines,
)
from .hub_datasets import DatasetFiles, resolve_dataset
from .masking import EXAMPLE_INDEX

__all__ = ["JSON_EXTENSIONS", "SUPPORTED_EXTENSIONS", "corpus_files", "default_corpus_path", "load_corpus",
           "tokenize_for_condenser"]

SUPPORTED_EXTENSIONS = (".txt", ".jsonl", ".json", ".parquet")
JSON_EXTENSIONS = (".jsonl", ".json", ".parquet")  # files of records (read by data.format.records), not of lines


def default_corpus_path() -> pathlib.Path:
    """The corpus the package carries, read when no corpus is given: the 240 passages of the bundled
    retrieval set (``dense_encoders/resources/quickstart_beir/corpus.jsonl``, BEIR records ``_id``,
    ``title``, ``text``), the one copy of them in the package."""
    return pathlib.Path(__file__).resolve().parent.parent / "resources" / "quickstart_beir" / "corpus.jsonl"


def corpus_files(source: Union[str, os.PathLike], *, revision: Optional[str] = None,
                 streaming: bool = False) -> list[Union[pathlib.Path, str]]:
    """The files of a corpus: the file itself, the supported files of a folder sorted by name (each also
    ``.gz``), or the corpus files of a Hub dataset given by id at ``revision`` (downloaded into the Hugging Face
    cache; ``hf://`` URLs read as streams when ``streaming`` and the Hub is reachable)."""
    resolved = resolve_dataset(source, revision=revision, parts=("corpus",), split=None, stream=streaming)
    if isinstance(resolved, DatasetFiles):
        return list(resolved.corpus_files)
    path = resolved
    if not path.exists():
        raise FileNotFoundError(f"corpus path {str(path)!r} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and data_suffix(p) in SUPPORTED_EXTENSIONS)
        if not files:
            raise ValueError(
                f"corpus directory {str(path)!r} contains no files with a supported extension "
                f"{list(SUPPORTED_EXTENSIONS)} (each also .gz)"
            )
        return files
    if data_suffix(path) not in SUPPORTED_EXTENSIONS:
        raise ValueError(
            f"unsupported corpus file {str(path)!r} (extension {path.suffix!r}); supported extensions: "
            f"{list(SUPPORTED_EXTENSIONS)} (each also .gz), a directory of such files, the id of a Hub dataset, or a "
            "datasets.Dataset"
        )
    return [path]


def _txt_texts(path):
    """The documents of a text corpus: its non-blank lines, stripped (:func:`~dense_encoders.data.format.text_lines`:
    UTF-8, gzip-compressed when the name ends in ``.gz``; errors name ``file:line``)."""
    return (line.strip() for _, line in text_lines(path) if not is_blank(line))


def _read_txt(path) -> list[str]:
    return list(_txt_texts(path))


def _read_json_lines(path, text_field: Optional[str], title_field: Optional[str]) -> list[str]:
    return list(_json_texts(path, text_field, title_field))


def _json_texts(path, text_field: Optional[str], title_field: Optional[str]):
    """The document of every record of a JSON-lines (or Parquet) file, in order, read by
    :func:`~dense_encoders.data.format.document_record` (the reader of evaluation and encoding corpora too):
    ``text_field``, or ``text`` / ``contents`` when it is None. Errors name ``file:line`` (from 1; the row of a
    Parquet file)."""
    text_fields = DOCUMENT_TEXT_FIELDS if text_field is None else (text_field,)
    hint = "; pass text_field=<the field holding the document text>"
    for lineno, record in records(path):
        yield document_text(document_record(path, lineno, record, text_fields=text_fields, title_field=title_field,
                                            hint=hint))


def _stream_texts(files: list[str], text_field: Optional[str], title_field: Optional[str]):
    """Generator behind streamed corpora: each file read as when the corpus is read eagerly (:func:`_txt_texts`,
    :func:`_json_texts`, through the readers of :mod:`~dense_encoders.data.format`), so a bad record, bytes that are
    not UTF-8 or damaged gzip data are reported as ``file:line`` counted from 1, in the one message every command
    gives."""
    for path in files:  # a path, or the hf:// URL of a Hub dataset's file (kept as a string)
        if data_suffix(path) in JSON_EXTENSIONS:
            texts = _json_texts(path, text_field, title_field)
        else:
            texts = _txt_texts(path)
        for text in texts:
            yield {"text": text}


def _text_features():
    from datasets import Features, Value  # slow to import (datasets); keeps `dense-encoders --help` fast

    return Features({"text": Value("string")})


def _from_datasets_object(dataset, text_field: str, title_field: Optional[str], streaming: bool):
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    columns = dataset.column_names  # None for an IterableDataset with unknown features
    if columns is not None and text_field not in columns:
        raise ValueError(
            f"the dataset has no {text_field!r} column (columns: {list(columns)}); "
            "pass text_field=<the column holding the document text>"
        )
    if streaming and isinstance(dataset, datasets.Dataset):
        dataset = dataset.to_iterable_dataset()
    use_title = bool(title_field) and title_field != text_field and (columns is None or title_field in columns)
    if columns is not None:
        dataset = dataset.select_columns([text_field, title_field] if use_title else [text_field])

    def _to_text(batch):
        texts = batch[text_field]
        titles = batch.get(title_field) if use_title else None
        return {"text": [document_text({"title": t, "text": x}) for t, x in zip(titles or [None] * len(texts), texts)]}

    return dataset.map(_to_text, batched=True).select_columns(["text"])


def _stream_files(files: list, text_field: Optional[str], title_field: Optional[str]):
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    # not datasets' "json" or "text" builders: pyarrow reports a bad line as "row N" counted from 0 within a block,
    # and their own gzip reading fails with a traceback; our readers name file:line from 1 (one shard per file, as
    # load_dataset would give, in the sorted file order)
    return datasets.IterableDataset.from_generator(
        _stream_texts, features=_text_features(),
        gen_kwargs={"files": [str(path) for path in files], "text_field": text_field, "title_field": title_field},
    )


def load_corpus(
    source,
    *,
    text_field: Optional[str] = None,
    title_field: Optional[str] = "title",
    streaming: bool = False,
    revision: Optional[str] = None,
):
    """Load documents as a dataset with exactly one column, ``text``.

    ``source``: a ``.txt`` file (one document per non-empty line, stripped), a ``.jsonl``/``.json``
    file of one JSON object per line, read as evaluation and encoding read a corpus
    (:func:`~dense_encoders.data.format.document_record`: ``text_field``, by default ``text`` or
    ``contents``; a non-empty ``title_field`` is prepended,
    BEIR-style ``title + " " + text``: :func:`~dense_encoders.data.format.document_text`, the same
    string evaluation makes of a document), a directory (all supported files in it, sorted by name), or
    a ``datasets.Dataset``/``IterableDataset`` with a ``text_field`` column (by default ``text``; title
    joined likewise), or the id of a Hub dataset in BEIR's or MTEB's layout, whose corpus is read at ``revision``
    (:func:`corpus_files`). Files may be gzip-compressed (``.gz``) or Parquet.
    Files are read and validated eagerly (errors name ``file:line``) unless ``streaming=True``,
    which returns a lazy ``datasets.IterableDataset`` read by the same readers (one shard per file). An
    ``IterableDataset`` source always stays iterable.
    """
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
        return _from_datasets_object(source, text_field or "text", title_field, streaming)
    if isinstance(source, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise ValueError(
            f"load_corpus got a dataset dict with splits {list(source)}; pass one split, e.g. source['train']"
        )
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(
            f"unsupported corpus source of type {type(source).__name__}; pass a path to a "
            f"{'/'.join(SUPPORTED_EXTENSIONS)} file, a directory, or a datasets.Dataset/IterableDataset"
        )
    files = corpus_files(source, revision=revision, streaming=streaming)
    if streaming:
        return _stream_files(files, text_field, title_field)
    texts: list[str] = []
    for path in files:
        if data_suffix(path) in JSON_EXTENSIONS:
            texts.extend(_read_json_lines(path, text_field, title_field))
        else:
            texts.extend(_read_txt(path))
    return datasets.Dataset.from_dict({"text": texts}, features=_text_features())


def tokenize_for_condenser(dataset, tokenizer, max_length: int = 128, text_column: str = "text"):
    """Tokenize documents (no special tokens) into consecutive blocks of at most ``max_length - 2`` ids.

    One row per block: ``input_ids`` and ``example_index`` (the block's position, which seeds
    its masks when the collator has a ``seed``); the collator adds ``[CLS]``/``[SEP]``. Blocks of a
    document concatenate back to its tokens; empty documents yield no rows. Works on
    ``datasets.Dataset`` and ``datasets.IterableDataset``.
    """
    import datasets  # slow to import (datasets); keeps `dense-encoders --help` fast

    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 3:
        raise ValueError(
            f"max_length must be an integer >= 3 (room for [CLS], [SEP] and one token), got {max_length!r}"
        )
    columns = dataset.column_names
    if columns is not None and text_column not in columns:
        raise ValueError(
            f"text_column {text_column!r} is not a column of the dataset (columns: {list(columns)}); "
            "pass text_column=<the column holding the documents>"
        )
    block = max_length - 2

    def _blocks(texts):
        encoded = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        return {"input_ids": [ids[i : i + block] for ids in encoded for i in range(0, len(ids), block)]}

    kwargs: dict[str, Any] = {}
    if isinstance(dataset, datasets.Dataset):
        kwargs = {"desc": f"tokenizing into blocks of {max_length} tokens"}
    blocks = dataset.select_columns([text_column]).map(
        _blocks, input_columns=text_column, batched=True, remove_columns=[text_column], **kwargs
    )
    return blocks.map(lambda _, index: {EXAMPLE_INDEX: index}, input_columns="input_ids", with_indices=True)
