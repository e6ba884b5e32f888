"""Run records have one home (``data/run_records.py``): written whole (``data/files.py``) in the format they always
had, read by one reader, and the model card is rendered from a typed card-data object (``hub/card_data.py``) that
it fills (``tests/test_import_rules.py`` checks that the names are spelled there only and that no JSON is written
with ``write_text``)."""

from __future__ import annotations

import json
import shutil

import pytest

from dense_encoders.data.run_records import (
    DISTILLATION_LOSSES,
    DISTILLATION_SETUP,
    EARLIER_STAGES,
    RECORD_FILES,
    TRAINER_STATE,
    TRAINING_ARGS,
    RunRecords,
    read_run_records,
    write_record,
    write_results,
)


def test_records_keep_their_format_bytes_for_bytes(tmp_path):
    """A setup record as ``json.dumps(value, indent=2)`` in the run's key order, ``training_args.json`` with
    sorted keys, a results JSON with its non-ASCII characters as they are: the formats the files always had."""
    value = {"z": 1, "a": ["é", None], "m": {"y": 2.5, "b": True}}
    write_record(tmp_path, DISTILLATION_SETUP, value)
    assert (tmp_path / DISTILLATION_SETUP).read_bytes() == (json.dumps(value, indent=2) + "\n").encode("ascii")
    write_record(tmp_path, TRAINING_ARGS, value)
    assert (tmp_path / TRAINING_ARGS).read_bytes() == (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
    write_results(tmp_path / "evaluation" / "toy.json", value)
    assert (tmp_path / "evaluation" / "toy.json").read_text(encoding="utf-8") == (
        json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    with pytest.raises(ValueError, match="not a run record"):
        write_record(tmp_path, "notes.json", value)


def test_a_failed_record_write_leaves_the_earlier_record(tmp_path):
    write_record(tmp_path, DISTILLATION_LOSSES, [{"name": "kl"}])
    before = (tmp_path / DISTILLATION_LOSSES).read_bytes()
    with pytest.raises(TypeError):
        write_record(tmp_path, DISTILLATION_LOSSES, [{"name": object()}])
    assert (tmp_path / DISTILLATION_LOSSES).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [DISTILLATION_LOSSES]  # no scratch file left


def test_one_reader_fills_every_record(tmp_path):
    """``read_run_records`` reads each record file into its field (and nothing for what the folder lacks)."""
    written = {name: {"record": name} for name in RECORD_FILES}
    written[DISTILLATION_LOSSES], written[EARLIER_STAGES] = [{"name": "kl"}], [{"model": "first"}]
    for name, value in written.items():
        write_record(tmp_path, name, value)
    write_results(tmp_path / "evaluation" / "toy.json", {"format": "dense-encoders/retrieval-results/v1", "x": 1})
    write_results(tmp_path / "evaluation" / "other.json", {"format": "something else"})
    records = read_run_records(tmp_path)
    fields = {"conversion": "conversion.json", "trainer_state": "trainer_state.json",
              "training_args": "training_args.json", "training_environment": "training_environment.json",
              "pretraining": "pretraining_setup.json", "distillation": "distillation_setup.json",
              "distillation_losses": "distillation_losses.json",
              "distillation_positives": "distillation_positives.json", "infusion": "infusion_setup.json",
              "infusion_report": "report.json", "earlier_stages": "earlier_stages.json",
              "warm_start": "warm_start.json"}
    assert set(fields.values()) == set(RECORD_FILES)
    for field, name in fields.items():
        assert getattr(records, field) == written[name], field
    assert records.evaluations == [(str(tmp_path / "evaluation" / "toy.json"),
                                    {"format": "dense-encoders/retrieval-results/v1", "x": 1})]
    assert read_run_records(tmp_path / "empty") == RunRecords()
    with pytest.raises(FileNotFoundError, match="missing.json"):
        read_run_records(tmp_path, results=[tmp_path / "missing.json"])


BERT_CONFIG = {"model_type": "bert", "architectures": ["BertModel"], "num_hidden_layers": 2, "hidden_size": 32}
DISTILLATION = {"losses": "margin_mse+kl", "train_file": "train.jsonl", "teacher": "org/teacher",
                "sources": {"teacher": {"name": "org/teacher", "hub": True, "revision": "0123456789abcdef"}},
                "teacher_kind": "cross-encoder", "documents_per_query": 8, "query_max_length": 32,
                "document_max_length": 256}
LOSSES = [{"name": "kl", "display_name": "KL divergence", "weight": 1, "equation": "KL(p || q)",
           "citation": "Hinton et al. 2015"}]
STATE = {"global_step": 7, "epoch": 1.0, "log_history": [{"step": 7, "loss": 0.5, "learning_rate": 1e-5}]}


def test_the_card_is_rendered_from_the_card_data_alone(tmp_path):
    """The card of a folder is the card of its card data: rendering one built by hand (no folder) gives the text
    that the folder holding the same records gets, and that text states the records' facts."""
    from dense_encoders.hub.card_data import DenseEncoderCardData
    from dense_encoders.hub.cards import model_card, render_card

    data = DenseEncoderCardData(model_name="me/student", config=BERT_CONFIG, pooling="cls", similarity="cosine",
                                normalized=True, records=RunRecords(distillation=DISTILLATION,
                                                                    distillation_losses=LOSSES, trainer_state=STATE))
    text = render_card(data).text
    assert "- distillation losses: `margin_mse+kl` (teacher scores from `train.jsonl`)" in text
    assert "  - KL divergence (weight 1): `KL(p || q)`; Hinton et al. 2015" in text
    assert "- teacher: the cross-encoder `org/teacher` at revision `0123456789ab`" in text
    assert "- optimizer steps: 7, epochs: 1.0" in text
    assert "cls pooling, cosine similarity" in text

    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(BERT_CONFIG))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "cls"}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "cosine"}))
    write_record(folder, DISTILLATION_SETUP, DISTILLATION)
    write_record(folder, DISTILLATION_LOSSES, LOSSES)
    write_record(folder, TRAINER_STATE, STATE)
    assert model_card(folder, repo_id="me/student").text == text


def test_card_data_of_our_folder_without_sentence_transformers_files_is_what_a_push_adds(tmp_path, tok):
    """One of our models saved without its sentence-transformers files: the card data holds the pipeline a push
    adds (read from those files' texts), the same as reading a folder that holds them."""
    from dense_encoders.checkpoints.folder import (
        SENTENCE_TRANSFORMERS_FILES,
        missing_sentence_transformers_files,
        read_pipeline,
    )
    from dense_encoders.hub.card_data import DenseEncoderCardData
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).save_pretrained(folder)
    for name in SENTENCE_TRANSFORMERS_FILES:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    shutil.rmtree(folder / "1_Pooling", ignore_errors=True)
    assert read_pipeline(folder) == {}
    reference = tmp_path / "pushed"
    shutil.copytree(folder, reference)
    for relative, text in missing_sentence_transformers_files(folder).items():
        (reference / relative).parent.mkdir(parents=True, exist_ok=True)
        (reference / relative).write_text(text, encoding="utf-8")
    expected = read_pipeline(reference)
    before = sorted(folder.rglob("*"))
    data = DenseEncoderCardData.from_folder(folder)
    assert expected["pooling"] is not None
    assert (data.pooling, data.similarity, data.normalized) == (
        expected["pooling"], expected["similarity"], expected["normalize"])
    assert sorted(folder.rglob("*")) == before  # read, nothing written

