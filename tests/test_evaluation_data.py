"""BEIR folders, TREC qrels / runs and pairs files: contents and file:line errors."""

from __future__ import annotations

import json

import pytest

from dense_encoders.data.format import DataFormatError
from dense_encoders.data.retrieval import (
    load_beir,
    load_dataset_for_evaluation,
    load_pairs,
    read_beir_qrels,
    read_trec_qrels,
)
from dense_encoders.data.runs import read_trec_run, write_trec_run


def write_beir(folder, corpus, queries, qrels, split="test"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (folder / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


@pytest.fixture
def beir_folder(tmp_path):
    corpus = [
        {"_id": "d1", "title": "  Alpha  ", "text": " first text ", "metadata": {}},
        {"_id": "d2", "title": "", "text": "second text"},
        {"_id": 3, "text": "third text"},  # numeric id, no title
    ]
    queries = [{"_id": "q1", "text": "one?"}, {"_id": "q2", "text": "two?"}, {"_id": "q3", "text": "unjudged"}]
    qrels = [("q1", "d1", 1), ("q1", "3", 2), ("q2", "d2", 0), ("q2", "d9", 1)]
    return write_beir(tmp_path / "tiny", corpus, queries, qrels)


def test_load_beir_contents(beir_folder):
    dataset = load_beir(beir_folder)
    assert dataset.name == "tiny" and dataset.split == "test"
    assert dataset.document_ids() == ["d1", "d2", "3"]
    # BEIR / MTEB text convention: "title text", stripped; the text alone without a title
    assert dataset.document_texts() == ["Alpha first text", "second text", "third text"]
    assert dataset.queries == {"q1": "one?", "q2": "two?"}  # q3 has no judgements in this split
    assert dataset.qrels == {"q1": {"d1": 1, "3": 2}, "q2": {"d2": 0, "d9": 1}}
    assert load_dataset_for_evaluation(beir_folder).qrels == dataset.qrels


def test_missing_split_names_the_available_ones(beir_folder):
    with pytest.raises(FileNotFoundError, match=r"qrels/dev.tsv.*splits here: \['test'\]"):
        load_beir(beir_folder, split="dev")


def test_qrels_query_missing_from_queries(tmp_path):
    folder = write_beir(tmp_path / "x", [{"_id": "d1", "text": "t"}], [{"_id": "q1", "text": "q"}], [("q7", "d1", 1)])
    with pytest.raises(ValueError, match=r"judges 1 queries that queries.jsonl lacks.*q7"):
        load_beir(folder)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"corpus.jsonl:2: not valid JSON"),
        ('["a list"]', r"corpus.jsonl:2: expected a JSON object"),
        ('{"_id": "d2"}', r"corpus.jsonl:2: missing field 'text'"),
        ('{"text": "no id"}', r"corpus.jsonl:2: missing field '_id'"),
        ('{"_id": "d1", "text": "again"}', r"corpus.jsonl:2: duplicate document id 'd1'"),
        ('{"_id": "d2", "text": ["a"]}', r"corpus.jsonl:2: field 'text' must be a string"),
    ],
)
def test_malformed_corpus_line_names_file_and_line(beir_folder, line, message):
    path = beir_folder / "corpus.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(1, line)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=message) as caught:
        load_beir(beir_folder)
    assert caught.value.line_number == 2 and caught.value.path.endswith("corpus.jsonl")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("q1\td1", r"test.tsv:3: expected 3 tab-separated columns"),
        ("q1\td1\thigh", r"test.tsv:3: relevance 'high' is not a number"),
        ("q1\td1\t1.5", r"test.tsv:3: relevance '1.5' is not an integer grade"),
    ],
)
def test_malformed_qrels_line(tmp_path, row, message):
    path = tmp_path / "test.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td0\t1\n{row}\n")
    with pytest.raises(DataFormatError, match=message):
        read_beir_qrels(path)


def test_qrels_without_header_and_with_crlf(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_bytes(b"q1\td1\t1\r\nq1\td2\t0\r\nq2\td1\t2\r\n")
    assert read_beir_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}


def test_trec_qrels_and_run_round_trip(tmp_path):
    qrels_path = tmp_path / "qrels.txt"
    qrels_path.write_text("101 0 docA 1\n101 0 docB 0\n102 0 docC 3\n")
    assert read_trec_qrels(qrels_path) == {"101": {"docA": 1, "docB": 0}, "102": {"docC": 3}}

    run = {"101": {"docB": 0.5, "docA": 2.0, "docC": 0.5}, "102": {"docC": -1.25}}
    path = write_trec_run(run, tmp_path / "runs" / "run.trec", tag="mine")
    lines = path.read_text().splitlines()
    # descending score, ties by document id, ranks from 1
    assert lines == [
        "101 Q0 docA 1 2.000000 mine",
        "101 Q0 docB 2 0.500000 mine",
        "101 Q0 docC 3 0.500000 mine",
        "102 Q0 docC 1 -1.250000 mine",
    ]
    assert read_trec_run(path) == run


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1 Q0 d1 1 0.5 tag\n1 Q0 d2 2 0.4\n", r"run.trec:2: expected 6 columns"),
        ("1 Q0 d1 1 high tag\n", r"run.trec:1: rank '1' and score 'high' must be numbers"),
        ("1 Q0 d1 1 0.5 t\n1 Q0 d1 2 0.4 t\n", r"run.trec:2: document 'd1' appears twice"),
    ],
)
def test_malformed_run_line(tmp_path, content, message):
    path = tmp_path / "run.trec"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message):
        read_trec_run(path)


def test_trec_qrels_wrong_columns(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("1 0 d1 1\n1 d2 1\n")
    with pytest.raises(DataFormatError, match=r"qrels.txt:2: expected 4 columns"):
        read_trec_qrels(path)


def test_pairs_tsv_and_jsonl(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("what is a cat\ta small feline\nwhat is a cat\ta pet\nwhat is a dog\ta pet\n")
    dataset = load_pairs(tsv)
    assert dataset.queries == {"q0": "what is a cat", "q1": "what is a dog"}
    assert dataset.document_texts() == ["a small feline", "a pet"]  # distinct positives only
    assert dataset.qrels == {"q0": {"d0": 1, "d1": 1}, "q1": {"d1": 1}}

    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        json.dumps({"query": "what is a cat", "positive": "a small feline"}) + "\n"
        + json.dumps({"anchor": "what is a dog", "positive": "a pet"}) + "\n"
    )
    assert load_pairs(jsonl).qrels == {"q0": {"d0": 1}, "q1": {"d1": 1}}
    assert load_dataset_for_evaluation(jsonl).name == "pairs"


def test_pairs_errors(tmp_path):
    bad = tmp_path / "pairs.tsv"
    bad.write_text("q\tp\nonly one column\n")
    with pytest.raises(DataFormatError, match=r"pairs.tsv:2: expected 2 tab-separated columns"):
        load_pairs(bad)
    empty_positive = tmp_path / "empty.tsv"
    empty_positive.write_text("q\t \n")
    with pytest.raises(DataFormatError, match=r"empty.tsv:1: empty query or positive"):
        load_pairs(empty_positive)
    other = tmp_path / "pairs.csv"
    other.write_text("q,p\n")
    with pytest.raises(ValueError, match=r"\.tsv .* or \.jsonl"):
        load_pairs(other)
    with pytest.raises(FileNotFoundError, match="BEIR folder"):
        load_dataset_for_evaluation(tmp_path / "nothing")
