"""A model folder without a tokenizer (issue 36, section 2). As in transformers, a model carries no tokenizer and
``save_pretrained`` writes none: the documented snippets save it beside the model, ``export_backbone`` takes it
(and warns without it), and every command that would load a folder without one refuses it in one line naming the
tokenizer to save there (``pretrain`` also takes ``--tokenizer``); ``convert`` says so when its source had none."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import tiny_condenser_config
from test_cli_errors import assert_one_message, run_main
from test_docs_commands import write_authors_folder
from transformers import AutoTokenizer

from dense_encoders import CondenserForPreTraining, CondenserModel
from dense_encoders.tokenization import bundled_tokenizer_path

TOKENIZER_FILES = {"tokenizer.json", "vocab.txt", "tokenizer_config.json"}


def pretrain_argv(backbone, corpus, output, *extra):
    return ["pretrain", "condenser", "--backbone", str(backbone), "--corpus", str(corpus), "--output-dir", str(output),
            "--max-steps", "1", "--per-device-train-batch-size", "2", "--max-seq-length", "32", *extra]


@pytest.mark.slow
def test_an_exported_backbone_with_its_tokenizer_warm_starts_pretraining(tmp_path, tok, small_corpus, capsys):
    """docs/models.md: export_backbone(..., tokenizer=tokenizer) writes a plain BERT folder whose tokenizer is the
    backbone's, and that folder is a --backbone as it is."""
    torch.manual_seed(0)
    model = CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok)))
    model.export_backbone(tmp_path / "bert", tokenizer=tok)
    assert TOKENIZER_FILES & {path.name for path in (tmp_path / "bert").iterdir()}
    text = "a river and a mountain"
    assert AutoTokenizer.from_pretrained(tmp_path / "bert")(text)["input_ids"] == tok(text)["input_ids"]
    assert run_main(pretrain_argv(tmp_path / "bert", small_corpus, tmp_path / "out")) == 0, capsys.readouterr().err
    assert AutoTokenizer.from_pretrained(tmp_path / "out")(text)["input_ids"] == tok(text)["input_ids"]


@pytest.mark.slow
def test_a_backbone_without_a_tokenizer_warns_and_is_refused_naming_the_tokenizer_to_pass(tmp_path, tok, small_corpus,
                                                                                        capsys, caplog):
    """Before: the export said nothing, and pretrain tokenized every text with a tokenizer built from nothing
    ("no non-special tokens")."""
    torch.manual_seed(0)
    model = CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok)))
    with caplog.at_level(logging.WARNING):
        model.export_backbone(tmp_path / "bert")
    assert "holds no tokenizer" in caplog.text and "tokenizer=" in caplog.text
    capsys.readouterr()
    code = run_main(pretrain_argv(tmp_path / "bert", small_corpus, tmp_path / "out"))
    assert_one_message(capsys, code, 2, f"--backbone {tmp_path / 'bert'} has no tokenizer", "save_pretrained",
                       "--tokenizer NAME")
    assert not (tmp_path / "out").exists()
    # what the message says to pass works
    tokenizer = str(bundled_tokenizer_path())
    code = run_main(pretrain_argv(tmp_path / "bert", small_corpus, tmp_path / "out", "--tokenizer", tokenizer))
    assert code == 0, capsys.readouterr().err


@pytest.fixture
def headless_condenser(tmp_path, tok):
    """A CondenserModel saved without its tokenizer (model.save_pretrained alone)."""
    torch.manual_seed(0)
    folder = tmp_path / "condenser"
    CondenserModel(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    return folder


def _beir(folder):
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "a document"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a query"}) + "\n")
    for split in ("train", "test"):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (folder / "run.trec").write_text("q1 Q0 d1 1 1.0 bm25\n")
    (folder / "train.jsonl").write_text(json.dumps({"query": "a query", "documents": ["a document"], "scores": [1]}))
    return folder


@pytest.mark.parametrize("command", ["evaluate", "encode", "score-teacher", "distill"])
def test_commands_refuse_a_model_folder_without_a_tokenizer_in_one_line(command, headless_condenser, tmp_path,
                                                                       capsys):
    """Before: transformers' "Unrecognized processing class" (evaluate), or a tokenizer built from nothing."""
    beir = _beir(tmp_path / "beir")
    model = str(headless_condenser)
    capsys.readouterr()
    argv = {
        "evaluate": ["evaluate", model, str(beir)],
        "encode": ["encode", model, str(beir), "--output", str(tmp_path / "emb")],
        "score-teacher": ["score-teacher", model, "--run", str(beir / "run.trec"), "--data", str(beir),
                          "--output", str(tmp_path / "teacher.jsonl")],
        "distill": ["distill", "--student", model, "--train-file", str(beir / "train.jsonl"),
                    "--output-dir", str(tmp_path / "student")],
    }[command]
    assert_one_message(capsys, run_main(argv), 2, f"{model} has no tokenizer",
                       f"save_pretrained('{model}')")
    assert not (tmp_path / "emb").exists() and not (tmp_path / "teacher.jsonl").exists()
    assert not (tmp_path / "student").exists()


def test_the_python_api_refuses_it_too(headless_condenser, tmp_path):
    from dense_encoders.checkpoints.loading import load_sentence_transformer
    from dense_encoders.evaluation import evaluate_retrieval

    with pytest.raises(ValueError, match="has no tokenizer"):
        load_sentence_transformer(str(headless_condenser))
    with pytest.raises(ValueError, match="has no tokenizer"):
        evaluate_retrieval(str(headless_condenser), _beir(tmp_path / "beir"))


def test_convert_says_when_the_converted_folder_has_no_tokenizer(tmp_path, capsys):
    """The TITE authors' TiteModel.save_pretrained writes no tokenizer; before, the last line said to load the
    converted folder with SentenceTransformer, which then failed."""
    write_authors_folder(tmp_path / "authors")
    assert run_main(["convert", str(tmp_path / "authors"), str(tmp_path / "out")]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"it has no tokenizer, as {tmp_path / 'authors'} has none" in line, line
    assert f".save_pretrained({str(tmp_path / 'out')!r})" in line and "SentenceTransformer" in line
    assert not TOKENIZER_FILES & {path.name for path in (tmp_path / "out").iterdir()}
