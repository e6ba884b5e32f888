"""No code of a checkpoint runs without consent (issue 35, item 2), and pickled files are named, never loaded
(items 11 and 12).

* A plain BERT folder whose ``config.json`` maps ``AutoModel`` to its own ``modeling_evil.py`` (which creates a
  marker file when imported) is refused in one line naming the file and ``--trust-remote-code`` by every command
  that loads a model and by the Python API; the marker never appears. With the flag the code runs (the marker
  appears), as transformers' ``trust_remote_code=True`` runs it.
* Our own families load without the flag, and a poisoned ``modeling_condenser.py`` in their folder never runs.
* A ``pytorch_model.bin`` (of a model, or of a sentence-transformers ``2_Dense``) or a resumed checkpoint's
  ``optimizer.pt`` / ``scheduler.pt`` / ``rng_state.pth`` that holds pickled objects is one line naming the file
  and the fix; the object is never unpickled. The conversion the message prints gives a folder that loads.
* The load report transformers prints for the expected differences (a BERT checkpoint without a pooler, the MLM
  heads of a task checkpoint) stays silent on ``evaluate`` and ``distill``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from conftest import tiny_bert_config, tiny_condenser_config
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, BertForMaskedLM, BertForSequenceClassification, BertModel

from dense_encoders import CondenserModel
from dense_encoders.checkpoints.folder import OUR_AUTO_CLASSES, OUR_ENCODERS
from dense_encoders.checkpoints.loading import (
    load_checked_model,
    load_cross_encoder,
    load_sentence_transformer,
    model_and_tokenizer,
    model_fingerprint,
)
from dense_encoders.checkpoints.trust import UntrustedCodeError, checkpoint_code
from dense_encoders.checkpoints.weights import CheckpointWeightsError, PickledObjectsError
from dense_encoders.cli import main
from dense_encoders.evaluation import RetrievalEncoder

ANSI = "\x1b["


def run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def one_line_error(capsys, argv: list[str], *substrings: str) -> str:
    """Run ``argv``: exit code 2 and one line on stderr, holding every one of ``substrings``."""
    capsys.readouterr()
    code = run_main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and ANSI not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for substring in substrings:
        assert substring in err, err
    return err


def marker_code(marker: Path, base: str) -> str:
    """A module that creates ``marker`` when imported and defines ``Evil`` as a subclass of transformers' ``base``."""
    return (f"from pathlib import Path\nPath({str(marker)!r}).touch()\nfrom transformers import {base}\n\n\n"
            f"class Evil({base}):\n    pass\n")


def with_own_code(folder: Path, auto_class: str, base: str, marker: Path) -> Path:
    """Give a saved transformers folder an ``auto_map`` entry to its own ``modeling_evil.py``."""
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {auto_class: "modeling_evil.Evil"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_evil.py").write_text(marker_code(marker, base))
    return folder


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "the-folder-code-ran"


@pytest.fixture
def evil_encoder(tmp_path, tok, marker) -> Path:
    """A plain BERT (tiny config) whose config.json maps AutoModel to its own code (unique name per test: the
    dynamic-module cache is keyed by the folder's name)."""
    torch.manual_seed(0)
    folder = tmp_path / f"evil-encoder-{tmp_path.name}"
    BertModel(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return with_own_code(folder, "AutoModel", "BertModel", marker)


@pytest.fixture
def evil_cross_encoder(tmp_path, tok, marker) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / f"evil-ce-{tmp_path.name}"
    BertForSequenceClassification(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return with_own_code(folder, "AutoModelForSequenceClassification", "BertForSequenceClassification", marker)


@pytest.fixture
def beir(tmp_path) -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    texts = ["dense retrieval with one vector", "rivers and mountains", "protein folding in cells"]
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                                 for i, text in enumerate(texts)))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "dense retrieval"}) + "\n"
                                          + json.dumps({"_id": "q2", "text": "mountains"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td1\t1\n")
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td1\t1\n")
    return folder


def train_file(tmp_path) -> Path:
    path = tmp_path / "train.jsonl"
    lines = [{"query": "dense retrieval", "documents": ["one vector", "rivers", "proteins"], "scores": [3.0, 1.0, 0.0]},
             {"query": "mountains", "documents": ["rivers", "one vector", "proteins"], "scores": [2.0, 0.5, 0.1]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# ---- the consent check ---------------------------------------------------------------------------------------


def test_the_marker_module_creates_its_marker_when_imported(tmp_path, marker):
    """The marker means something: importing the folder's code creates it (so its absence means it never ran)."""
    module = tmp_path / "probe_marker.py"
    module.write_text(marker_code(marker, "BertModel"))
    subprocess.run([sys.executable, str(module)], check=True, timeout=300)
    assert marker.is_file()


def test_evaluate_refuses_a_folders_own_code_and_runs_it_with_the_flag(evil_encoder, beir, marker, capsys):
    argv = ["evaluate", str(evil_encoder), str(beir), "--pooling", "cls", "--no-progress"]
    one_line_error(capsys, argv, "--trust-remote-code", f"{evil_encoder}/config.json",
                   "AutoModel", str(evil_encoder / "modeling_evil.py"))
    assert not marker.exists()
    assert run_main([*argv, "--trust-remote-code"]) == 0, capsys.readouterr().err
    assert marker.is_file()  # transformers ran the folder's code, as asked


def test_encode_and_search_refuse_it_too(evil_encoder, beir, marker, tmp_path, capsys):
    shards = tmp_path / "shards"
    argv = ["encode", str(evil_encoder), str(beir), "--output", str(shards), "--pooling", "cls", "--no-progress"]
    one_line_error(capsys, argv, "--trust-remote-code", "modeling_evil.py")
    assert not marker.exists() and not shards.exists()
    assert run_main([*argv, "--trust-remote-code"]) == 0, capsys.readouterr().err
    assert marker.is_file()
    marker.unlink()
    # search encodes text queries with the corpus's model: the same consent
    search = ["search", str(shards), str(beir), "--output", str(tmp_path / "run.trec"), "--k", "2", "--no-progress"]
    one_line_error(capsys, search, "--trust-remote-code", "modeling_evil.py")
    assert not (tmp_path / "run.trec").exists()


def test_distill_refuses_a_student_with_its_own_code(evil_encoder, marker, tmp_path, capsys):
    output = tmp_path / "student"
    argv = ["distill", "--student", str(evil_encoder), "--train-file", str(train_file(tmp_path)), "--pooling", "cls",
            "--losses", "kl", "--output-dir", str(output), "--max-steps", "1", "--use-cpu",
            "--per-device-train-batch-size", "2", "--documents-per-query", "2"]
    one_line_error(capsys, argv, "--trust-remote-code", "modeling_evil.py")
    assert not marker.exists() and not (output / "model.safetensors").exists()
    assert run_main([*argv, "--trust-remote-code"]) == 0, capsys.readouterr().err
    assert marker.is_file() and (output / "model.safetensors").is_file()


def test_score_teacher_refuses_a_cross_encoder_with_its_own_code(evil_cross_encoder, beir, marker, tmp_path, capsys):
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d0 1 2.0 bm25\nq1 Q0 d1 2 1.0 bm25\nq2 Q0 d1 1 2.0 bm25\n")
    output = tmp_path / "teacher.jsonl"
    argv = ["score-teacher", str(evil_cross_encoder), "--run", str(run), "--data", str(beir), "--split", "test",
            "--output", str(output), "--no-progress"]
    one_line_error(capsys, argv, "--trust-remote-code", "AutoModelForSequenceClassification",
                   "modeling_evil.py")
    assert not marker.exists() and not output.exists()
    assert run_main([*argv, "--trust-remote-code"]) == 0, capsys.readouterr().err
    assert marker.is_file() and len(output.read_text().splitlines()) == 2


def test_layerwise_and_infuse_refuse_them(evil_encoder, evil_cross_encoder, beir, marker, tmp_path, capsys):
    layerwise = ["layerwise", "--cross-encoder", str(evil_cross_encoder), "--dual-encoder", str(evil_encoder),
                 "--data", str(beir), "--output-dir", str(tmp_path / "layerwise"), "--no-progress"]
    one_line_error(capsys, layerwise, "--trust-remote-code", "modeling_evil.py")
    infuse = ["infuse", "--cross-encoder", str(evil_cross_encoder), "--train-data", str(beir),
              "--output-dir", str(tmp_path / "infused")]
    one_line_error(capsys, infuse, "--trust-remote-code", "modeling_evil.py")
    assert not marker.exists()
    assert not (tmp_path / "infused" / "initial").exists()


def test_the_python_api_refuses_unless_trusted(evil_encoder, evil_cross_encoder, marker):
    for load in (lambda: load_sentence_transformer(evil_encoder, pooling="cls"),
                 lambda: RetrievalEncoder(evil_encoder, pooling="cls", show_progress_bar=False),
                 lambda: load_checked_model(evil_encoder),
                 lambda: model_and_tokenizer(evil_encoder, cross_encoder=False),
                 lambda: load_cross_encoder(evil_cross_encoder)):
        with pytest.raises(UntrustedCodeError) as refused:
            load()
        assert "trust_remote_code=True" in str(refused.value) and "\n" not in str(refused.value)
    assert not marker.exists()
    model = load_sentence_transformer(evil_encoder, pooling="cls", trust_remote_code=True)
    assert marker.is_file() and type(model[0].auto_model).__name__ == "Evil"


def test_a_tokenizer_or_module_of_its_own_is_code_too(tmp_path, tok):
    torch.manual_seed(0)
    folder = tmp_path / "bert"
    BertModel(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    assert checkpoint_code(folder) == []
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {**settings, "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}))
    (folder / "tokenization_evil.py").write_text("raise SystemExit('tokenizer code ran')\n")
    with pytest.raises(UntrustedCodeError, match=r"tokenizer_config\.json maps AutoTokenizer to "
                                                 r"tokenization_evil\.EvilTokenizer"):
        load_sentence_transformer(folder, pooling="cls")
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Custom", "type": "custom_pooling.EvilPooling"}]))
    with pytest.raises(UntrustedCodeError, match=r"modules\.json maps the module class to custom_pooling\.EvilPooling"):
        load_sentence_transformer(folder)


def test_our_families_need_no_flag_and_a_poisoned_copy_of_their_code_never_runs(condenser_folder, beir, tmp_path,
                                                                             capsys):
    marker = tmp_path / "poisoned-code-ran"
    poison = f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
    for name in ("modeling_condenser.py", "configuration_condenser.py"):
        (condenser_folder / name).write_text(poison + (condenser_folder / name).read_text())
    assert json.loads((condenser_folder / "config.json").read_text())["auto_map"]["AutoModel"].startswith(
        "modeling_condenser.")
    assert checkpoint_code(condenser_folder) == []
    assert run_main(["evaluate", str(condenser_folder), str(beir), "--no-progress"]) == 0, capsys.readouterr().err
    for trust in (False, True):  # the installed classes win, whatever the flag
        model = AutoModel.from_pretrained(condenser_folder, trust_remote_code=trust)
        assert type(model) is CondenserModel
        assert type(RetrievalEncoder(condenser_folder, trust_remote_code=trust).model[0].auto_model) is CondenserModel
    assert not marker.exists()


@pytest.mark.parametrize("model_type", sorted(OUR_AUTO_CLASSES))
def test_the_auto_classes_that_need_no_consent_are_the_registered_ones(model_type):
    """What :data:`OUR_AUTO_CLASSES` lets through without consent is exactly what ``import dense_encoders``
    registers: each such Auto class builds the installed class of the family."""
    config = transformers.AutoConfig.for_model(model_type)
    assert type(config).__module__.startswith("dense_encoders.")
    for auto_class in OUR_AUTO_CLASSES[model_type]:
        if auto_class == "AutoConfig":
            continue
        with torch.device("meta"):
            model = getattr(transformers, auto_class).from_config(config)
        assert type(model).__module__.startswith("dense_encoders."), (model_type, auto_class)
    assert OUR_ENCODERS[model_type].config_class is type(config)


# ---- pickled files: named, never unpickled -------------------------------------------------------------------


class _TouchOnUnpickle:
    """Pickles as ``Path.touch(marker)``: unpickling it creates the marker."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def pickled_weights(folder: Path, marker: Path) -> dict:
    """Replace ``folder/model.safetensors`` by a ``pytorch_model.bin`` of the same tensors plus a pickled object."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    torch.save({**state, "trap": _TouchOnUnpickle(marker)}, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return state


def test_a_pickled_weights_file_is_named_with_the_conversion_and_the_conversion_works(tmp_path, tok, beir, marker,
                                                                                     capsys):
    torch.manual_seed(0)
    folder = tmp_path / "bert"
    BertModel(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    reference = RetrievalEncoder(folder, pooling="cls", show_progress_bar=False).model.encode(["dense retrieval"])
    pickled_weights(folder, marker)
    path = folder / "pytorch_model.bin"
    argv = ["evaluate", str(folder), str(beir), "--pooling", "cls", "--no-progress"]
    err = one_line_error(capsys, argv, str(path), "holds pickled Python objects", "never unpickled",
                         "safetensors", "save_pretrained")
    assert "truncated" not in err and "download it again" not in err.lower()
    assert not marker.exists()
    with pytest.raises(PickledObjectsError):
        load_sentence_transformer(folder, pooling="cls")
    # the printed conversion, run as printed (by one who trusts the file), gives a folder that loads
    command = err.split("convert it to safetensors once: ", 1)[1].split(" and remove ", 1)[0]
    subprocess.run(shlex.split(command), check=True, timeout=300)
    assert marker.is_file()  # the user's own torch.load(weights_only=False) unpickled it, as the message warns
    path.unlink()
    converted = RetrievalEncoder(folder, pooling="cls", show_progress_bar=False).model.encode(["dense retrieval"])
    np.testing.assert_array_equal(converted, reference)


def test_pretrain_refuses_a_pickled_backbone_in_one_line(tmp_path, tok, marker, capsys):
    torch.manual_seed(0)
    backbone = tmp_path / "backbone"
    BertForMaskedLM(tiny_bert_config(tok)).save_pretrained(backbone)
    tok.save_pretrained(backbone)
    pickled_weights(backbone, marker)
    argv = ["pretrain", "condenser", "--backbone", str(backbone), "--output-dir", str(tmp_path / "run"),
            "--max-steps", "1", "--use-cpu"]
    one_line_error(capsys, argv, str(backbone / "pytorch_model.bin"), "holds pickled Python objects",
                   "safetensors")
    assert not marker.exists()


def test_evaluate_refuses_a_pickled_dense_module_in_one_line(minilm_path, tmp_path, beir, marker, capsys):
    """A sentence-transformers folder with a Dense module whose weights are a pickle holding an object."""
    model = SentenceTransformer(str(minilm_path), device="cpu")
    from sentence_transformers.base.modules import Dense

    dense = Dense(model.get_embedding_dimension(), 4)
    folder = tmp_path / "with-dense"
    SentenceTransformer(modules=[*model, dense], device="cpu").save(str(folder))
    module = next(p for p in folder.iterdir() if p.name.endswith("_Dense"))
    from safetensors.torch import load_file

    state = load_file(str(module / "model.safetensors"))
    torch.save({**state, "trap": _TouchOnUnpickle(marker)}, module / "pytorch_model.bin")
    (module / "model.safetensors").unlink()
    argv = ["evaluate", str(folder), str(beir), "--no-progress"]
    one_line_error(capsys, argv, str(module / "pytorch_model.bin"), "holds pickled Python objects",
                   "safetensors")
    assert not marker.exists()


def test_resuming_from_pickled_training_state_is_one_line_per_file(tmp_path, small_corpus, marker, capsys):
    from dense_encoders.trainer.output_dir import refuse_pickled_resume_state

    run = tmp_path / "run"
    argv = ["pretrain", "condenser", "--corpus", str(small_corpus), "--output-dir", str(run), "--max-steps", "1",
            "--per-device-train-batch-size", "2", "--save-strategy", "steps", "--save-steps", "1", "--use-cpu",
            "--report-to", "none", "--max-seq-length", "32", "--disable-tqdm", "True"]
    assert run_main(argv) == 0, capsys.readouterr().err
    checkpoint = run / "checkpoint-1"
    refuse_pickled_resume_state(checkpoint)  # what Trainer wrote passes (numpy's RNG arrays included)
    resume = [*argv, "--max-steps", "2", "--resume-from-checkpoint", str(checkpoint)]  # the last --max-steps wins
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        saved = (checkpoint / name).read_bytes()
        state = torch.load(checkpoint / name, weights_only=False)
        torch.save({"state": state, "trap": _TouchOnUnpickle(marker)}, checkpoint / name)
        one_line_error(capsys, resume, str(checkpoint / name), "holds pickled Python objects", f"delete {name}",
                       "another checkpoint")
        assert not marker.exists()
        (checkpoint / name).write_bytes(saved)
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 1  # nothing resumed


# ---- expected differences pass silently ------------------------------------------------------------------------

REPORT_WORDS = ("LOAD REPORT", "UNEXPECTED", "MISSING")


@contextlib.contextmanager
def transformers_log():
    """What transformers logs meanwhile (its handler writes to the stderr of import time, which capfd misses)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_bert_without_pooler_evaluates_and_distills_without_a_load_report(tmp_path, tok, beir, capfd):
    torch.manual_seed(0)
    folder = tmp_path / "mlm"
    BertForMaskedLM(tiny_bert_config(tok)).save_pretrained(folder)  # no pooler, MLM heads: both expected
    tok.save_pretrained(folder)
    with transformers_log() as log:
        BertModel.from_pretrained(folder)  # what transformers itself reports for this folder
    assert "LOAD REPORT" in log.getvalue() and "pooler.dense.weight" in log.getvalue()
    capfd.readouterr()
    with transformers_log() as log:
        assert run_main(["evaluate", str(folder), str(beir), "--pooling", "cls", "--no-progress"]) == 0
        assert run_main(["distill", "--student", str(folder), "--train-file", str(train_file(tmp_path)),
                         "--pooling", "cls", "--losses", "kl", "--output-dir", str(tmp_path / "student"),
                         "--max-steps", "1", "--use-cpu", "--per-device-train-batch-size", "2",
                         "--documents-per-query", "2"]) == 0
    captured = capfd.readouterr()
    everything = captured.out + captured.err + log.getvalue()
    assert not any(word in everything for word in REPORT_WORDS), everything


def test_a_bert_without_pooler_is_the_same_model_at_every_load(tmp_path, tok, beir):
    """transformers initialises the pooler an MLM checkpoint lacks at random; no encoder reads it, and the loader
    zeroes it, so the folder is one model (one fingerprint) from load to load: its corpus and queries encoded in
    two commands are searched together. A pooler the checkpoint holds is kept as saved."""
    torch.manual_seed(0)
    folder = tmp_path / "mlm"
    BertForMaskedLM(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    first, second = (load_sentence_transformer(folder, pooling="cls") for _ in range(2))
    assert model_fingerprint(first) == model_fingerprint(second)
    pooler = first[0].auto_model.pooler.dense
    assert not pooler.weight.any() and not pooler.bias.any()
    bare = BertModel.from_pretrained(folder).eval()  # a random pooler: the embeddings never read it
    features = tok(["dense retrieval with one vector", "rivers"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = bare(**features).last_hidden_state[:, 0]
        assert torch.equal(first(dict(features))["sentence_embedding"], expected)
    for side in ([], ["--queries"]):
        assert run_main(["encode", str(folder), str(beir), *side, "--pooling", "cls", "--output",
                         str(tmp_path / ("queries" if side else "corpus")), "--no-progress"]) == 0
    assert run_main(["search", str(tmp_path / "corpus"), str(tmp_path / "queries"), "--k", "2", "--output",
                     str(tmp_path / "run.trec"), "--no-progress"]) == 0
    with_pooler = tmp_path / "bert"
    BertModel(tiny_bert_config(tok)).save_pretrained(with_pooler)
    tok.save_pretrained(with_pooler)
    saved = BertModel.from_pretrained(with_pooler).pooler.dense.weight
    assert torch.equal(load_sentence_transformer(with_pooler, pooling="cls")[0].auto_model.pooler.dense.weight, saved)


def test_unexpected_differences_are_still_refused(tmp_path, tok):
    """Hiding the report hides nothing that matters: a BERT missing a layer is refused by our check."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    folder = tmp_path / "bert"
    BertModel(tiny_bert_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    state = load_file(str(folder / "model.safetensors"))
    kept = {name: tensor for name, tensor in state.items() if not name.startswith("encoder.layer.1.")}
    save_file(kept, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointWeightsError, match=r"encoder\.layer\.1\."):
        load_sentence_transformer(folder, pooling="cls")
    with pytest.raises(CheckpointWeightsError, match=r"encoder\.layer\.1\."):
        load_checked_model(folder)


def test_an_auto_class_we_do_not_register_is_code_even_in_our_folders(tmp_path):
    """A saved Condenser folder's auto_map names exactly the registered Auto classes, which need no consent; an entry
    for another Auto class would run the folder's code, so it needs consent."""
    folder = tmp_path / "condenser"
    CondenserModel(tiny_condenser_config()).save_pretrained(folder)
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert set(auto_map) == set(OUR_AUTO_CLASSES["condenser"])
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModelForSequenceClassification"] = "modeling_condenser.CondenserForEvil"
    (folder / "config.json").write_text(json.dumps(config))
    found = checkpoint_code(folder)
    assert [(code.role, code.reference) for code in found] == [
        ("AutoModelForSequenceClassification", "modeling_condenser.CondenserForEvil")]
    assert os.fspath(folder / "modeling_condenser.py") in found[0].location
