"""Teacher scoring for distillation (score_teacher, resume, read_training_file, the CLI) on a tiny cross-encoder."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from dense_encoders.cli.train import score_teacher as main
from dense_encoders.data.distillation import read_training_file
from dense_encoders.data.format import DataFormatError
from dense_encoders.trainer import teacher
from dense_encoders.trainer.teacher import (
    meta_path,
    score_teacher,
)

CORPUS = {
    "d1": {"title": "Apples", "text": "apples are red fruit grown on trees"},
    "d2": {"title": "", "text": "the capital of france is paris"},
    "d3": {"title": "Rivers", "text": "the nile is a long river in africa"},
    "d4": {"title": "", "text": "bananas are yellow and sweet"},
    "d5": {"title": "Computers", "text": "a computer runs programs written by people"},
    "d6": {"title": "", "text": "paris hosts the louvre museum with famous paintings"},
    "d7": {"title": "Music", "text": "a piano has eighty eight keys"},
}
QUERIES = {
    "q1": "what colour are apples",
    "q2": "where is the louvre",
    "q3": "longest river in africa",
    "q4": "how many keys does a piano have",
}
# First-stage scores; each query has 5 documents, so top_k=4 drops one; q1 has a tie (d2, d3).
RUN = {
    "q1": {"d1": 9.0, "d3": 5.0, "d2": 5.0, "d4": 4.0, "d5": 1.0},
    "q2": {"d6": 7.0, "d2": 6.5, "d7": 3.0, "d1": 2.0, "d3": 0.5},
    "q3": {"d3": 8.0, "d5": 4.0, "d1": 3.0, "d7": 2.5, "d2": 2.0},
}
TOP_K = 4


def expected_candidates(run, top_k):
    """Top-k by descending first-stage score, ties by document id (written out independently)."""
    return {
        query_id: [doc for doc, _ in sorted(documents.items(), key=lambda item: (-item[1], item[0]))][:top_k]
        for query_id, documents in run.items()
    }


def doc_text(doc_id):
    document = CORPUS[doc_id]
    return f"{document['title']} {document['text']}" if document["title"] else document["text"]


def _build(tok, folder, num_labels, seed):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
        initializer_range=0.5,  # spread-out logits, so the teacher's order is not the run's order by accident
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def teacher_setup(tok, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    model = _build(tok, folder, num_labels=1, seed=0)

    def reference_scores(pairs):
        with torch.no_grad():
            encoded = tok([q for q, _ in pairs], [d for _, d in pairs], truncation=True, padding=True,
                          return_tensors="pt")
            return model(**encoded).logits[:, 0].tolist()

    return folder, reference_scores


@pytest.fixture(scope="module")
def cross_encoder(teacher_setup):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(teacher_setup[0]))


@pytest.fixture(scope="module")
def expected_lines(teacher_setup):
    """The output an uninterrupted run must give, from the HF model's logits computed directly."""
    _, reference_scores = teacher_setup
    lines = []
    for query_id, doc_ids in expected_candidates(RUN, TOP_K).items():
        scores = reference_scores([(QUERIES[query_id], doc_text(doc_id)) for doc_id in doc_ids])
        ranked = sorted(zip(doc_ids, scores), key=lambda item: (-item[1], item[0]))
        lines.append(
            {
                "query_id": query_id,
                "query": QUERIES[query_id],
                "document_ids": [doc for doc, _ in ranked],
                "scores": [score for _, score in ranked],
            }
        )
    return lines


def write_run(path):
    """RUN as a TREC run file (qid Q0 docid rank score tag)."""
    rows = [
        f"{query_id} Q0 {doc_id} {rank} {score} bm25\n"
        for query_id, documents in RUN.items()
        for rank, (doc_id, score) in enumerate(sorted(documents.items(), key=lambda i: -i[1]), start=1)
    ]
    path.write_text("".join(rows))
    return path


def read_lines(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def assert_lines_equal(actual, expected, texts=False):
    assert [line["query_id"] for line in actual] == [line["query_id"] for line in expected]
    for got, want in zip(actual, expected):
        assert got["query"] == want["query"]
        assert got["document_ids"] == want["document_ids"]
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)
        assert got["scores"] == sorted(got["scores"], reverse=True)
        if texts:
            assert got["documents"] == [doc_text(doc) for doc in want["document_ids"]]
        else:
            assert "documents" not in got


class SimulatedInterruption(Exception):
    pass


class CountingPredict:
    """Wraps a CrossEncoder's predict: records batch sizes, the output's line count at each call, fails on demand."""

    def __init__(self, model, output=None, fail_on_call=None):
        self.original = type(model).predict.__get__(model)  # the class's, not an earlier wrapper
        self.output, self.fail_on_call = output, fail_on_call
        self.batch_sizes, self.lines_before_call = [], []

    def __call__(self, pairs, **kwargs):
        if self.fail_on_call is not None and len(self.batch_sizes) + 1 == self.fail_on_call:
            raise SimulatedInterruption("simulated interruption")
        self.batch_sizes.append(len(pairs))
        if self.output is not None:
            self.lines_before_call.append(len(self.output.read_text().splitlines()) if self.output.exists() else 0)
        assert isinstance(kwargs["activation_fn"], torch.nn.Identity)
        return self.original(pairs, **kwargs)

    @property
    def pairs(self):
        return sum(self.batch_sizes)


def test_reference_is_informative(expected_lines):
    scores = [s for line in expected_lines for s in line["scores"]]
    assert all(math.isfinite(s) for s in scores) and np.std(scores) > 0.1
    # raw logits, not sigmoid probabilities
    assert min(scores) < 0 or max(scores) > 1
    # the teacher reorders at least one query relative to the first stage
    assert any(line["document_ids"] != expected_candidates(RUN, TOP_K)[line["query_id"]] for line in expected_lines)


@pytest.mark.numerics
@pytest.mark.parametrize("batch_size, expected_batches",
                         [(1, [1] * 12), (3, [3, 3, 3, 3]), (5, [5, 5, 2]), (32, [12])])
def test_score_teacher_matches_reference(cross_encoder, expected_lines, tmp_path, monkeypatch, batch_size,
                                         expected_batches):
    output = tmp_path / "out" / "teacher.jsonl"
    spy = CountingPredict(cross_encoder, output)
    monkeypatch.setattr(cross_encoder, "predict", spy)
    stats = score_teacher(
        cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, batch_size=batch_size,
        show_progress_bar=False,
    )
    assert stats == {"queries_written": 3, "queries_skipped_already_done": 0, "pairs_scored": 12}
    assert_lines_equal(read_lines(output), expected_lines)
    # batches are filled across queries
    assert spy.batch_sizes == expected_batches
    if batch_size == 3:
        # q1 is complete after batch 2, q2 after batch 3: lines appear as soon as a query is done
        assert spy.lines_before_call == [0, 0, 1, 2]
    settings = json.loads(meta_path(output).read_text())
    assert settings["top_k"] == TOP_K and settings["include_texts"] is False
    assert settings["cross_encoder"] == str(Path(cross_encoder.model.name_or_path).resolve())


@pytest.mark.numerics
def test_include_texts_and_path_inputs(teacher_setup, expected_lines, tmp_path):
    folder, _ = teacher_setup
    run_file = write_run(tmp_path / "run.trec")
    output = tmp_path / "teacher.jsonl"
    stats = score_teacher(
        str(folder), run_file, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, batch_size=3,
        include_texts=True, show_progress_bar=False,
    )
    assert stats["pairs_scored"] == 12
    assert_lines_equal(read_lines(output), expected_lines, texts=True)
    settings = json.loads(meta_path(output).read_text())
    assert settings["run"] == str(run_file.resolve()) and settings["include_texts"] is True
    # the loader reads it back, texts inline and through the corpus
    records = read_training_file(output)
    assert [r["document_ids"] for r in records] == [line["document_ids"] for line in expected_lines]
    assert records[0]["documents"] == [doc_text(d) for d in expected_lines[0]["document_ids"]]
    assert records == read_training_file(output, corpus=CORPUS)


@pytest.mark.numerics
def test_resume_after_interruption(cross_encoder, expected_lines, tmp_path, monkeypatch):
    output = tmp_path / "teacher.jsonl"
    failing = CountingPredict(cross_encoder, fail_on_call=3)
    monkeypatch.setattr(cross_encoder, "predict", failing)
    with pytest.raises(SimulatedInterruption):
        score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, batch_size=3,
                      show_progress_bar=False)
    # 6 pairs scored: only q1 (4 pairs) is complete and written
    assert failing.pairs == 6
    assert [line["query_id"] for line in read_lines(output)] == ["q1"]

    progress_bars = []

    class RecordingTqdm:
        def __init__(self, *args, **kwargs):
            progress_bars.append(kwargs)
            self.n = kwargs.get("initial", 0)

        def update(self, n):
            self.n += n

        def close(self):
            progress_bars[-1]["final"] = self.n

    monkeypatch.setattr(teacher, "tqdm", RecordingTqdm)
    second = CountingPredict(cross_encoder)
    monkeypatch.setattr(cross_encoder, "predict", second)
    stats = score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, batch_size=3,
                          show_progress_bar=True)
    assert stats == {"queries_written": 2, "queries_skipped_already_done": 1, "pairs_scored": 8}
    assert second.pairs == 8
    assert progress_bars[0]["total"] == 12 and progress_bars[0]["initial"] == 4 and progress_bars[0]["final"] == 12
    assert_lines_equal(read_lines(output), expected_lines)

    # a third run has nothing left to do and leaves the file as it is
    before = output.read_bytes()
    third = CountingPredict(cross_encoder)
    monkeypatch.setattr(cross_encoder, "predict", third)
    stats = score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K,
                          show_progress_bar=False)
    assert stats == {"queries_written": 0, "queries_skipped_already_done": 3, "pairs_scored": 0}
    assert third.pairs == 0 and output.read_bytes() == before


@pytest.mark.numerics
@pytest.mark.parametrize("complete_lines", [0, 1, 2])
def test_resume_truncates_partial_last_line(cross_encoder, expected_lines, tmp_path, monkeypatch, complete_lines):
    full = tmp_path / "full.jsonl"
    score_teacher(cross_encoder, RUN, full, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, show_progress_bar=False)
    lines = full.read_bytes().splitlines(keepends=True)
    output = tmp_path / "partial.jsonl"
    partial = lines[complete_lines][: len(lines[complete_lines]) // 2]
    output.write_bytes(b"".join(lines[:complete_lines]) + partial)
    meta_path(output).write_bytes(meta_path(full).read_bytes())

    spy = CountingPredict(cross_encoder)
    monkeypatch.setattr(cross_encoder, "predict", spy)
    stats = score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, batch_size=3,
                          show_progress_bar=False)
    assert stats["queries_skipped_already_done"] == complete_lines
    assert stats["queries_written"] == 3 - complete_lines
    assert stats["pairs_scored"] == spy.pairs == 4 * (3 - complete_lines)
    result = read_lines(output)
    assert len({line["query_id"] for line in result}) == len(result) == 3
    assert_lines_equal(result, expected_lines)
    assert output.read_bytes()[: sum(map(len, lines[:complete_lines]))] == b"".join(lines[:complete_lines])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["full.jsonl", "full.jsonl.meta.json", "partial.jsonl", "partial.jsonl.meta.json"]
    )  # no temporary files left behind


def test_malformed_existing_line(cross_encoder, tmp_path):
    output = tmp_path / "teacher.jsonl"
    score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, show_progress_bar=False)
    lines = output.read_text().splitlines(keepends=True)
    output.write_text(lines[0] + "{not json\n")
    before = output.read_bytes()
    with pytest.raises(DataFormatError, match=re.escape(f"{output}:2:")):
        score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, show_progress_bar=False)
    assert output.read_bytes() == before


@pytest.mark.parametrize(
    "change",
    ["top_k", "include_texts", "run", "cross_encoder"],
)
def test_changed_settings_refused(cross_encoder, teacher_setup, tok, tmp_path, change):
    output = tmp_path / "teacher.jsonl"
    score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, show_progress_bar=False)
    lines = output.read_bytes().splitlines(keepends=True)
    output.write_bytes(lines[0] + lines[1][:10])  # interrupted, with a partial line that must stay untouched
    before = output.read_bytes()
    kwargs = {"top_k": TOP_K, "include_texts": False}
    model, run = cross_encoder, RUN
    if change == "top_k":
        kwargs["top_k"] = 3
    elif change == "include_texts":
        kwargs["include_texts"] = True
    elif change == "run":
        run = {**RUN, "q3": {**RUN["q3"], "d4": 100.0}}
    else:
        other = tmp_path / "other-cross-encoder"
        _build(tok, other, num_labels=1, seed=1)
        model = str(other)
    with pytest.raises(ValueError, match="new --output"):
        score_teacher(model, run, output, queries=QUERIES, corpus=CORPUS, show_progress_bar=False, **kwargs)
    assert output.read_bytes() == before
    # the same settings, given as a path instead of an instance, resume fine
    stats = score_teacher(str(teacher_setup[0]), RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K,
                          show_progress_bar=False)
    assert stats["queries_skipped_already_done"] == 1 and stats["queries_written"] == 2


def test_existing_output_without_settings_refused(cross_encoder, tmp_path):
    output = tmp_path / "teacher.jsonl"
    output.write_text('{"query_id": "q1", "document_ids": [], "scores": []}\n')
    with pytest.raises(ValueError, match="no settings file"):
        score_teacher(cross_encoder, RUN, output, queries=QUERIES, corpus=CORPUS, top_k=TOP_K, show_progress_bar=False)


def test_missing_query_or_document(cross_encoder, tmp_path):
    output = tmp_path / "teacher.jsonl"
    with pytest.raises(ValueError, match="'q9'"):
        score_teacher(cross_encoder, {**RUN, "q9": {"d1": 1.0}}, output, queries=QUERIES, corpus=CORPUS,
                      show_progress_bar=False)
    with pytest.raises(ValueError, match="'d99'"):
        score_teacher(cross_encoder, {**RUN, "q4": {"d7": 2.0, "d99": 1.0}}, output, queries=QUERIES, corpus=CORPUS,
                      show_progress_bar=False)
    assert not output.exists() and not meta_path(output).exists()
    # a document beyond top_k is never needed
    stats = score_teacher(cross_encoder, {"q4": {"d7": 2.0, "d99": 1.0}}, output, queries=QUERIES, corpus=CORPUS,
                          top_k=1, show_progress_bar=False)
    assert stats["pairs_scored"] == 1


def test_more_than_one_label_refused(tok, tmp_path, monkeypatch):
    from sentence_transformers import CrossEncoder

    folder = tmp_path / "two-labels"
    _build(tok, folder, num_labels=2, seed=0)
    with pytest.raises(ValueError, match="num_labels=1"):
        score_teacher(str(folder), RUN, tmp_path / "t.jsonl", queries=QUERIES, corpus=CORPUS, show_progress_bar=False)
    # refused before anything is scored
    model = CrossEncoder(str(folder))
    spy = CountingPredict(model)
    monkeypatch.setattr(model, "predict", spy)
    with pytest.raises(ValueError, match="num_labels=1"):
        score_teacher(model, RUN, tmp_path / "u.jsonl", queries=QUERIES, corpus=CORPUS, show_progress_bar=False)
    assert spy.batch_sizes == []


# --------------------------------------------------------------------------------------------
# read_training_file
# --------------------------------------------------------------------------------------------


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


GOOD_IDS = {"query_id": "q1", "query": "what colour are apples", "document_ids": ["d1", "d4"], "scores": [3.5, -1]}


def test_read_training_file_ids_and_texts(tmp_path):
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [GOOD_IDS, {"query_id": "q3", "document_ids": ["d3"], "scores": [2]}, ""],
    )
    records = read_training_file(path, corpus=CORPUS, queries=QUERIES)
    assert records == [
        {"query_id": "q1", "query": "what colour are apples", "document_ids": ["d1", "d4"],
         "documents": ["Apples apples are red fruit grown on trees", "bananas are yellow and sweet"],
         "scores": [3.5, -1.0], "relevance": None, "line": 1},
        {"query_id": "q3", "query": "longest river in africa", "document_ids": ["d3"],
         "documents": ["Rivers the nile is a long river in africa"], "scores": [2.0], "relevance": None,
         "line": 2},
    ]
    assert all(isinstance(s, float) for r in records for s in r["scores"])

    texts = write_jsonl(tmp_path / "texts.jsonl",
                        [{"query": "q text", "documents": ["a", "b", "c"], "scores": [1, 2, 0.5]}])
    assert read_training_file(texts) == [
        {"query_id": None, "query": "q text", "document_ids": None, "documents": ["a", "b", "c"],
         "scores": [1.0, 2.0, 0.5], "relevance": None, "line": 1}
    ]


@pytest.mark.parametrize(
    "bad, problem",
    [
        ({**GOOD_IDS, "scores": [1.0, 2.0, 3.0]}, "3 scores for 2 documents"),
        ({**GOOD_IDS, "scores": [1.0]}, "1 scores for 2 documents"),
        ('{"query": "x", "documents": ["a", "b"], "scores": [1.0, NaN]}', "score 2 is NaN"),
        ('{"query": "x", "documents": ["a", "b"], "scores": [Infinity, 1.0]}', "score 1 is inf"),
        ('{"query": "x", "documents": ["a"], "scores": [-Infinity]}', "score 1 is -inf"),
        ({**GOOD_IDS, "scores": [1.0, "2"]}, "score 2 is not a number"),
        ({**GOOD_IDS, "document_ids": ["d1", "d404"]}, "document id 'd404' is not in the corpus"),
        ('{"query": "x", "documents": ["a"], "scores": [1.0]', "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ({"query": "x", "documents": [], "scores": []}, "no documents"),
        ({"query": "x", "document_ids": [], "scores": []}, "no documents"),
        ({"query": "x", "documents": ["a"]}, "missing field 'scores'"),
        ({"query": "x", "scores": [1.0]}, "needs 'documents' texts or 'document_ids'"),
        ({"query_id": "q404", "document_ids": ["d1"], "scores": [1.0]}, "query_id 'q404' is not in the queries"),
        ({"document_ids": ["d1"], "scores": [1.0]}, "needs 'query' text or a 'query_id'"),
        ({"query": "x", "document_ids": ["d1"], "documents": ["a", "b"], "scores": [1, 2]},
         "1 document_ids for 2 documents"),
    ],
)
def test_read_training_file_rejects(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "train.jsonl", [GOOD_IDS, bad, GOOD_IDS])
    with pytest.raises(DataFormatError, match=re.escape(f"{path}:2: {problem}")):
        read_training_file(path, corpus=CORPUS, queries=QUERIES)


def test_read_training_file_needs_corpus_and_queries_for_ids(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [GOOD_IDS])
    with pytest.raises(DataFormatError, match=re.escape(f"{path}:1: no 'documents' texts, and no corpus")):
        read_training_file(path)
    only_id = write_jsonl(tmp_path / "id.jsonl", [{"query_id": "q1", "documents": ["a"], "scores": [1]}])
    with pytest.raises(DataFormatError, match=re.escape(f"{only_id}:1: no 'query' text")):
        read_training_file(only_id)
    with pytest.raises(FileNotFoundError):
        read_training_file(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="no training examples"):
        read_training_file(write_jsonl(tmp_path / "empty.jsonl", []))


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def write_inputs(folder):
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", [{"_id": d, **doc} for d, doc in CORPUS.items()])
    write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": text} for q, text in QUERIES.items()])
    write_run(folder / "run.trec")


@pytest.mark.numerics
def test_main_with_queries_and_corpus(teacher_setup, expected_lines, tmp_path, capsys):
    write_inputs(tmp_path)
    output = tmp_path / "teacher.jsonl"
    code = main([str(teacher_setup[0]), "--run", str(tmp_path / "run.trec"),
                 "--queries", str(tmp_path / "queries.jsonl"), "--corpus", str(tmp_path / "corpus.jsonl"),
                 "--output", str(output), "--top-k", str(TOP_K),
                 "--batch-size", "5", "--include-texts", "--no-progress"])
    assert code == 0
    assert_lines_equal(read_lines(output), expected_lines, texts=True)
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "3 queries" in summary[0] and "12 pairs" in summary[0]


@pytest.mark.numerics
def test_main_with_beir_folder(teacher_setup, expected_lines, tmp_path, capsys):
    beir = tmp_path / "beir"
    write_inputs(beir)
    (beir / "qrels").mkdir()
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td6\t1\nq3\td3\t1\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td7\t1\n")
    output = tmp_path / "teacher.jsonl"
    argv = [str(teacher_setup[0]), "--run", str(beir / "run.trec"), "--data", str(beir), "--output", str(output),
            "--top-k", str(TOP_K), "--no-progress"]
    assert main(argv) == 0
    assert_lines_equal(read_lines(output), expected_lines)
    # the run's queries are not judged in the test split
    with pytest.raises(ValueError, match="'q1'"):
        main([str(teacher_setup[0]), "--run", str(beir / "run.trec"), "--data", str(beir), "--split", "test",
              "--output", str(tmp_path / "other.jsonl"), "--no-progress"])
    # rerunning the finished command resumes with nothing to do
    capsys.readouterr()
    assert main(argv) == 0
    assert "0 queries" in capsys.readouterr().out and len(read_lines(output)) == 3


def test_main_argument_errors(tmp_path, capsys):
    # checked by TeacherScoringSettings.__post_init__ (dense-encoders prints them as one line, exit code 2)
    with pytest.raises(ValueError, match=r"^give --data BEIR_FOLDER, or both --queries and --corpus$"):
        main(["m", "--run", "r", "--output", "o"])
    with pytest.raises(ValueError, match=r"^give either --data or --queries with --corpus, not both$"):
        main(["m", "--run", "r", "--output", "o", "--data", "x", "--queries", "q", "--corpus", "c"])
    with pytest.raises(ValueError, match=r"^argument --top-k: must be a positive integer, got 0$"):
        main(["m", "--run", "r", "--output", "o", "--data", "x", "--top-k", "0"])
    with pytest.raises(SystemExit) as error:
        main(["m", "--output", "o", "--data", "x"])  # --run is required: argparse's one-line error
    assert error.value.code == 2 and "the following arguments are required: --run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "score-teacher" in capsys.readouterr().out


def test_run_to_training_file_uses_the_run_scores(tmp_path):
    from dense_encoders.data.distillation import run_to_training_file

    run = {"q1": {"d4": 0.2, "d1": 0.9, "d3": 0.9}, "q3": {"d3": -0.5}}
    output = tmp_path / "out" / "train.jsonl"
    assert run_to_training_file(run, output, queries=QUERIES, top_k=2) == 2
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert lines == [
        {"query_id": "q1", "query": QUERIES["q1"], "document_ids": ["d1", "d3"], "scores": [0.9, 0.9]},
        {"query_id": "q3", "query": QUERIES["q3"], "document_ids": ["d3"], "scores": [-0.5]},
    ]
    assert [r["documents"] for r in read_training_file(output, corpus=CORPUS)][1] == [doc_text("d3")]
    with pytest.raises(ValueError, match="1 run queries are not in the queries"):
        run_to_training_file({"q404": {"d1": 1.0}}, output, queries=QUERIES)


# --------------------------------------------------------------------------------------------
# A bi-encoder as the teacher (docs/distillation.md: "or a bi-encoder's scores")
# --------------------------------------------------------------------------------------------


def _bi_encoder_teacher(kind, tok, folder):
    """A tiny bi-encoder saved in ``folder`` and its scores computed by hand: a Condenser (last-layer CLS, dot
    product), or a BERT with sentence-transformers files for mean pooling and cosine, or a plain BERT (to be given
    ``--pooling mean``; sentence-transformers' default similarity, cosine)."""
    import torch.nn.functional as F
    from conftest import tiny_bert_config, tiny_condenser_config
    from transformers import BertModel

    from dense_encoders import CondenserModel
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    torch.manual_seed(0)
    if kind == "condenser":
        model = CondenserModel(tiny_condenser_config(vocab_size=len(tok), initializer_range=0.5)).eval()
    else:
        model = BertModel(tiny_bert_config(tok, initializer_range=0.5), add_pooling_layer=False).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if kind == "mean-pooling-cosine":
        write_sentence_transformers_files(folder, pooling="mean", similarity="cosine")

    def vectors(texts):
        encoded = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**encoded).last_hidden_state
        if kind == "condenser":
            return states[:, 0]
        mask = encoded["attention_mask"][:, :, None].to(states.dtype)
        return F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)

    return lambda query, documents: (vectors(documents) @ vectors([query])[0]).tolist()


@pytest.mark.numerics
@pytest.mark.parametrize("kind", ["condenser", "mean-pooling-cosine", "plain-bert"])
def test_a_bi_encoder_teacher_scores_with_the_similarity_it_declares(kind, tok, tmp_path, capsys):
    """Before: refused as "not a cross-encoder"."""
    reference = _bi_encoder_teacher(kind, tok, tmp_path / "teacher")
    write_inputs(tmp_path)
    output = tmp_path / "teacher.jsonl"
    assert main([str(tmp_path / "teacher"), "--run", str(tmp_path / "run.trec"), "--queries",
                 str(tmp_path / "queries.jsonl"), "--corpus", str(tmp_path / "corpus.jsonl"), "--output", str(output),
                 "--top-k", str(TOP_K), "--batch-size", "3", "--no-progress",
                 *(["--pooling", "mean"] if kind == "plain-bert" else [])]) == 0
    lines = read_lines(output)
    candidates = expected_candidates(RUN, TOP_K)
    assert [line["query_id"] for line in lines] == list(candidates)
    for line in lines:
        expected = dict(zip(candidates[line["query_id"]],
                            reference(QUERIES[line["query_id"]], [doc_text(d) for d in candidates[line["query_id"]]])))
        assert sorted(line["document_ids"]) == sorted(expected)
        np.testing.assert_allclose(line["scores"], [expected[d] for d in line["document_ids"]], rtol=1e-5, atol=1e-5)
        assert line["scores"] == sorted(line["scores"], reverse=True)
    assert max(abs(s) for line in lines for s in line["scores"]) > (2 if kind == "condenser" else 0.1)
    # the record a distillation reads says what kind of model scored, by the folder's name only
    from dense_encoders.hub.cards import _teacher
    from dense_encoders.trainer.distillation import teacher_reference

    teacher = teacher_reference(output)
    assert teacher["kind"] == "bi-encoder" and teacher["name"] == "teacher" and teacher["top_k"] == TOP_K
    record = {"teacher": teacher["name"], "teacher_top_k": TOP_K, "teacher_kind": teacher["kind"], "sources": {
        "teacher": {key: teacher[key] for key in ("name", "hub", "revision")}}}
    assert _teacher(record) == (f"the bi-encoder `teacher` (a local folder), scoring the top {TOP_K} "
                                "of a first-stage run")


def test_pooling_is_for_a_bi_encoder_teacher(teacher_setup, tmp_path):
    write_inputs(tmp_path)
    with pytest.raises(ValueError, match="applies to a bi-encoder teacher"):
        main([str(teacher_setup[0]), "--run", str(tmp_path / "run.trec"), "--queries", str(tmp_path / "queries.jsonl"),
              "--corpus", str(tmp_path / "corpus.jsonl"), "--output", str(tmp_path / "t.jsonl"), "--pooling", "cls"])


def test_distill_on_ids_without_a_corpus_names_the_flag(condenser_folder, tmp_path, capsys):
    """recipes.md's M3SE command lacked --corpus; score-teacher writes ids, so the error now says what to pass."""
    from dense_encoders.cli import main as cli_main

    path = write_jsonl(tmp_path / "train.jsonl", [GOOD_IDS])
    code = cli_main(["distill", "--student", str(condenser_folder), "--train-file", str(path),
                     "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no corpus was given" in err and "--corpus" in err and "--include-texts" in err
