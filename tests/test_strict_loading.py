"""Loading is strict: a checkpoint whose weights miss or add tensors of its model is an error (evaluate,
distill, score-teacher, layer-wise embeddings), unless --allow-missing-weights; the expected differences print
nothing. The check without loading (file headers, a model on the meta device) and the check of a load
(``output_loading_info``) agree."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from pathlib import Path

import pytest
import torch
from conftest import tiny_condenser_config
from safetensors.torch import load_file, save_file
from test_checkpoint_folder import tiny_infused_config
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from dense_encoders import CoCondenserForPreTraining, CondenserForPreTraining, CondenserModel
from dense_encoders.checkpoints.backbones import condenser_from_backbone, tite_from_backbone
from dense_encoders.checkpoints.loading import load_checked_model
from dense_encoders.checkpoints.weights import CheckpointWeightsError, check_checkpoint_weights
from dense_encoders.cli import main
from dense_encoders.evaluation import RetrievalEncoder
from dense_encoders.models.infused import InfusedDualEncoderModel
from dense_encoders.models.tite import TiteForPreTraining, TiteModel, tite_preset

REPORT_WORDS = ("LOAD REPORT", "UNEXPECTED", "MISSING", "seem corrupted", "missing keys")


def edit_weights(folder: Path, *, drop: str | None = None, add: str | None = None) -> list[str]:
    """Rewrite ``folder/model.safetensors`` without the tensors whose names start with ``drop`` / with an extra
    tensor ``add``; returns the dropped names."""
    path = folder / "model.safetensors"
    state = load_file(str(path))
    dropped = sorted(name for name in state if drop is not None and name.startswith(drop))
    for name in dropped:
        del state[name]
    if add is not None:
        state[add] = torch.zeros(3)
    save_file(state, str(path), metadata={"format": "pt"})
    return dropped


def bert_config(tok, **overrides) -> BertConfig:
    settings = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
    return BertConfig(**{**settings, **overrides})


@pytest.fixture
def tite_folder(tmp_path, tok) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def no_report(text: str) -> bool:
    return not any(word in text for word in REPORT_WORDS)


@contextlib.contextmanager
def transformers_log():
    """Everything transformers logs meanwhile (its handler writes to the stderr of import time, which
    capfd does not see); our own loggers propagate to the root logger (caplog). transformers' verbosity is
    held at WARNING meanwhile: an earlier test (a Trainer's log level) may have lowered it to ERROR."""
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


def test_the_capture_sees_a_load_report(tmp_path, tok):
    BertForMaskedLM(bert_config(tok)).save_pretrained(tmp_path)
    with transformers_log() as log:
        BertModel.from_pretrained(tmp_path)
    assert "LOAD REPORT" in log.getvalue() and "UNEXPECTED" in log.getvalue()


# ---- a damaged folder is an error, with the keys and the fix -----------------------------------


@pytest.mark.parametrize("family, layer", [("condenser", "encoder.layer.1."), ("tite", "layers.1.")])
def test_a_deleted_layer_is_refused_and_allow_missing_weights_loads_it(family, layer, request, caplog):
    folder = request.getfixturevalue(f"{family}_folder")
    dropped = edit_weights(folder, drop=layer)
    assert len(dropped) > 5
    with pytest.raises(CheckpointWeightsError) as refused:
        RetrievalEncoder(folder, show_progress_bar=False)
    message = str(refused.value)
    assert isinstance(refused.value, ValueError) and "\n" not in message
    assert str(folder / "model.safetensors") in message
    assert f"{len(dropped)} tensors of the model are missing" in message
    assert dropped[0] in message and f"(+{len(dropped) - 5} more)" in message
    assert "--allow-missing-weights" in message and "allow_missing_weights=True" in message
    with caplog.at_level(logging.WARNING):
        encoder = RetrievalEncoder(folder, show_progress_bar=False, allow_missing_weights=True)
    assert encoder.model is not None
    assert "allow_missing_weights" in caplog.text and dropped[0] in caplog.text


@pytest.mark.parametrize("family, layer", [("condenser", "encoder.layer.1."), ("tite", "layers.1.")])
@pytest.mark.parametrize("layout", ["sentence-transformers files", "native pipeline"])
def test_allow_missing_weights_through_sentence_transformers_warns_once(family, layer, layout, request, tmp_path,
                                                                        caplog):
    """``dense-encoders encode FOLDER ... --allow-missing-weights`` checks the folder (which names the differences)
    and then loads it with sentence-transformers, where the model class is allowed the same partial checkpoint: one
    warning, not the check's and the model class's (``StrictLoadingMixin``) again."""
    folder = request.getfixturevalue(f"{family}_folder")
    if layout == "native pipeline":
        (folder / "modules.json").unlink()
    dropped = edit_weights(folder, drop=layer)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                              for i, text in enumerate(["dense retrieval", "a teacher scores documents"])))
    argv = ["encode", str(folder), str(corpus), "--output", str(tmp_path / "embeddings"), "--no-progress",
            "--allow-missing-weights"]
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    warnings = [record for record in caplog.records if dropped[0] in record.getMessage()]
    assert len(warnings) == 1, [f"{record.name}: {record.getMessage()[:80]}" for record in warnings]
    assert "allow_missing_weights" in warnings[0].getMessage() and warnings[0].levelno == logging.WARNING


def test_an_extra_tensor_is_refused(condenser_folder):
    edit_weights(condenser_folder, add="encoder.layer.0.attention.extra.weight")
    with pytest.raises(CheckpointWeightsError, match=r"1 tensors in the file are not in the model \(encoder\.layer\.0\."
                                                     r"attention\.extra\.weight\)"):
        RetrievalEncoder(condenser_folder, show_progress_bar=False)


def test_a_truncated_weights_file_names_the_file(condenser_folder):
    path = condenser_folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointWeightsError) as refused:
        RetrievalEncoder(condenser_folder, show_progress_bar=False)
    message = str(refused.value)
    assert str(path) in message and "truncated or corrupt" in message and "\n" not in message


def test_sentence_transformers_folders_are_checked_through_their_transformer_module(condenser_folder, tok):
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    write_sentence_transformers_files(condenser_folder, pooling="cls", similarity="dot")
    assert (condenser_folder / "modules.json").is_file()
    assert check_checkpoint_weights(condenser_folder)["missing_keys"] == []
    edit_weights(condenser_folder, drop="encoder.layer.0.output.")
    with pytest.raises(CheckpointWeightsError, match="encoder.layer.0.output.LayerNorm.bias"):
        RetrievalEncoder(condenser_folder, show_progress_bar=False)


def test_cli_evaluate_refuses_a_damaged_folder(condenser_folder, tmp_path, capsys):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    documents = ["dense retrieval encodes text", "a teacher scores documents", "pooling inside the layers"]
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i, text in enumerate(documents)))
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "what is dense retrieval"}) + "\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    dropped = edit_weights(condenser_folder, drop="encoder.layer.1.")
    output = tmp_path / "results.json"
    argv = ["evaluate", str(condenser_folder), str(data), "--k", "3", "--no-progress", "--output", str(output)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dense-encoders evaluate: error:" in err and dropped[0] in err and "--allow-missing-weights" in err
    assert not output.exists()  # no number from a partly loaded model
    assert main(argv + ["--allow-missing-weights"]) == 0
    assert output.is_file()


@pytest.mark.parametrize("family, layer", [("condenser", "encoder.layer.1."), ("tite", "layers.1.")])
def test_a_load_is_refused_with_the_message_of_the_check_without_loading(family, layer, request, caplog):
    folder = request.getfixturevalue(f"{family}_folder")
    dropped = edit_weights(folder, drop=layer)
    with pytest.raises(CheckpointWeightsError) as checked:
        check_checkpoint_weights(folder)
    with pytest.raises(CheckpointWeightsError) as loaded:
        load_checked_model(folder)
    assert str(loaded.value) == str(checked.value)
    assert f"{len(dropped)} tensors of the model are missing ({', '.join(dropped[:5])}, ..." in str(loaded.value)
    with caplog.at_level(logging.WARNING):
        model = load_checked_model(folder, allow_missing_weights=True)
    assert type(model).__name__ == {"condenser": "CondenserModel", "tite": "TiteModel"}[family]
    assert "allow_missing_weights" in caplog.text and dropped[0] in caplog.text
    saved = load_file(str(folder / "model.safetensors"))
    for name, tensor in saved.items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_layerwise_embeddings_refuse_damaged_dual_and_cross_encoders(condenser_folder, tmp_path, tok):
    from dense_encoders.evaluation.layerwise import dual_encoder_layerwise_embeddings, layerwise_embeddings

    dropped = edit_weights(condenser_folder, drop="encoder.layer.0.attention.")
    with pytest.raises(CheckpointWeightsError) as refused:
        dual_encoder_layerwise_embeddings(str(condenser_folder), ["dense retrieval"])
    message = str(refused.value)
    assert str(condenser_folder / "model.safetensors") in message and dropped[0] in message
    assert f"{len(dropped)} tensors of the model are missing" in message
    torch.manual_seed(0)
    folder = tmp_path / "cross-encoder"
    BertForSequenceClassification(bert_config(tok, num_labels=1)).save_pretrained(folder)
    tok.save_pretrained(folder)
    edit_weights(folder, drop="classifier.")
    with pytest.raises(CheckpointWeightsError, match=r"2 tensors of the model are missing \(classifier\.bias, "
                                                     r"classifier\.weight\)"):
        layerwise_embeddings(str(folder), ["dense retrieval"])


def test_loads_of_complete_and_expected_folders_keep_every_saved_tensor(tmp_path, tok):
    torch.manual_seed(0)
    bert_mlm, bert = BertForMaskedLM(bert_config(tok)), BertModel(bert_config(tok))
    bert_mlm.save_pretrained(tmp_path / "bert-mlm")  # heads of a task checkpoint, no pooler: expected
    bert.save_pretrained(tmp_path / "bert")
    for name, reference in (("bert-mlm", bert_mlm.bert), ("bert", bert)):
        loaded = load_checked_model(tmp_path / name)
        assert type(loaded) is BertModel, name
        for key, tensor in reference.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], tensor), (name, key)
    with pytest.raises(CheckpointWeightsError, match=r"classifier\.bias, classifier\.weight"):
        load_checked_model(tmp_path / "bert", auto_class="AutoModelForSequenceClassification")


# ---- what is expected passes, silently ---------------------------------------------------------


def test_complete_and_expected_folders_pass(tmp_path, tok):
    torch.manual_seed(0)
    folders = {
        "condenser-pretraining": CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok))),
        "tite-pretraining": TiteForPreTraining(tite_preset("tiny-tite-2-late", vocab_size=len(tok))),
        "bert-mlm": BertForMaskedLM(bert_config(tok)),  # heads of a task checkpoint, no pooler
        "bert-no-pooler": BertModel(bert_config(tok), add_pooling_layer=False),  # a distilled student
        "bert": BertModel(bert_config(tok)),
    }
    for name, model in folders.items():
        model.save_pretrained(tmp_path / name)
        report = check_checkpoint_weights(tmp_path / name)
        assert report["missing_keys"] == [] and report["unexpected_keys"] == [], name
    BertModel(bert_config(tok)).save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    report = check_checkpoint_weights(tmp_path / "sharded")
    assert len(report["files"]) > 1 and report["missing_keys"] == []
    BertForSequenceClassification(bert_config(tok)).save_pretrained(tmp_path / "ce")
    assert check_checkpoint_weights(tmp_path / "ce",
                                    auto_class="AutoModelForSequenceClassification")["missing_keys"] == []
    # a plain encoder is not a cross-encoder: its classifier would be random
    with pytest.raises(CheckpointWeightsError, match=r"classifier\.bias, classifier\.weight"):
        check_checkpoint_weights(tmp_path / "bert", auto_class="AutoModelForSequenceClassification")


def test_warm_starts_and_encoder_loads_print_no_load_report(tmp_path, tok, capfd, caplog):
    torch.manual_seed(0)
    BertModel(bert_config(tok)).save_pretrained(tmp_path / "bert")  # with a pooler
    BertForMaskedLM(bert_config(tok)).save_pretrained(tmp_path / "mlm")  # with cls.predictions.*
    capfd.readouterr()
    with caplog.at_level(logging.WARNING), transformers_log() as log:
        tite_from_backbone(tmp_path / "bert")
        tite_pretraining = tite_from_backbone(tmp_path / "mlm", model_class=TiteForPreTraining)
        tite_pretraining.save_pretrained(tmp_path / "tite-pretraining")
        condenser_from_backbone(tmp_path / "mlm", skip_from=1).save_pretrained(tmp_path / "condenser")
        AutoModel.from_pretrained(tmp_path / "tite-pretraining")  # what `pretrain tite` does at its end
        AutoModel.from_pretrained(tmp_path / "condenser")
        CondenserForPreTraining.from_pretrained(tmp_path / "condenser")
    captured = capfd.readouterr()
    everything = captured.out + captured.err + caplog.text + log.getvalue()
    assert no_report(everything), everything


def test_a_headless_condenser_gives_its_one_warning_and_no_report(tmp_path, capfd, caplog):
    CondenserModel(tiny_condenser_config()).save_pretrained(tmp_path)
    capfd.readouterr()
    with caplog.at_level(logging.WARNING), transformers_log() as log:
        model = CondenserForPreTraining.from_pretrained(tmp_path)
    captured = capfd.readouterr()
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "FRESHLY INITIALISED" in warnings[0] and "c_head" in warnings[0], warnings
    assert no_report(captured.out + captured.err + log.getvalue()), log.getvalue()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


@pytest.mark.parametrize("architecture", ["condenser", "tite"])
def test_resuming_does_not_report_the_tied_decoders_as_missing(architecture, tmp_path, tok, capfd):
    from transformers import TrainingArguments

    from dense_encoders.trainer.pretraining import PreTrainingTrainer

    torch.manual_seed(0)
    if architecture == "condenser":
        model = CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok)))
    else:
        model = TiteForPreTraining(tite_preset("tiny-tite-2-late", vocab_size=len(tok)))
    model.save_pretrained(tmp_path / "checkpoint")
    torch.manual_seed(1)
    fresh = type(model)(model.config)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none")
    trainer = PreTrainingTrainer(model=fresh, args=args)
    capfd.readouterr()
    with transformers_log() as log:
        trainer._load_from_checkpoint(str(tmp_path / "checkpoint"))
    captured = capfd.readouterr()
    assert no_report(captured.out + captured.err + log.getvalue()), log.getvalue()
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name
    decoder = fresh.get_output_embeddings().weight
    word_table = fresh.get_input_embeddings().weight
    assert decoder.data_ptr() == word_table.data_ptr()


# ---- distill and score-teacher refuse too ------------------------------------------------------


def test_distill_refuses_a_damaged_student(condenser_folder, tmp_path, capsys):
    from dense_encoders.trainer.distillation import DistillationSetup, build_student

    dropped = edit_weights(condenser_folder, drop="encoder.layer.0.attention.")
    train_file = tmp_path / "train.jsonl"
    train_file.write_text(json.dumps({"query": "q", "documents": ["a", "b"], "scores": [1.0, 0.0]}) + "\n")
    setup = DistillationSetup(student=str(condenser_folder), train_file=str(train_file), losses="kl")
    with pytest.raises(CheckpointWeightsError, match=dropped[0].replace(".", r"\.")):
        build_student(setup)
    setup.allow_missing_weights = True
    assert build_student(setup).encoder is not None
    argv = ["distill", "--student", str(condenser_folder), "--train_file", str(train_file), "--losses", "kl",
            "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--use_cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert dropped[0] in err and "--allow-missing-weights" in err


def test_score_teacher_refuses_a_cross_encoder_without_its_classifier(tmp_path, tok, capsys):
    from dense_encoders.trainer.teacher import score_teacher

    torch.manual_seed(0)
    folder = tmp_path / "cross-encoder"
    BertForSequenceClassification(bert_config(tok, num_labels=1)).save_pretrained(folder)
    tok.save_pretrained(folder)
    edit_weights(folder, drop="classifier.")
    run = tmp_path / "run.trec"
    run.write_text("q0 Q0 d0 1 2.0 bm25\nq0 Q0 d1 2 1.0 bm25\n")
    queries = {"q0": "what is dense retrieval"}
    corpus = {"d0": {"title": "", "text": "dense retrieval"}, "d1": {"title": "", "text": "sparse retrieval"}}
    output = tmp_path / "teacher.jsonl"
    with pytest.raises(CheckpointWeightsError, match=r"classifier\.bias, classifier\.weight"):
        score_teacher(str(folder), run, output, queries=queries, corpus=corpus, show_progress_bar=False)
    assert not output.exists()
    stats = score_teacher(str(folder), run, output, queries=queries, corpus=corpus, show_progress_bar=False,
                          allow_missing_weights=True)
    assert stats["queries_written"] == 1
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": queries["q0"]}) + "\n")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, **v}) + "\n" for k, v in corpus.items()))
    argv = ["score-teacher", str(folder), "--run", str(run), "--queries", str(tmp_path / "queries.jsonl"),
            "--corpus", str(tmp_path / "corpus.jsonl"), "--output", str(tmp_path / "cli.jsonl"), "--no-progress"]
    assert main(argv) == 2
    assert "classifier.bias" in capsys.readouterr().err
    assert main(argv + ["--allow-missing-weights"]) == 0


# ---- pre-training's --init_from and distillation's resume load through the one checked loader ------------


def test_pretraining_init_from_refuses_a_damaged_checkpoint_and_keeps_a_complete_one(tmp_path, tok):
    from dense_encoders.trainer.pretraining import PreTrainingSetup, build_model

    torch.manual_seed(0)
    saved = CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok)))
    saved.save_pretrained(tmp_path / "complete")
    model = build_model(PreTrainingSetup(architecture="condenser", init_from=str(tmp_path / "complete")), len(tok))
    assert type(model) is CondenserForPreTraining
    for name, tensor in saved.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    saved.save_pretrained(tmp_path / "damaged")
    dropped = edit_weights(tmp_path / "damaged", drop="bert.encoder.layer.1.")
    with pytest.raises(CheckpointWeightsError) as refused:
        build_model(PreTrainingSetup(architecture="condenser", init_from=str(tmp_path / "damaged")), len(tok))
    message = str(refused.value)
    assert str(tmp_path / "damaged" / "model.safetensors") in message and dropped[0] in message
    assert f"{len(dropped)} tensors of the model are missing" in message and "--allow-missing-weights" in message


def test_the_model_classes_refuse_with_the_message_of_the_package(condenser_folder):
    """One rule and one message: ``CondenserModel.from_pretrained`` (the remote code's StrictLoadingMixin, no
    package) and the package's loader say the same about the same folder."""
    dropped = edit_weights(condenser_folder, drop="encoder.layer.1.")
    with pytest.raises(CheckpointWeightsError) as package:
        load_checked_model(condenser_folder)
    with pytest.raises(ValueError) as model_class:
        CondenserModel.from_pretrained(condenser_folder)
    assert str(model_class.value) == str(package.value)
    assert f"{len(dropped)} tensors of the model are missing" in str(model_class.value)


def test_distill_resume_refuses_a_damaged_checkpoint_and_restores_a_complete_one(condenser_folder, tmp_path):
    from dense_encoders.trainer.distillation import (
        DistillationArguments,
        DistillationTrainer,
        DualEncoder,
    )

    torch.manual_seed(1)
    saved = CondenserModel(CondenserModel.from_pretrained(condenser_folder).config)  # other weights than the student
    saved.save_pretrained(tmp_path / "checkpoint")
    student = DualEncoder(CondenserModel.from_pretrained(condenser_folder), "pooler", "dot")
    args = DistillationArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none")
    trainer = DistillationTrainer(model=student, args=args, objective="kl")
    trainer._load_from_checkpoint(str(tmp_path / "checkpoint"))
    for name, tensor in saved.state_dict().items():
        assert torch.equal(student.encoder.state_dict()[name], tensor), name
    dropped = edit_weights(tmp_path / "checkpoint", drop="encoder.layer.0.attention.")
    with pytest.raises(CheckpointWeightsError) as refused:
        trainer._load_from_checkpoint(str(tmp_path / "checkpoint"))
    message = str(refused.value)
    assert str(tmp_path / "checkpoint" / "model.safetensors") in message and dropped[0] in message


# ---- transformers' own ways of loading: a state_dict without a checkpoint, consent to resized tensors (issue 42) ----

MODEL_CLASSES = {  # the reference, BertModel, then every model class of ours; tiny, vocabulary 120
    "bert": lambda: (BertModel, BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=64, max_position_embeddings=64)),
    "condenser": lambda: (CondenserModel, tiny_condenser_config()),
    "condenser-pretraining": lambda: (CondenserForPreTraining, tiny_condenser_config()),
    "cocondenser-pretraining": lambda: (CoCondenserForPreTraining, tiny_condenser_config()),
    "tite-late": lambda: (TiteModel, tite_preset("tiny-tite-2-late", vocab_size=120)),
    "tite-staggered": lambda: (TiteModel, tite_preset("tiny-tite-2-staggered", vocab_size=120)),
    "tite-pretraining": lambda: (TiteForPreTraining, tite_preset("tiny-tite-2-late", vocab_size=120)),
    "infused": lambda: (InfusedDualEncoderModel, tiny_infused_config(120)),
}
OURS = [name for name in MODEL_CLASSES if name != "bert"]


def word_embeddings_key(model) -> str:
    """The state-dict name of the input word embeddings (the tensor a checkpoint with added tokens resizes)."""
    table = model.get_input_embeddings().weight
    return next(key for key, tensor in model.state_dict().items()
                if tensor.data_ptr() == table.data_ptr() and key.endswith("word_embeddings.weight"))


@pytest.mark.parametrize("name", MODEL_CLASSES)
def test_from_pretrained_without_a_checkpoint_takes_the_state_dict_as_bert_model_does(name):
    """``from_pretrained(None, config=..., state_dict=...)``, transformers' load of weights held in memory."""
    model_class, config = MODEL_CLASSES[name]()
    torch.manual_seed(0)
    saved = model_class(config)
    loaded = model_class.from_pretrained(None, config=config, state_dict=saved.state_dict())
    assert type(loaded) is model_class
    assert loaded.state_dict().keys() == saved.state_dict().keys()
    for key, tensor in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


@pytest.mark.parametrize("name", OURS)
def test_a_partial_state_dict_is_refused_unless_allowed(name, caplog):
    model_class, config = MODEL_CLASSES[name]()
    torch.manual_seed(0)
    saved = model_class(config)
    layer = "layers.1." if "tite" in name else "layer.1."
    state = {key: tensor for key, tensor in saved.state_dict().items() if layer not in key}
    dropped = sorted(set(saved.state_dict()) - set(state))
    assert dropped
    with pytest.raises(ValueError) as refused:
        model_class.from_pretrained(None, config=config, state_dict=state)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("the state_dict given to from_pretrained does not match")
    assert dropped[0] in message and "allow_missing_weights=True" in message
    with caplog.at_level(logging.WARNING):
        loaded = model_class.from_pretrained(None, config=config, state_dict=state, allow_missing_weights=True)
    assert dropped[0] in caplog.text
    for key, tensor in state.items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


def resize_in_file(folder: Path, key: str, extra_rows: int = 5) -> None:
    """Give the tensor ``key`` of ``folder/model.safetensors`` ``extra_rows`` more rows (zeros): a checkpoint whose
    vocabulary grew while its config did not."""
    path = folder / "model.safetensors"
    state = load_file(str(path))
    rows, columns = state[key].shape
    state[key] = torch.zeros(rows + extra_rows, columns)
    save_file(state, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("name", MODEL_CLASSES)
def test_ignore_mismatched_sizes_reinitialises_a_resized_tensor_and_reports_it_as_bert_model_does(name, tmp_path):
    model_class, config = MODEL_CLASSES[name]()
    torch.manual_seed(0)
    saved = model_class(config)
    saved.save_pretrained(tmp_path)
    key = word_embeddings_key(saved)
    resize_in_file(tmp_path, key)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):  # without consent transformers refuses
        model_class.from_pretrained(tmp_path)
    with transformers_log() as log:
        loaded = model_class.from_pretrained(tmp_path, ignore_mismatched_sizes=True)
    reported = [line for line in log.getvalue().splitlines() if key in line]
    assert len(reported) == 1 and "Reinit due to size mismatch" in reported[0], log.getvalue()
    resized = loaded.state_dict()[key]
    fresh = saved.state_dict()[key]
    assert resized.shape == fresh.shape and torch.isfinite(resized).all()
    # re-initialised as the model initialises it (normal, std initializer_range), not the file's zeros
    assert abs(resized.std().item() / fresh.std().item() - 1) < 0.2
    for other, tensor in saved.state_dict().items():
        if tensor.data_ptr() != saved.state_dict()[key].data_ptr():  # the tensor and the decoders tied to it
            assert torch.equal(loaded.state_dict()[other], tensor), other
    if loaded.get_output_embeddings() is not None:
        assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight


@pytest.mark.parametrize("name", ["condenser", "tite-pretraining", "infused"])
def test_ignore_mismatched_sizes_consents_to_resized_tensors_only(name, tmp_path):
    """A checkpoint with a resized tensor and a deleted layer: the consent covers the resized tensor, the missing
    layer is refused still (and the resized tensor is not called missing)."""
    model_class, config = MODEL_CLASSES[name]()
    torch.manual_seed(0)
    saved = model_class(config)
    saved.save_pretrained(tmp_path)
    key = word_embeddings_key(saved)
    resize_in_file(tmp_path, key)
    prefix = key.split("embeddings.")[0]  # "tite." in a pre-training checkpoint
    dropped = edit_weights(tmp_path, drop=prefix + ("layers.1." if "tite" in name else "encoder.layer.1."))
    assert dropped
    with pytest.raises(ValueError) as refused:
        model_class.from_pretrained(tmp_path, ignore_mismatched_sizes=True)
    message = str(refused.value)
    assert f"{len(dropped)} tensors of the model are missing" in message and dropped[0] in message
    assert key not in message


def test_a_checkpoint_whose_tensor_has_another_shape_is_one_line_not_a_traceback(tmp_path, tok, capsys):
    """Weights saved with another config (a vocabulary resized after config.json was written): transformers raises a
    RuntimeError pointing at a printed table; every checked load (the CLI's, load_checked_model) refuses it in one
    line naming the tensor and both shapes, and never loads it at random."""
    torch.manual_seed(0)
    folder = tmp_path / "resized"
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tok.save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    key = "embeddings.word_embeddings.weight"
    weights[key] = torch.cat([weights[key], torch.zeros(5, 32)])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    expected = (f"{folder / 'model.safetensors'} does not fit BertModel, the model its config.json describes: 1 "
                f"tensors have another shape ({key} (file ({len(tok) + 5}, 32), model ({len(tok)}, 32)))")
    with pytest.raises(CheckpointWeightsError, match=re.escape(expected)):
        load_checked_model(folder)
    with pytest.raises(CheckpointWeightsError, match=re.escape(expected)):
        check_checkpoint_weights(folder)
    texts = tmp_path / "texts.txt"
    texts.write_text("dense retrieval\nriver mountain\n")
    capsys.readouterr()
    assert main(["encode", str(folder), str(texts), "--output", str(tmp_path / "emb"), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err and expected in captured.err
    assert "LOAD REPORT" not in captured.out + captured.err  # transformers' table is not printed beside it
    assert not (tmp_path / "emb").exists()
