"""Tests for dense_encoders.data.corpus: load_corpus and tokenize_for_condenser."""

import gzip
import io
import json
import math
import re

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dense_encoders.data import WholeWordMaskingCollator, default_corpus_path, load_corpus, tokenize_for_condenser
from dense_encoders.quickstart import default_data


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


TXT = "first document here\n\n   \n  second document, padded  \nthird\r\n"
TXT_DOCS = ["first document here", "second document, padded", "third"]
RECORDS = [
    {"_id": "1", "title": "Condenser", "text": "a pre-training architecture"},
    {"_id": "2", "title": "", "text": "no title"},
    {"_id": "3", "text": "missing title"},
    {"_id": "4", "title": None, "text": "null title"},
    {"_id": "5", "title": "Only", "text": ""},
]
RECORD_DOCS = ["Condenser a pre-training architecture", "no title", "missing title", "null title", "Only "]


def rows(ds):
    return [r["text"] for r in ds]


# ----------------------------------------------------------------------------- sources


def test_default_corpus_is_the_bundled_retrieval_sets_corpus():
    path = default_corpus_path()
    assert path == default_data() / "corpus.jsonl"
    assert path.parent.parent.name == "resources" and path.parent.parent.parent.name == "dense_encoders"


def test_default_corpus_loads_every_passage_as_title_and_text():
    records = [json.loads(line) for line in default_corpus_path().read_text(encoding="utf-8").splitlines()]
    expected = [f"{record['title']} {record['text']}" for record in records]
    assert len(expected) == 240
    assert load_corpus(default_corpus_path())["text"] == expected
    assert [row["text"] for row in load_corpus(default_corpus_path(), streaming=True)] == expected


def test_the_package_carries_each_passage_once():
    resources = default_data().parent
    seen = {}
    for path in sorted(resources.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = json.loads(line)["text"]
            assert text not in seen, f"{path.relative_to(resources)} repeats a passage of {seen[text]}"
            seen[text] = path.relative_to(resources)


def test_txt_one_document_per_non_empty_line(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text(TXT, encoding="utf-8")
    ds = load_corpus(path)
    assert isinstance(ds, datasets.Dataset) and ds.column_names == ["text"]
    assert ds["text"] == TXT_DOCS
    assert load_corpus(str(path))["text"] == TXT_DOCS


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_jsonl_beir_title_join(tmp_path, suffix):
    path = write_jsonl(tmp_path / f"corpus{suffix}", RECORDS)
    ds = load_corpus(path)
    assert ds.column_names == ["text"]
    assert ds["text"] == RECORD_DOCS


def test_custom_fields(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"body": "b1", "head": "h1"}, {"body": "b2", "head": "h2", "title": "t"}])
    assert load_corpus(path, text_field="body", title_field="head")["text"] == ["h1 b1", "h2 b2"]
    assert load_corpus(path, text_field="body", title_field=None)["text"] == ["b1", "b2"]
    assert load_corpus(path, text_field="body")["text"] == ["b1", "t b2"]


def test_directory_reads_supported_files_sorted(tmp_path):
    (tmp_path / "c.txt").write_text("from c\n", encoding="utf-8")
    write_jsonl(tmp_path / "b.jsonl", [{"text": "from b", "title": "B"}])
    (tmp_path / "a.txt").write_text("from a 1\nfrom a 2\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("ignored\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("not recursed\n", encoding="utf-8")
    assert load_corpus(tmp_path)["text"] == ["from a 1", "from a 2", "B from b", "from c"]


def test_dataset_sources(tmp_path):
    ds = datasets.Dataset.from_dict(
        {"text": ["t1", "t2"], "title": ["T1", ""], "other": [1, 2]}
    )
    out = load_corpus(ds)
    assert isinstance(out, datasets.Dataset) and out.column_names == ["text"]
    assert out["text"] == ["T1 t1", "t2"]
    assert load_corpus(ds, title_field=None)["text"] == ["t1", "t2"]
    body = datasets.Dataset.from_dict({"body": ["x", "y"], "text": ["not", "this"]})
    assert load_corpus(body, text_field="body")["text"] == ["x", "y"]

    streamed = load_corpus(ds, streaming=True)
    assert isinstance(streamed, datasets.IterableDataset)
    assert list(streamed) == [{"text": "T1 t1"}, {"text": "t2"}]
    iterable = load_corpus(ds.to_iterable_dataset())
    assert isinstance(iterable, datasets.IterableDataset)
    assert rows(iterable) == ["T1 t1", "t2"]


def test_streaming_equals_eager(tmp_path):
    (tmp_path / "a.txt").write_text(TXT, encoding="utf-8")
    write_jsonl(tmp_path / "b.jsonl", RECORDS)
    (tmp_path / "c.txt").write_text("last one\n", encoding="utf-8")
    for source in (tmp_path / "a.txt", tmp_path / "b.jsonl", tmp_path):
        eager = load_corpus(source)
        lazy = load_corpus(source, streaming=True)
        assert isinstance(lazy, datasets.IterableDataset)
        assert list(lazy) == list(eager) and len(eager) > 0, source
    assert rows(load_corpus(tmp_path, streaming=True)) == TXT_DOCS + RECORD_DOCS + ["last one"]


def test_each_format_gzip_compressed_reads_as_the_plain_file(tmp_path):
    """Issue 41 §8: a ``.gz`` corpus of each format is read by the one reader of compressed files as the plain file
    is (the reference), eagerly and streamed; ``.parquet.gz`` (promised: "each also .gz") was read as JSON lines."""
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "title"} for r in RECORDS]), buffer)
    for name, data in (("docs.txt", TXT.encode()), ("corpus.jsonl", "".join(json.dumps(r) + "\n" for r in RECORDS)
                       .encode()), ("corpus.parquet", buffer.getvalue())):
        (tmp_path / name).write_bytes(data)
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(data))
        reference = rows(load_corpus(tmp_path / name))
        assert reference and all(rows(load_corpus(tmp_path / f"{name}.gz", streaming=streaming)) == reference
                                 for streaming in (False, True)), name


def test_pretraining_reads_a_corpus_as_evaluation_and_encoding_do(tmp_path):
    """One record reader: a corpus of ``id``/``contents`` lines (Pyserini's layout) is the same documents for
    pre-training (eager and streamed), for evaluation (read_corpus_jsonl) and for encoding (iterate_texts)."""
    from dense_encoders.data.embedding_shards import iterate_texts, text_source
    from dense_encoders.data.format import document_text
    from dense_encoders.data.retrieval import read_corpus_jsonl

    records = [{"id": "a", "contents": "first text", "title": "T"}, {"id": 2, "contents": "second"},
               {"docid": "c", "text": "third", "title": 1999}]
    path = write_jsonl(tmp_path / "corpus.jsonl", records)
    expected = ["T first text", "second", "1999 third"]
    assert load_corpus(path)["text"] == expected
    assert rows(load_corpus(path, streaming=True)) == expected
    assert [document_text(d) for d in read_corpus_jsonl(path).values()] == expected
    assert [text for _, text in iterate_texts(text_source(path))] == expected
    assert list(read_corpus_jsonl(path)) == ["a", "2", "c"]


# ----------------------------------------------------------------------------- errors


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n\n{"text": "broken"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}:3: not valid JSON"):
        load_corpus(path)


def test_missing_text_field_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "ok"}, {"body": "no text"}])
    where = re.escape(str(path))
    message = rf"{where}:2: missing field 'text' or 'contents' \(fields: \['body'\]\).*text_field="
    with pytest.raises(ValueError, match=message):
        load_corpus(path)
    with pytest.raises(ValueError, match=rf"{where}:1: missing field 'body' \(fields: \['text'\]\)"):
        list(load_corpus(path, text_field="body", streaming=True))
    path.write_text('{"text": "ok"}\n["not", "an", "object"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{where}:2: expected a JSON object per line, got list"):
        load_corpus(path)
    write_jsonl(path, [{"text": 3}])
    with pytest.raises(ValueError, match=rf"{where}:1: field 'text' must be a string, got int"):
        load_corpus(path)


def test_streamed_errors_count_lines_from_1_like_file_errors(tmp_path):
    """Streaming reads lazily, but a bad record is named exactly as when the corpus is read eagerly: file:line,
    lines counted from 1 (blank lines included), not pyarrow's "row N" counted from 0 within a block."""
    path = tmp_path / "bad.jsonl"
    where = re.escape(str(path))
    cases = {
        '{"text": "ok"}\n\n{"text": "broken"\n{"text": "later"}\n': r"3: not valid JSON",
        '{"text": "ok"}\n{"text": "fine"}\n{"text": 3}\n': r"3: field 'text' must be a string, got int",
        '{"text": "ok"}\n{"text": "fine"}\n{"body": "x"}\n':
            r"3: missing field 'text' or 'contents' \(fields: \['body'\]\)",
    }
    for content, problem in cases.items():
        path.write_text(content, encoding="utf-8")
        for streaming in (False, True):
            with pytest.raises(ValueError, match=rf"^{where}:{problem}"):
                list(load_corpus(path, streaming=streaming))
            with pytest.raises(ValueError, match=rf"^{where}:{problem}"):
                list(load_corpus(tmp_path, streaming=streaming))  # a directory: the same file and line


def test_path_errors(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=rf"corpus path '{re.escape(str(missing))}' does not exist"):
        load_corpus(missing)
    csv = tmp_path / "c.csv"
    csv.write_text("text\nx\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"extension '\.csv'.*supported extensions: "
                       r"\['\.txt', '\.jsonl', '\.json', '\.parquet'\] \(each also \.gz\)"):
        load_corpus(csv)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"contains no files with a supported extension"):
        load_corpus(empty)
    with pytest.raises(ValueError, match=r"unsupported corpus source of type int"):
        load_corpus(3)


def test_dataset_missing_column_lists_columns():
    ds = datasets.Dataset.from_dict({"contents": ["a"], "id": [1]})
    with pytest.raises(ValueError, match=r"no 'text' column \(columns: \['contents', 'id'\]\).*text_field="):
        load_corpus(ds)
    with pytest.raises(ValueError, match=r"dataset dict with splits \['train'\]"):
        load_corpus(datasets.DatasetDict({"train": ds}))


# ----------------------------------------------------------------------------- tokenize_for_condenser


def check_blocks(tok, texts, blocks, block_size):
    """Blocks, in order, are each document's tokens cut every block_size tokens; empty docs give none."""
    i = 0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        n_blocks = math.ceil(len(ids) / block_size)
        mine = blocks[i : i + n_blocks]
        assert [t for b in mine for t in b] == ids
        assert all(len(b) == block_size for b in mine[:-1])
        assert all(0 < len(b) <= block_size for b in mine)
        i += n_blocks
    assert i == len(blocks)


def test_tokenize_for_condenser_blocks(tok, tmp_path):
    texts = ["", "short doc", " ".join(["retrieval"] * 30), "antidisestablishmentarianism " * 5, "   "]
    ds = datasets.Dataset.from_dict({"text": texts, "id": list(range(len(texts)))})
    out = tokenize_for_condenser(ds, tok, max_length=12)
    assert out.column_names == ["input_ids", "example_index"]
    assert out["example_index"] == list(range(len(out)))
    blocks = out["input_ids"]
    # 2 tokens -> [2]; 30 x 'retrieval' -> 3 x 10; 5 x 8 word pieces -> 4 x 10; empty docs -> nothing
    assert [len(b) for b in blocks] == [2] + [10] * 7
    check_blocks(tok, texts, blocks, 10)
    # no special tokens inside blocks: the collator adds them
    assert not {tok.cls_token_id, tok.sep_token_id} & {t for b in blocks for t in b}

    lazy = tokenize_for_condenser(ds.to_iterable_dataset(), tok, max_length=12)
    assert isinstance(lazy, datasets.IterableDataset)
    assert [r["input_ids"] for r in lazy] == blocks


def test_tokenize_for_condenser_on_streamed_corpus(tok, tmp_path):
    records = [{"title": f"doc {i}", "text": "dense passage retrieval " * (i * 7)} for i in range(6)]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    eager = tokenize_for_condenser(load_corpus(path), tok, max_length=16)
    lazy = tokenize_for_condenser(load_corpus(path, streaming=True), tok, max_length=16)
    assert [r["input_ids"] for r in lazy] == eager["input_ids"]
    check_blocks(tok, load_corpus(path)["text"], eager["input_ids"], 14)

    # end to end: blocks fit the collator without cropping
    collator = WholeWordMaskingCollator(tok, max_length=16)
    torch.manual_seed(0)
    batch = collator(list(eager.select(range(4))))
    assert batch["input_ids"].shape[1] <= 16
    assert batch["attention_mask"].sum(1).tolist() == [len(b) + 2 for b in eager["input_ids"][:4]]


def test_tokenize_for_condenser_validation(tok):
    ds = datasets.Dataset.from_dict({"body": ["x"]})
    with pytest.raises(ValueError, match=r"text_column 'text' is not a column.*\['body'\]"):
        tokenize_for_condenser(ds, tok)
    with pytest.raises(ValueError, match=r"max_length must be an integer >= 3.*got 2"):
        tokenize_for_condenser(ds, tok, max_length=2, text_column="body")
