"""Loading is strict: a checkpoint whose weights miss or add tensors of its model is an error (evaluate,
distill, score-teacher, layer-wise embeddings), unless --allow-missing-weights; the expected differences print
nothing. The check without loading (file headers, a model on the meta device) and the check of a load
(``output_loading_info``) agree."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

import pytest
import torch
from conftest import tiny_condenser_config
from safetensors.torch import load_file, save_file
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from dense_encoders import CondenserForPreTraining, CondenserModel
from dense_encoders.checkpoints.loading import load_checked_model
from dense_encoders.checkpoints.tite_backbone import tite_from_backbone
from dense_encoders.checkpoints.weights import CheckpointWeightsError, check_checkpoint_weights
from dense_encoders.cli import main
from dense_encoders.evaluation import RetrievalEncoder
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
        CondenserForPreTraining.from_backbone(tmp_path / "mlm", skip_from=1).save_pretrained(tmp_path / "condenser")
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
