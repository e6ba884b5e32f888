"""Evaluation and training inputs that would give silently wrong numbers (or a traceback) are
refused before any model loads, with one line naming the file:line or the flag and the fix (exit code 2);
``--relevance-level`` sets the grade binary measures count as relevant."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dense_encoders.cli import main
from dense_encoders.data.format import DataFormatError
from dense_encoders.data.retrieval import load_beir, read_queries_jsonl
from dense_encoders.evaluation import evaluate_retrieval
from dense_encoders.evaluation.harness import load_results
from dense_encoders.evaluation.metrics import compute_metrics


def write_beir(folder: Path, corpus: list[dict], queries: list[dict], qrels: list[tuple[str, str, int]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels").mkdir()
    rows = "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


CORPUS = [
    {"_id": "d0", "title": "Eiffel Tower", "text": "The tower in Paris was completed in 1889."},
    {"_id": "d1", "title": "", "text": "Photosynthesis turns sunlight into chemical energy in plants."},
    {"_id": "d2", "title": "", "text": "Mitochondria make most of the ATP of a cell."},
]
QUERIES = [
    {"_id": "q0", "text": "When was the Eiffel Tower finished?"},
    {"_id": "q1", "text": "how do plants turn sunlight into energy"},
    {"_id": "q2", "text": "which organelle makes ATP"},
]
QRELS = [("q0", "d0", 1), ("q1", "d1", 1), ("q2", "d2", 1)]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------- blank queries and documents


def test_a_blank_query_is_an_error_with_file_and_line(minilm_path, tmp_path, capsys):
    queries = QUERIES[:1] + [{"_id": "q1", "text": "   "}] + QUERIES[2:]
    folder = write_beir(tmp_path / "beir", CORPUS, queries, QRELS)
    with pytest.raises(DataFormatError, match=r"queries.jsonl:2: query 'q1' has an empty or blank text"):
        read_queries_jsonl(folder / "queries.jsonl")
    # before any model is loaded
    code, _, err = run_cli(["evaluate", str(minilm_path), str(folder), "--no-progress"], capsys)
    assert code == 2
    assert "queries.jsonl:2: query 'q1' has an empty or blank text" in err


def test_an_empty_query_string_is_an_error_too(tmp_path):
    queries = [{"_id": "q0", "text": ""}] + QUERIES[1:]
    folder = write_beir(tmp_path / "beir", CORPUS, queries, QRELS)
    with pytest.raises(ValueError, match=r"queries.jsonl:1: query 'q0' has an empty or blank text"):
        evaluate_retrieval("unused", folder)


def test_blank_documents_are_an_error_unless_allowed(minilm_path, tmp_path, capsys, caplog):
    corpus = CORPUS + [{"_id": "d3", "title": " ", "text": ""}, {"_id": "d4", "text": "\t"}]
    folder = write_beir(tmp_path / "beir", corpus, QUERIES, QRELS)
    code, _, err = run_cli(["evaluate", str(minilm_path), str(folder), "--no-progress"], capsys)
    assert code == 2
    assert "corpus.jsonl:4: 2 documents in" in err and "have no text (first at line 4)" in err
    assert "--allow-empty-documents" in err
    with pytest.raises(DataFormatError, match="2 documents in .* have no text"):
        load_beir(folder)
    with caplog.at_level("WARNING", logger="dense_encoders.data.retrieval"):
        dataset = load_beir(folder, allow_empty_documents=True)
    assert set(dataset.corpus) == {"d0", "d1", "d2", "d3", "d4"}
    assert "2 documents in" in caplog.text and "(first at line 4)" in caplog.text


def test_allowed_blank_documents_are_evaluated(minilm_path, tmp_path, capsys):
    corpus = CORPUS + [{"_id": "d3", "title": "", "text": " "}]
    folder = write_beir(tmp_path / "beir", corpus, QUERIES, QRELS)
    results = evaluate_retrieval(minilm_path, folder, k=4, allow_empty_documents=True, no_progress=True)
    assert results.dataset["num_documents"] == 4
    assert results.metrics["mrr@10"] == pytest.approx(1.0)
    code, out, _ = run_cli(["evaluate", str(minilm_path), str(folder), "--k", "4", "--no-progress",
                            "--allow-empty-documents"], capsys)
    assert code == 0 and "| retrieve | 1.0000 | 1.0000 |" in out


# ---------------------------------------------------------------------------- empty corpus


def test_an_empty_corpus_is_named_before_any_missing_document_warning(minilm_path, tmp_path, capsys, caplog):
    folder = write_beir(tmp_path / "beir", [], QUERIES, QRELS)
    with caplog.at_level("WARNING"):
        code, _, err = run_cli(["evaluate", str(minilm_path), str(folder), "--no-progress"], capsys)
    assert code == 2
    assert f"{folder / 'corpus.jsonl'} has no documents" in err
    assert "not in the corpus" not in caplog.text + err


def test_an_empty_queries_file_is_named(tmp_path):
    folder = write_beir(tmp_path / "beir", CORPUS, [], QRELS)
    with pytest.raises(ValueError, match="queries.jsonl has no queries"):
        load_beir(folder)


# ---------------------------------------------------------------------------- relevance level

# q0: d0 (grade 1) at rank 1, d1 (grade 2) at rank 2 -> RR 1 at level 1, 1/2 at level 2
# q1: only a grade-1 document (at rank 2)             -> RR 1/2 at level 1, not evaluated at level 2
# q2: d4 (grade 1) rank 1, x rank 2, d3 (grade 2) rank 3 -> RR 1 at level 1, 1/3 at level 2
GRADED_QRELS = {"q0": {"d0": 1, "d1": 2}, "q1": {"d2": 1}, "q2": {"d3": 2, "d4": 1}}
GRADED_RUN = {
    "q0": {"d0": 3.0, "d1": 2.0, "d9": 1.0},
    "q1": {"d9": 3.0, "d2": 2.0},
    "q2": {"d4": 3.0, "d9": 2.0, "d3": 1.0},
}


def test_relevance_level_changes_binary_measures_and_evaluated_queries():
    level1, per_query1 = compute_metrics(GRADED_QRELS, GRADED_RUN)
    level2, per_query2 = compute_metrics(GRADED_QRELS, GRADED_RUN, relevance_level=2)
    assert level1["mrr@10"] == pytest.approx((1 + 1 / 2 + 1) / 3)
    assert level2["mrr@10"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert set(per_query1["mrr@10"]) == {"q0", "q1", "q2"} and set(per_query2["mrr@10"]) == {"q0", "q2"}
    assert per_query2["hits@10"] == {"q0": 1.0, "q2": 1.0}
    assert per_query2["recall@100"] == {"q0": 1.0, "q2": 1.0}
    # nDCG keeps the graded values: the same per-query numbers at both levels
    for query_id in ("q0", "q2"):
        assert per_query2["ndcg@10"][query_id] == pytest.approx(per_query1["ndcg@10"][query_id])
    # level 1 is the default, identical to ir-measures' own rel=1
    assert compute_metrics(GRADED_QRELS, GRADED_RUN, relevance_level=1) == (level1, per_query1)
    # a measure string's own rel= wins
    own, _ = compute_metrics(GRADED_QRELS, GRADED_RUN, {"rr": "RR(rel=1)@10"}, relevance_level=2)
    assert own["rr"] == pytest.approx((1 + 1) / 2)
    with pytest.raises(ValueError, match="grade >= 3"):
        compute_metrics(GRADED_QRELS, GRADED_RUN, relevance_level=3)
    with pytest.raises(ValueError, match="relevance_level=0: give a grade >= 1"):
        compute_metrics(GRADED_QRELS, GRADED_RUN, relevance_level=0)


def test_cli_relevance_level_is_printed_and_recorded(minilm_path, tmp_path, capsys):
    qrels = [("q0", "d0", 2), ("q1", "d1", 1), ("q2", "d2", 2)]
    folder = write_beir(tmp_path / "beir", CORPUS, QUERIES, qrels)
    default_output, level_output = tmp_path / "level1.json", tmp_path / "level2.json"
    code, out, _ = run_cli(["evaluate", str(minilm_path), str(folder), "--k", "3", "--no-progress",
                            "--output", str(default_output)], capsys)
    assert code == 0 and "relevance level: 1" in out
    code, out, _ = run_cli(["evaluate", str(minilm_path), str(folder), "--k", "3", "--no-progress",
                            "--relevance-level", "2", "--output", str(level_output)], capsys)
    assert code == 0 and "relevance level: 2" in out
    default, level2 = load_results(default_output), load_results(level_output)
    assert default.settings["relevance_level"] == 1 and level2.settings["relevance_level"] == 2
    assert set(default.per_query["mrr@10"]) == {"q0", "q1", "q2"}
    assert set(level2.per_query["mrr@10"]) == {"q0", "q2"}
    code, _, err = run_cli(["evaluate", str(minilm_path), str(folder), "--relevance-level", "0"], capsys)
    assert code == 2 and "--relevance-level 0" in err


# ---------------------------------------------------------------------------- pretrain / distill inputs

PRETRAIN = ["pretrain", "condenser", "--max_steps", "1", "--use_cpu", "--report_to", "none",
            "--save_strategy", "no", "--max_seq_length", "32"]


@pytest.mark.parametrize("content", [b"", b"\n  \n\t\n"])
@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
@pytest.mark.parametrize("streaming", [False, True])
def test_pretrain_refuses_an_empty_corpus_before_making_the_folder(tmp_path, capsys, content, suffix, streaming):
    corpus = tmp_path / f"corpus{suffix}"
    corpus.write_bytes(content)
    output = tmp_path / "run"
    code, _, err = run_cli(PRETRAIN + ["--corpus", str(corpus), "--output_dir", str(output)]
                           + (["--streaming"] if streaming else []), capsys)
    assert code == 2
    assert f"{corpus} has no text" in err
    assert not output.exists()


def test_pretrain_refuses_blank_json_documents(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": " ", "title": ""}\n{"text": ""}\n')
    output = tmp_path / "run"
    code, _, err = run_cli(PRETRAIN + ["--corpus", str(corpus), "--output_dir", str(output)], capsys)
    assert code == 2 and "has no text" in err and not output.exists()


def test_pretrain_names_the_line_of_non_utf8_text(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("first document\nsecond document\n".encode() + "caf\u00e9 latin-1\n".encode("latin-1"))
    output = tmp_path / "run"
    code, _, err = run_cli(PRETRAIN + ["--corpus", str(corpus), "--output_dir", str(output)], capsys)
    assert code == 2  # the message of every reader (data.format.text_lines): byte 4 of the line "caf\xe9 ..."
    assert f"{corpus}:3: not UTF-8 (byte 0xe9 at byte 4 of the line): save the file as UTF-8" in err
    assert not output.exists()


def cut_gzip(path: Path, lines: list[str]) -> tuple[Path, int]:
    """``path`` holding ``lines`` gzip-compressed and cut off halfway (a download that stopped), and the line that
    the cut falls in: the first one that does not decompress whole (zlib's own count, not the package's reader)."""
    blob = gzip.compress("".join(line + "\n" for line in lines).encode())
    path.write_bytes(blob[: len(blob) // 2])
    readable = zlib.decompressobj(wbits=31).decompress(blob[: len(blob) // 2])
    assert 0 < readable.count(b"\n") < len(lines)
    return path, readable.count(b"\n") + 1


def gzip_message(path: Path, line: int) -> str:
    return (f"{path}:{line}: not readable as gzip (Compressed file ended before the end-of-stream marker was "
            "reached): its name ends in .gz, so it must be gzip-compressed and complete; compress it again or drop "
            "the .gz")


@pytest.mark.parametrize("command", ["pretrain .txt.gz", "pretrain .txt.gz --streaming", "pretrain .jsonl.gz",
                                     "pretrain .parquet.gz", "evaluate", "encode"])
def test_a_cut_gzip_file_is_one_line_naming_it_in_every_command(command, condenser_folder, tmp_path, capsys):
    """Issue 41 §8: one reader of compressed files (data.format.text_lines) and one message, the same for every
    command; `pretrain --corpus` (its corpus check, and a streamed text corpus) ended in a traceback."""
    documents = [f"document {i}: " + " ".join(f"word{i * 7 + j}" for j in range(12)) for i in range(300)]
    records = [json.dumps({"_id": f"d{i}", "text": text}) for i, text in enumerate(documents)]
    output, streaming = tmp_path / "out", []
    if command.startswith("pretrain"):
        name, *streaming = command.split()[1:]
        if name == ".parquet.gz":  # read whole (Parquet is read by seeking): the damage is named at its first record
            buffer = io.BytesIO()
            pq.write_table(pa.Table.from_pylist([{"text": text} for text in documents]), buffer)
            blob = gzip.compress(buffer.getvalue())
            corpus, line = tmp_path / "corpus.parquet.gz", 1
            corpus.write_bytes(blob[: len(blob) // 2])
        else:
            corpus, line = cut_gzip(tmp_path / f"corpus{name}", records if name == ".jsonl.gz" else documents)
        argv = PRETRAIN + ["--corpus", str(corpus), "--output_dir", str(output), *streaming]
    elif command == "evaluate":
        folder = write_beir(tmp_path / "beir", CORPUS, QUERIES, QRELS)
        (folder / "corpus.jsonl").unlink()
        corpus, line = cut_gzip(folder / "corpus.jsonl.gz", records)
        argv = ["evaluate", "bm25", str(folder), "--output", str(output / "results.json"), "--no-progress"]
    else:
        corpus, line = cut_gzip(tmp_path / "corpus.txt.gz", documents)
        argv = ["encode", str(condenser_folder), str(corpus), "--output", str(output), "--no-progress"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    message = f"dense-encoders {command.split()[0]}: error: {gzip_message(corpus, line)}"
    if streaming:  # met by the training loop (a streamed corpus is checked up to its first document)
        assert f"{message}\n" in err and err.count("error:") == 1, err
    else:  # found before anything is written
        assert err.strip().splitlines() == [message]
        assert not output.exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--per_device_train_batch_size", "0", "--per_device_train_batch_size 0: give an integer >= 1"),
    ("--per-device-train-batch-size", "-2", "--per_device_train_batch_size -2: give an integer >= 1"),
    ("--learning_rate", "-0.001", "--learning_rate -0.001: give a learning rate >= 0"),
])
def test_pretrain_checks_batch_size_and_learning_rate_first(tmp_path, capsys, flag, value, message):
    output = tmp_path / "run"
    code, _, err = run_cli(PRETRAIN + ["--output_dir", str(output), flag, value], capsys)
    assert code == 2 and message in err
    assert not output.exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--per_device_train_batch_size", "0", "--per_device_train_batch_size 0: give an integer >= 1"),
    ("--learning_rate=-1e-5", None, "--learning_rate -1e-05: give a learning rate >= 0"),
])
def test_distill_checks_batch_size_and_learning_rate_first(minilm_path, tmp_path, capsys, flag, value, message):
    train_file = tmp_path / "train.jsonl"
    train_file.write_text(json.dumps({"query": "q", "documents": ["a", "b"], "scores": [1.0, 0.0]}) + "\n")
    output = tmp_path / "run"
    code, _, err = run_cli(["distill", "--student", str(minilm_path), "--train-file", str(train_file),
                            "--output-dir", str(output), "--use-cpu", "--report-to", "none", flag]
                           + ([value] if value else []), capsys)
    assert code == 2 and message in err
    assert not output.exists()
