"""Ordinary mistakes on the command line: one or two lines naming the value and the fix, exit code 2 (130 for
Ctrl-C), no traceback, nothing left behind; ``--debug`` brings the traceback back."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, cpu_only_env

from dense_encoders import cli


def run_main(argv):
    """``cli.main(argv)``'s exit code, whether returned or raised (argparse exits)."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


def assert_one_message(capsys, code, expected_code, *substrings):
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert "Traceback" not in err
    assert 1 <= len(err.strip().splitlines()) <= 2, err
    for substring in substrings:
        assert substring in err, err
    return err


@pytest.fixture
def beir(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "a document"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a query"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if anything gets as far as loading a model or encoding."""
    import dense_encoders.evaluation as evaluation
    import dense_encoders.trainer.distillation as distillation
    import dense_encoders.trainer.teacher as teacher

    def loaded(*args, **kwargs):
        raise AssertionError("got past the checks")

    monkeypatch.setattr(evaluation, "evaluate_retrieval", loaded)
    monkeypatch.setattr(distillation, "distill", loaded)
    monkeypatch.setattr(teacher, "score_teacher", loaded)


@pytest.mark.parametrize("command", ["evaluate", "distill"])
@pytest.mark.parametrize("relative", [False, True])
def test_missing_model_path(command, relative, tmp_path, beir, capsys, monkeypatch, no_loading):
    monkeypatch.chdir(tmp_path)
    model = "./runs/missing" if relative else str(tmp_path / "runs" / "missing")
    output = tmp_path / "out"
    argv = ([command, model, str(beir), "--output", str(output / "results.json")] if command == "evaluate" else
            [command, "--student", model, "--train-file", "train.jsonl", "--output-dir", str(output)])
    assert_one_message(capsys, run_main(argv), 2, f"{model}: no such folder",
                       "pass a local checkpoint folder or a Hub id like org/name")
    assert not output.exists()


def test_hub_id_is_passed_on_to_the_hub(beir, capsys, monkeypatch):
    import dense_encoders.evaluation as evaluation
    from dense_encoders.cli import checks

    seen = {}

    def fake_evaluate(model, data, **kwargs):
        seen["model"] = model
        raise OSError(f"{model} is not a valid model identifier listed on the Hub")

    monkeypatch.setattr(evaluation, "evaluate_retrieval", fake_evaluate)
    monkeypatch.setattr(checks, "_offline", lambda: False)
    assert_one_message(capsys, run_main(["evaluate", "some-org/some-model", str(beir)]), 2,
                       "some-org/some-model is not a valid model identifier")
    assert seen["model"] == "some-org/some-model"
    # offline, a Hub id must be in the cache
    monkeypatch.setattr(checks, "_offline", lambda: True)
    assert_one_message(capsys, run_main(["evaluate", "some-org/some-model", str(beir)]), 2,
                       "no Hub model of that id in the cache")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device,message", [
    ("cuda", "--device cuda: CUDA is not available"),
    ("gpu", "--device gpu: not a device; choose one of cpu, cuda, cuda:N, mps"),
])
def test_device(device, message, tmp_path, beir, capsys, no_loading):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    output = tmp_path / "out"
    assert_one_message(capsys, run_main(["evaluate", str(model), str(beir), "--device", device, "--output",
                                         str(output / "r.json")]), 2, message)
    assert_one_message(capsys, run_main(["score-teacher", str(model), "--run", "run.trec", "--data", str(beir),
                                         "--output", str(output / "t.jsonl"), "--device", device]), 2, message)
    assert not output.exists()
    if device == "gpu":
        assert_one_message(capsys, run_main(["bench", "--device", device, "--quick", "--json",
                                             str(output / "b.json")]), 2, message)


@pytest.mark.parametrize("command", ["pretrain", "distill"])
def test_ctrl_c_names_the_checkpoint_to_resume_from(command, tmp_path, capsys, monkeypatch):
    import dense_encoders.trainer.distillation as distillation
    import dense_encoders.trainer.pretraining as pretraining

    output = tmp_path / "run"

    def interrupted(setup, args):
        output.mkdir()
        if command == "distill":
            (output / "checkpoint-1").mkdir()
            (output / "checkpoint-2").mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(pretraining if command == "pretrain" else distillation, command, interrupted)
    student = tmp_path / "student"
    student.mkdir()
    (student / "config.json").write_text("{}")
    (student / "vocab.txt").write_text("[PAD]\n")  # a model folder holds its tokenizer (else refused before the run)
    argv = (["pretrain", "condenser", "--output-dir", str(output), "--max-steps", "5"] if command == "pretrain" else
            ["distill", "--student", str(student), "--train-file", "train.jsonl", "--output-dir", str(output)])
    code = run_main(argv)
    if command == "distill":
        assert_one_message(capsys, code, 130, "interrupted; resume with --resume-from-checkpoint "
                           f"{output / 'checkpoint-2'}")
    else:
        assert_one_message(capsys, code, 130, "interrupted; no checkpoint was written yet")


@pytest.mark.parametrize("command", ["evaluate", "distill", "score-teacher"])
def test_folder_without_config_json(command, tmp_path, beir, capsys, no_loading):
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "weights.txt").write_text("hello")
    output = tmp_path / "out"
    argv = {
        "evaluate": ["evaluate", str(model), str(beir), "--output", str(output / "r.json")],
        "distill": ["distill", "--student", str(model), "--train-file", "t.jsonl", "--output-dir", str(output)],
        "score-teacher": ["score-teacher", str(model), "--run", "run.trec", "--data", str(beir), "--output",
                          str(output / "t.jsonl")],
    }[command]
    assert_one_message(capsys, run_main(argv), 2,
                       f"{model} has no config.json: it is not a saved model (save it with save_pretrained)")
    assert not output.exists()


def test_push_to_an_unreachable_endpoint_names_the_url(tmp_path, tok, capsys, monkeypatch):
    from huggingface_hub import constants

    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    capsys.readouterr()  # save_pretrained's progress bar
    code = run_main(["push", str(folder), "--repo-id", "me/tiny", "--endpoint", "http://127.0.0.1:9",
                     "--token", "hf_secret0123456789"])
    err = assert_one_message(capsys, code, 2, "http://127.0.0.1:9/me/tiny", "Nothing local was changed")
    assert "hf_secret0123456789" not in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("flag,value", [("--k", "0"), ("--k", "-5"), ("--batch-size", "0"),
                                        ("--rerank-top-k", "0"), ("--document-max-length", "-1")])
def test_evaluate_numbers_are_checked_before_encoding(flag, value, tmp_path, beir, capsys, no_loading):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    output = tmp_path / "out"
    assert_one_message(capsys, run_main(["evaluate", str(model), str(beir), flag, value, "--output",
                                         str(output / "r.json")]), 2,
                       f"argument {flag}: must be a positive integer, got {value}")
    assert not output.exists()


def test_the_settings_check_their_values_with_the_command_lines_message():
    """The checks live in the settings dataclasses (one copy): the Python API refuses what the command line refuses,
    with the message the command line prints (``tests/test_graded_pairs.py``, above)."""
    from dense_encoders.settings.evaluation import EvaluationArguments
    from dense_encoders.settings.infusion import InfusionArguments

    required = dict(cross_encoder="ce", train_data="d", output_dir="o")
    for settings, message in [
        (lambda: EvaluationArguments(k=0), "argument --k: must be a positive integer, got 0"),
        (lambda: EvaluationArguments(batch_size=True), "argument --batch-size: must be a positive integer, got True"),
        (lambda: EvaluationArguments(pair_threshold=2.5), "argument --pair-threshold: 2.5 is not in (0, 1]"),
        (lambda: EvaluationArguments(pair_scale=0), "argument --pair-scale: 0: give the largest possible score"),
        (lambda: InfusionArguments(**required, max_length=0), "argument --max-length: must be a positive integer"),
        (lambda: InfusionArguments(**required, pair_threshold=0.0), "argument --pair-threshold: 0 is not in (0, 1]"),
    ]:
        with pytest.raises(ValueError) as error:
            settings()
        assert str(error.value).startswith(message), str(error.value)
    assert EvaluationArguments(pair_scale=5.0).pair_scale == 5 and InfusionArguments(**required).batch_size == 32


def test_debug_brings_the_traceback_back(tmp_path, beir, capsys, monkeypatch, no_loading):
    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="no such folder"):
        cli.main(["evaluate", missing, str(beir), "--debug"])
    monkeypatch.setenv("DENSE_ENCODERS_DEBUG", "1")
    with pytest.raises(ValueError, match="no such folder"):
        cli.main(["evaluate", missing, str(beir)])
    monkeypatch.delenv("DENSE_ENCODERS_DEBUG")
    assert run_main(["evaluate", missing, str(beir)]) == 2
    capsys.readouterr()
    # as a user runs it: a traceback on stderr with --debug, one line without
    command = [sys.executable, "-m", "dense_encoders.cli", "evaluate", missing, str(beir)]
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"))
    env.pop("DENSE_ENCODERS_DEBUG", None)
    quiet = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    loud = subprocess.run([*command, "--debug"], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and "no such folder" in quiet.stderr
    assert loud.returncode == 1 and "Traceback" in loud.stderr and "no such folder" in loud.stderr


@pytest.mark.slow
def test_a_single_process_command_under_torchrun_is_refused_by_every_process(tmp_path, beir):
    """evaluate, score-teacher, infuse, ... run in one process: started by torchrun, each process would do the whole
    work and write the same files (before: both evaluated and wrote one results file). A real 2-process torchrun:
    every process refuses in one line, and nothing is written."""
    output = tmp_path / "results.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "dense_encoders.cli", "evaluate", "bm25", str(beir), "--split", "test", "--output", str(output)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env=cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), HF_HUB_OFFLINE="1"))
    assert result.returncode != 0
    refusal = ("dense-encoders evaluate: error: evaluate runs in one process, but 2 were launched (WORLD_SIZE=2), "
               "each of which would do the whole work and write the same files; run it without torchrun or "
               "accelerate launch (only pretrain, distill, encode run across processes)")
    assert result.stderr.count(refusal) == 2, result.stderr[-3000:]
    assert "dense_encoders/" not in result.stderr  # no traceback of ours (torchrun prints its own on failure)
    assert not output.exists()


def tiny_bert_folder(folder, tok, nan: bool = False):
    """A tiny BERT saved with the bundled tokenizer; ``nan``: its last LayerNorm gives NaN (a diverged or damaged
    checkpoint), so every vector is NaN."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=64), add_pooling_layer=False)
    if nan:
        with torch.no_grad():
            model.encoder.layer[-1].output.LayerNorm.weight[3] = float("nan")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def nan_model(tmp_path, tok):
    return tiny_bert_folder(tmp_path / "nan-model", tok, nan=True)


def test_no_command_writes_a_nan_vector(nan_model, beir, tmp_path, capsys):
    """Before: encode wrote shards of NaN vectors and evaluate a results file, both with exit 0."""
    capsys.readouterr()
    shards = tmp_path / "shards"
    code = run_main(["encode", str(nan_model), str(beir), "--output", str(shards), "--pooling", "cls",
                     "--no-progress"])
    assert_one_message(capsys, code, 2, "dense-encoders encode: error: shard 0: the vector of text 'd1' holds NaN or "
                       "infinite values, so nothing was written")
    assert not list(shards.glob("shard-*.safetensors"))
    results = tmp_path / "results.json"
    code = run_main(["evaluate", str(nan_model), str(beir), "--pooling", "cls", "--output", str(results),
                     "--no-progress"])
    assert_one_message(capsys, code, 2, "the vector of query 0 ('a query') holds NaN or infinite values")
    assert not results.exists()


@pytest.mark.parametrize("line, problem", [
    ('{"_id": "d2", "title": "", "text": "half a pair \\ud800 here"}', "field 'text' holds a lone surrogate"),
    ('{"_id": "d\\udc00", "title": "", "text": "a fine text"}', "field '_id' holds a lone surrogate"),
    ('{"_id": "d2", "title": "\\u200b", "text": "\\u200c\\u200d\\ufeff \\u0007"}', "blank document 'd2'"),
    # combining accents only (stripped with the accents) and U+FFFD (dropped as an invalid character)
    ('{"_id": "d2", "title": "\\u0301", "text": "\\u0301\\u0300 \\ufffd"}', "blank document 'd2'"),
])
def test_texts_that_are_no_characters_or_none_a_tokenizer_keeps_are_one_line(line, problem, beir, tmp_path,
                                                                              capsys, tok):
    """A lone surrogate (before: TypeError "TextEncodeInput must be ..." from the tokenizer, or for an id a message
    naming neither file nor line) and a text of zero-width and control characters only (before: encoded as the
    empty text, which a blank text is refused for): one line naming the file and line, before any shard is written."""
    model = tiny_bert_folder(tmp_path / "model", tok)
    corpus = beir / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + line + "\n")
    capsys.readouterr()
    code = run_main(["encode", str(model), str(beir), "--output", str(tmp_path / "emb"), "--pooling", "cls",
                     "--no-progress"])
    assert_one_message(capsys, code, 2, f"{corpus}:2", problem)
    assert not list((tmp_path / "emb").glob("shard-*"))


def test_a_tokenizer_that_names_its_own_code_is_refused_without_consent(beir, tmp_path, tok, capsys):
    """bench --tokenizer (and every tokenizer load) of a folder whose tokenizer_config.json maps AutoTokenizer to code
    of its own (before: transformers loaded the stock BertTokenizer in its place, silently)."""
    from dense_encoders.tokenization import load_tokenizer

    folder = tmp_path / "custom-tokenizer"
    tok.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "tokenization_custom.py").write_text(
        "from transformers import BertTokenizer\n\n\nclass CustomTokenizer(BertTokenizer):\n    pass\n")
    lengths = tmp_path / "lengths.json"
    capsys.readouterr()
    code = run_main(["bench", "--quick", "--lengths-from", str(beir), "--tokenizer", str(folder), "--save-lengths",
                     str(lengths), "--no-plot"])
    assert_one_message(capsys, code, 2, f"{folder / 'tokenizer_config.json'} maps AutoTokenizer to "
                       "tokenization_custom.CustomTokenizer", "pass --trust-remote-code")
    assert not lengths.exists()
    assert type(load_tokenizer(folder, trust_remote_code=True)).__name__ == "CustomTokenizer"


def test_search_over_shards_holding_nan_writes_no_run(tmp_path, capsys, monkeypatch):
    """Shards written before every writer refused NaN vectors (their manifest sound) gave a run with `nan` scores,
    the NaN document first, and exit 0: one line naming the query and the document, and no run."""
    from dense_encoders.data import embedding_shards

    documents = np.eye(4, 8, dtype=np.float32)
    documents[2, 3] = np.nan
    with monkeypatch.context() as patched:  # as an earlier version wrote them
        patched.setattr(embedding_shards, "refuse_non_finite_vectors", lambda *args: None)
        embedding_shards.save_embedding_shards(tmp_path / "corpus", documents, ["a", "b", "c", "d"], shard_size=2)
    embedding_shards.save_embedding_shards(tmp_path / "queries", np.ones((2, 8), dtype=np.float32), ["q1", "q2"],
                                           settings={"side": "query"})
    run = tmp_path / "run.trec"
    assert cli.main(["search", str(tmp_path / "corpus"), str(tmp_path / "queries"), "--k", "3", "--output", str(run),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "query 'q1' scores document 'c' as nan" in err, err
    assert not run.exists()
