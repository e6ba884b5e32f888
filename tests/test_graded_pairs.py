"""Graded sentence pairs (STSB-style) as a retrieval task (*Can Cross Encoders Produce Useful Sentence
Embeddings?*: STSB searched at a 0.5 relatedness threshold): loader, errors, dispatch, and the CLI paths."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import tiny_bert_config
from transformers import BertForSequenceClassification, BertModel

from dense_encoders.cli import main
from dense_encoders.data.format import DataFormatError
from dense_encoders.data.retrieval import is_graded_pairs_file, load_dataset_for_evaluation, load_graded_pairs

# (sentence1, sentence2, score on 0-5), in file order
PAIRS = [
    ("a cat sits on the mat", "a cat is on the mat", 4.8),          # q0 -> d0, relevant
    ("a cat sits on the mat", "a dog runs in the park", 0.4),       # d1, distractor
    ("a man plays the guitar", "a man plays an instrument", 2.5),   # q1 -> d2, exactly 0.5 x 5
    ("stocks fell sharply today", "the weather is warm", 1.0),      # q2: nothing relevant at 0.5; d3 stays
    ("a woman is cooking dinner", "a woman cooks a meal", 3.6),     # q3 -> d4
    ("a cat sits on the mat", "a kitten rests on a rug", 3.0),      # q0 -> d5 (3.0 = 0.6 x 5 exactly)
]
CORPUS = {"d0": "a cat is on the mat", "d1": "a dog runs in the park", "d2": "a man plays an instrument",
          "d3": "the weather is warm", "d4": "a woman cooks a meal", "d5": "a kitten rests on a rug"}


def write_tsv(path, pairs=PAIRS, header=None, divide_by=1):
    lines = ([header] if header else []) + [f"{a}\t{b}\t{score / divide_by:g}" for a, b, score in pairs]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_jsonl(path, pairs=PAIRS, divide_by=1):
    # every other line names its score `label` (sentence-transformers datasets do)
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, ("score", "label")[i % 2]: s / divide_by})
                            + "\n" for i, (a, b, s) in enumerate(pairs)))
    return path


@pytest.fixture
def graded_tsv(tmp_path):
    return write_tsv(tmp_path / "sts.tsv")


def corpus_texts(dataset):
    return {doc_id: document["text"] for doc_id, document in dataset.corpus.items()}


# ---------------------------------------------------------------------------- the task, by hand


def test_tsv_on_the_0_5_scale_by_hand(graded_tsv):
    dataset = load_graded_pairs(graded_tsv)
    # q2 ("stocks ...") has no pair >= 2.5: absent from the queries, its second sentence is still a document
    assert dataset.queries == {"q0": "a cat sits on the mat", "q1": "a man plays the guitar",
                               "q3": "a woman is cooking dinner"}
    assert corpus_texts(dataset) == CORPUS
    assert dataset.qrels == {"q0": {"d0": 1, "d5": 1}, "q1": {"d2": 1}, "q3": {"d4": 1}}  # 2.5 == 0.5 x 5 counts
    assert (dataset.name, dataset.split) == ("sts", "pairs@0.5")
    assert dataset.extra == {"pair_threshold": 0.5, "pair_scale": 5}  # scale inferred: scores within [0, 5]


def test_the_threshold_moves_pairs_in_and_out(graded_tsv):
    strict = load_graded_pairs(graded_tsv, threshold=0.6)  # score >= 3.0 (0.6 x 5 is 3.0000000000000004 in floats)
    assert strict.qrels == {"q0": {"d0": 1, "d5": 1}, "q3": {"d4": 1}}
    assert load_graded_pairs(graded_tsv, threshold=0.8).qrels == {"q0": {"d0": 1}}  # >= 4.0
    loose = load_graded_pairs(graded_tsv, threshold=0.2)  # >= 1.0: "stocks" now has a relevant pair
    assert loose.queries["q2"] == "stocks fell sharply today" and loose.qrels["q2"] == {"d3": 1}
    assert len(loose.queries) == 4 and corpus_texts(loose) == CORPUS  # the corpus never changes
    assert loose.split == "pairs@0.2" and loose.qrels["q1"] == {"d2": 1}


def test_jsonl_and_tsv_on_the_0_1_scale_give_the_same_task(tmp_path, graded_tsv):
    expected = load_graded_pairs(graded_tsv)
    for path in (write_jsonl(tmp_path / "sts.jsonl", divide_by=5), write_tsv(tmp_path / "unit.tsv", divide_by=5)):
        dataset = load_graded_pairs(path)
        assert dataset.extra["pair_scale"] == 1, path  # every score within [0, 1]
        assert (dataset.queries, dataset.corpus, dataset.qrels) == (expected.queries, expected.corpus, expected.qrels)
    # an explicit scale: the same 0-1 scores read on a 0-5 scale are all below 2.5
    with pytest.raises(ValueError,
                       match=r"no pair reaches the threshold 0.5 \(score >= 2.5\); the largest score is 0.96"):
        load_graded_pairs(tmp_path / "unit.tsv", scale=5)
    assert load_graded_pairs(write_jsonl(tmp_path / "five.jsonl"), scale=5).qrels == expected.qrels


def test_headers_are_optional_and_named_columns_are_picked_by_name(tmp_path, graded_tsv):
    expected = load_graded_pairs(graded_tsv)
    plain_header = write_tsv(tmp_path / "header.tsv", header="first\tsecond\tsimilarity")
    assert load_graded_pairs(plain_header).qrels == expected.qrels
    # sentence-transformers' stsbenchmark.tsv: extra columns, a split column that selects rows
    lines = ["split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2"]
    for i, (a, b, score) in enumerate(PAIRS):
        lines.append(f"test\tmain-captions\tMSRvid\t2012test\t{i:04d}\t{score:g}\t{a}\t{b}")
    lines.append("train\tmain-news\theadlines\t2015\t0099\t5.0\tonly in train\ta training pair")
    benchmark = tmp_path / "stsbenchmark.tsv"
    benchmark.write_text("\n".join(lines) + "\n")
    test = load_graded_pairs(benchmark, split="test")
    assert (test.queries, test.corpus, test.qrels) == (expected.queries, expected.corpus, expected.qrels)
    assert test.split == "test@0.5"
    train = load_dataset_for_evaluation(benchmark, split="train")
    assert train.queries == {"q0": "only in train"} and train.split == "train@0.5"
    assert len(load_graded_pairs(benchmark).corpus) == 7  # no split asked: every row
    with pytest.raises(ValueError, match=r"no pairs of split 'dev'; its split column holds \['test', 'train'\]"):
        load_graded_pairs(benchmark, split="dev")


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("content, message", [
    ("a\tb\t4\nc\td\tabc\n", r"bad.tsv:2: score 'abc' is not a number"),
    ("a\tb\t4\n\nc\td\t-1\n", r"bad.tsv:3: score '-1' is negative"),
    ("a\tb\t4\nc\td\tnan\n", r"bad.tsv:2: score 'nan' is not a number"),
    ("a\tb\t4\nc\td\n", r"bad.tsv:2: expected 3 tab-separated columns \(sentence1, sentence2, score\), got 2"),
    ("a\tb\t4\textra\n", r"bad.tsv:1: expected 3 tab-separated columns .* got 4; .*header naming sentence1"),
    ("a\tb\t4\n\t \t3\n", r"bad.tsv:2: empty sentence1 or sentence2"),
])
def test_tsv_errors_name_file_and_line(tmp_path, content, message):
    bad = tmp_path / "bad.tsv"
    bad.write_text(content)
    with pytest.raises(DataFormatError, match=message) as error:
        load_graded_pairs(bad)
    assert "\n" not in str(error.value)


def test_scale_errors(tmp_path):
    path = write_tsv(tmp_path / "sts.tsv")
    with pytest.raises(DataFormatError, match=r"sts.tsv:1: score 4.8 is above the scale 0-1; pass the scale"):
        load_graded_pairs(path, scale=1)
    ten = tmp_path / "ten.tsv"
    ten.write_text("a\tb\t3\nc\td\t7.5\n")
    with pytest.raises(ValueError, match=r"ten.tsv: the largest score is 7.5, beyond the 0-1 and 0-5 scales; pass the"):
        load_graded_pairs(ten)
    assert load_graded_pairs(ten, scale=10).qrels == {"q1": {"d1": 1}}  # 7.5 >= 5, 3 < 5
    with pytest.raises(ValueError, match=r"pair scale 0: give the largest possible score"):
        load_graded_pairs(ten, scale=0)


def test_jsonl_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence1": "a", "sentence2": "b", "score": 4}\n{"sentence1": "c", "sentence2": "d", '
                   '"score": "high"}\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: score 'high' is not a number"):
        load_graded_pairs(bad)
    bad.write_text('{"sentence1": "a", "sentence2": "b", "score": 4}\n{"sentence1": "c", "sentence2": "d"}\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: missing field 'score' or 'label'"):
        load_graded_pairs(bad)
    bad.write_text('{"sentence1": "a", "sentence2": "b", "label": -0.5}\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl:1: score -0.5 is negative"):
        load_graded_pairs(bad)


def test_empty_file_nothing_relevant_and_bad_thresholds(tmp_path, graded_tsv):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"empty.tsv holds no graded pairs .* threshold 0.5; largest score: none"):
        load_graded_pairs(empty)
    low = write_tsv(tmp_path / "low.tsv", [("a", "b", 1.2), ("c", "d", 0.3)])
    with pytest.raises(ValueError, match=r"low.tsv: no pair reaches the threshold 0.5 \(score >= 2.5\); the largest "
                                         r"score is 1.2\. Lower the threshold"):
        load_graded_pairs(low)
    for threshold in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=rf"pair threshold {threshold} is not in \(0, 1\]: give a fraction"):
            load_graded_pairs(graded_tsv, threshold=threshold)


def test_threshold_one_needs_a_perfect_score(tmp_path):
    perfect = write_tsv(tmp_path / "perfect.tsv", [("a", "b", 5), ("a", "c", 4.9)])
    assert load_graded_pairs(perfect, threshold=1).qrels == {"q0": {"d0": 1}}


# ---------------------------------------------------------------------------- dispatch


def test_dispatch_recognises_graded_files_and_refuses_pair_options_elsewhere(tmp_path, graded_tsv):
    jsonl = write_jsonl(tmp_path / "sts.jsonl")
    pairs_tsv = tmp_path / "pairs.tsv"
    pairs_tsv.write_text("what is a cat\ta small feline\n")
    pairs_jsonl = tmp_path / "pairs.jsonl"
    pairs_jsonl.write_text(json.dumps({"query": "what is a cat", "positive": "a small feline"}) + "\n")
    assert [is_graded_pairs_file(p) for p in (graded_tsv, jsonl, pairs_tsv, pairs_jsonl, tmp_path)] == [
        True, True, False, False, False]
    assert load_dataset_for_evaluation(graded_tsv).split == "pairs@0.5"
    assert load_dataset_for_evaluation(jsonl, pair_threshold=0.8).qrels == {"q0": {"d0": 1}}
    assert load_dataset_for_evaluation(pairs_tsv).split == "pairs"  # ungraded pairs: as before
    for source, kind in ((pairs_tsv, "a \\(query, positive\\) pairs file"), (tmp_path, "a BEIR folder")):
        with pytest.raises(ValueError, match=rf"pair_threshold .* apply to graded pair files .* is {kind}: leave"):
            load_dataset_for_evaluation(source, pair_threshold=0.5)
    with pytest.raises(ValueError, match=r"pair_scale .* apply to graded pair files"):
        load_dataset_for_evaluation(pairs_jsonl, pair_scale=5)


# ---------------------------------------------------------------------------- the command line


@pytest.fixture
def tiny_dual_encoder(tmp_path, tok):
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    torch.manual_seed(0)
    folder = tmp_path / "de"
    # with its pooler saved: a pooler initialised at load would change the fingerprint (the cache key) each load
    BertModel(tiny_bert_config(tok, num_hidden_layers=2)).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="mean", similarity="cosine")
    return folder


@pytest.fixture
def tiny_cross_encoder(tmp_path, tok):
    torch.manual_seed(0)
    folder = tmp_path / "ce"
    BertForSequenceClassification(tiny_bert_config(tok, num_hidden_layers=2)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_cli_evaluate_on_graded_pairs(tiny_dual_encoder, graded_tsv, tmp_path, capsys):
    cache = tmp_path / "cache"
    runs = {}
    for threshold in ("0.5", "0.8"):
        output = tmp_path / f"results-{threshold}.json"
        code = main(["evaluate", str(tiny_dual_encoder), str(graded_tsv), "--pair-threshold", threshold,
                     "--cache-dir", str(cache), "--output", str(output), "--no-progress"])
        assert code == 0, capsys.readouterr().err
        runs[threshold] = json.loads(output.read_text())
    first, second = runs["0.5"], runs["0.8"]
    assert 0 <= first["metrics"]["ndcg@10"] <= 1 and set(first["per_query"]["ndcg@10"]) == {"q0", "q1", "q3"}
    assert (first["dataset"]["num_queries"], second["dataset"]["num_queries"]) == (3, 1)
    assert first["dataset"]["num_documents"] == second["dataset"]["num_documents"] == 6
    assert (first["dataset"]["split"], first["dataset"]["pair_threshold"], first["dataset"]["pair_scale"]) == (
        "pairs@0.5", 0.5, 5)
    assert (second["dataset"]["split"], second["dataset"]["pair_threshold"]) == ("pairs@0.8", 0.8)
    # the second threshold's queries are encoded, not read from the first's cache entry; the corpus (same
    # texts, same embeddings) is rightly shared
    assert not second["timings"]["queries_cached"] and second["timings"]["documents_cached"]
    assert "sts (pairs@0.8): 1 queries, 6 documents" in capsys.readouterr().out

    assert main(["evaluate", str(tiny_dual_encoder), str(graded_tsv), "--pair-scale", "1", "--no-progress"]) == 2
    assert "sts.tsv:1: score 4.8 is above the scale 0-1" in capsys.readouterr().err
    beir = tmp_path / "beir"
    beir.mkdir()
    assert main(["evaluate", str(tiny_dual_encoder), str(beir), "--pair-threshold", "0.5", "--no-progress"]) == 2
    assert "apply to graded pair files" in capsys.readouterr().err
    # checked by EvaluationArguments.__post_init__ (no model loaded): one line, exit code 2
    assert main(["evaluate", str(tiny_dual_encoder), str(graded_tsv), "--pair-threshold", "2.5"]) == 2
    err = capsys.readouterr().err
    assert "--pair-threshold: 2.5 is not in (0, 1]" in err and len(err.strip().splitlines()) == 1


def test_cli_help_cites_the_paper(capsys):
    for command in ("evaluate", "layerwise", "infuse"):
        assert main([command, "--help"]) == 0  # printed by `main`, no SystemExit (tests/test_cli_help.py)
        out = " ".join(capsys.readouterr().out.split())
        assert "--pair-threshold" in out and "--pair-scale" in out, command
        assert "Can Cross Encoders Produce Useful Sentence Embeddings?" in out, command


def test_cli_layerwise_on_graded_pairs(tiny_cross_encoder, tiny_dual_encoder, graded_tsv, tmp_path, capsys):
    output = tmp_path / "layerwise"
    code = main(["layerwise", "--cross-encoder", str(tiny_cross_encoder), "--dual-encoder", str(tiny_dual_encoder),
                 "--data", str(graded_tsv), "--pair-threshold", "0.8", "--layers", "2", "--output-dir", str(output),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = json.loads((output / "layerwise.json").read_text())["rows"]
    assert {(r["dataset"], r["encoder"]) for r in rows} == {("sts (pairs@0.8)", "cross-encoder"),
                                                            ("sts (pairs@0.8)", "dual encoder")}
    # one query whose relevant document is one of six: Hits@10 is 1
    assert all(r["hits@10"] == 1.0 for r in rows)


def test_cli_infuse_trains_on_graded_pairs(tiny_cross_encoder, graded_tsv, tmp_path, monkeypatch, capsys):
    from dense_encoders.trainer import infusion

    seen = {}

    def record_triplets(model_folder, triplets, output_dir, **options):  # stands in for the MNRL training
        seen["triplets"] = triplets
        shutil.copytree(model_folder, output_dir, dirs_exist_ok=True)  # the "trained" model is the initial one
        return output_dir

    monkeypatch.setattr(infusion, "train_mnrl", record_triplets)
    code = main(["infuse", "--cross-encoder", str(tiny_cross_encoder), "--train-data", str(graded_tsv),
                 "--output-dir", str(tmp_path / "de-2"), "--pair-threshold", "0.6", "--candidates", "6"])
    assert code == 0, capsys.readouterr().err
    pairs = {(t["anchor"], t["positive"]) for t in seen["triplets"]}
    assert pairs == {("a cat sits on the mat", "a cat is on the mat"),
                     ("a cat sits on the mat", "a kitten rests on a rug"),
                     ("a woman is cooking dinner", "a woman cooks a meal")}  # relevant at >= 3.0
    assert all(t["negative"] in CORPUS.values() and (t["anchor"], t["negative"]) not in pairs for t in seen["triplets"])

    beir = tmp_path / "beir"
    beir.mkdir()
    assert main(["infuse", "--cross-encoder", str(tiny_cross_encoder), "--train-data", str(beir),
                 "--output-dir", str(tmp_path / "other"), "--pair-scale", "5"]) == 2
    assert "neither --train-data nor --eval-data is one" in capsys.readouterr().err
