"""DistillationTrainer: pooling, the loss it optimises, gradient accumulation and checkpointing,
two processes vs one, the collator, the CLI, and the saved student."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT64_TOLERANCE, cpu_only_env, float32_atol
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

from dense_encoders.cli import main
from dense_encoders.data.distillation import DistillationCollator, sample_documents, training_records_to_dataset
from dense_encoders.trainer.distillation import (
    DistillationArguments,
    DistillationTrainer,
    DualEncoder,
    keep_first_layers,
)
from dense_encoders.trainer.losses import DistillationObjective, kl_divergence_loss, margin_mse_loss

REPO_ROOT = Path(__file__).resolve().parents[1]
WORDS = ("retrieval dense sparse vector index query passage document ranking teacher student model "
         "score margin loss batch token encoder pooling attention layer").split()


def make_records(num_queries=4, num_documents=5, seed=0):
    rng = np.random.default_rng(seed)
    records = []
    for q in range(num_queries):
        documents = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 12)))) for _ in range(num_documents)]
        scores = sorted((float(x) for x in rng.normal(0, 3, size=num_documents)), reverse=True)
        records.append({"query_id": f"q{q}", "query": " ".join(rng.choice(WORDS, size=4)),
                        "document_ids": [f"q{q}d{i}" for i in range(num_documents)],
                        "documents": documents, "scores": scores})
    return records


def write_training_file(path: Path, records) -> Path:
    path.write_text("".join(json.dumps({k: r[k] for k in ("query_id", "query", "documents", "scores")}) + "\n"
                            for r in records))
    return path


def tiny_bert(tok, seed=0, dtype=torch.float32, **overrides):
    torch.manual_seed(seed)
    settings = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    settings.update(overrides)
    return BertModel(BertConfig(**settings), add_pooling_layer=False).to(dtype)


@pytest.fixture
def bert_student_folder(tmp_path, tok):
    folder = tmp_path / "student"
    tiny_bert(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def float64_student_folder(tmp_path, tok):
    """The same student saved in float64: ``from_pretrained`` keeps the checkpoint's dtype (equivalence tests)."""
    folder = tmp_path / "student64"
    tiny_bert(tok, dtype=torch.float64).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# ---- pooling and the student module -------------------------------------------------------


@pytest.mark.numerics
def test_dual_encoder_pooling_and_similarity(tok):
    encoder = tiny_bert(tok).eval()
    batch = tok(["a short text", "a somewhat longer text with more tokens"], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        mean = (states * mask).sum(1) / mask.sum(1)
        for pooling, similarity, expected in [
            ("cls", "dot", states[:, 0]),
            ("mean", "dot", mean),
            ("mean", "cosine", F.normalize(mean, dim=-1)),
        ]:
            got = DualEncoder(encoder, pooling, similarity).encode(batch["input_ids"], batch["attention_mask"])
            torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="pooling='pooler' is for this package's models"):
        DualEncoder(encoder, "pooler")
    with pytest.raises(ValueError, match="similarity='l2'"):
        DualEncoder(encoder, "cls", "l2")


@pytest.mark.numerics
def test_tite_student_uses_its_vector(tok):
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    torch.manual_seed(0)
    tite = TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).eval()
    batch = tok(["a text", "another longer text"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = tite(**batch).pooler_output
        torch.testing.assert_close(DualEncoder(tite, "pooler").encode(batch["input_ids"], batch["attention_mask"]),
                                   expected)
    with pytest.raises(ValueError, match="TITE returns one vector per text"):
        DualEncoder(tite, "mean")


def test_keep_first_layers(tok):
    encoder = tiny_bert(tok, num_hidden_layers=4)
    reference = {k: v.clone() for k, v in encoder.state_dict().items()}
    keep_first_layers(encoder, 2)
    assert len(encoder.encoder.layer) == 2 and encoder.config.num_hidden_layers == 2
    for name, value in encoder.state_dict().items():
        torch.testing.assert_close(value, reference[name])
    with pytest.raises(ValueError, match="the student has 2 layers"):
        keep_first_layers(encoder, 3)


# ---- collator -----------------------------------------------------------------------------


def test_sample_documents_keeps_the_best_and_follows_the_strategy():
    scores = [0.1, 5.0, 2.0, 3.0, -1.0, 4.0]  # teacher order: 1, 5, 3, 2, 0, 4
    assert sample_documents(scores, 3, "top") == [1, 5, 3]
    assert sample_documents(scores, 10, "random") == [1, 5, 3, 2, 0, 4]
    generator = torch.Generator().manual_seed(0)
    counts = {i: 0 for i in range(6)}
    for _ in range(3000):
        chosen = sample_documents(scores, 2, "log-random", generator)
        assert chosen[0] == 1 and len(set(chosen)) == 2
        counts[chosen[1]] += 1
    # log-random: rank r (2..6) drawn with probability proportional to 1 / (r - 1)
    weights = np.array([1 / 1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    expected = weights / weights.sum() * 3000
    observed = np.array([counts[i] for i in (5, 3, 2, 0, 4)])
    assert np.all(np.abs(observed - expected) < 5 * np.sqrt(expected))
    uniform = {i: 0 for i in range(6)}
    for _ in range(3000):
        uniform[sample_documents(scores, 2, "random", generator)[1]] += 1
    assert uniform[1] == 0 and all(abs(uniform[i] - 600) < 120 for i in (0, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="sampling strategy 'best'"):
        sample_documents(scores, 2, "best")


def test_collator_layout_lengths_and_padding(tok):
    records = make_records(num_queries=2, num_documents=5)
    records[1]["documents"], records[1]["scores"] = records[1]["documents"][:2], records[1]["scores"][:2]
    collator = DistillationCollator(tok, documents_per_query=3, sampling="top", query_max_length=5,
                                    document_max_length=7, seed=0)
    batch = collator(records)
    assert batch["query_input_ids"].shape[0] == 2 and batch["query_input_ids"].shape[1] <= 5
    assert batch["document_input_ids"].shape == (6, 7)
    assert batch["document_mask"].tolist() == [[True, True, True], [True, True, False]]
    torch.testing.assert_close(batch["teacher_scores"][0], torch.tensor(records[0]["scores"][:3]))
    expected = tok(records[0]["documents"][1], truncation=True, max_length=7)["input_ids"]
    assert batch["document_input_ids"][1, : len(expected)].tolist() == expected
    # the same example index, seed and epoch give the same sample; another epoch another one
    dataset = training_records_to_dataset(make_records(num_queries=3, num_documents=20))
    random = DistillationCollator(tok, documents_per_query=4, seed=7)
    first = random([dataset[i] for i in range(3)])["teacher_scores"]
    assert torch.equal(first, random([dataset[i] for i in range(3)])["teacher_scores"])
    random.set_epoch(1)
    assert not torch.equal(first, random([dataset[i] for i in range(3)])["teacher_scores"])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_data_loader_workers_sample_with_the_epoch_set_last(tok, context):
    """A persistent worker keeps the collator it got at the first epoch: each later epoch must still get that
    epoch's documents (the in-process collator's), not the first epoch's again."""
    from conftest import batches_of_persistent_worker

    dataset = training_records_to_dataset(make_records(num_queries=3, num_documents=20))
    collator = DistillationCollator(tok, documents_per_query=4, seed=7)
    by_epoch = [batch["teacher_scores"] for batch in batches_of_persistent_worker(collator, dataset, 3, context)]
    for epoch, scores in enumerate(by_epoch):
        collator.set_epoch(epoch)
        assert torch.equal(scores, collator([dataset[i] for i in range(3)])["teacher_scores"]), epoch
    assert not torch.equal(by_epoch[0], by_epoch[1]) and not torch.equal(by_epoch[1], by_epoch[2])


def test_collator_rejects_bad_lists(tok):
    records = make_records(num_queries=1)
    collator = DistillationCollator(tok, documents_per_query=2, min_documents=2)
    with pytest.raises(ValueError, match="query 'q0': 4 teacher scores for 5 documents"):
        collator([dict(records[0], scores=records[0]["scores"][:4])])
    with pytest.raises(ValueError, match="query 'q0': teacher scores must be finite"):
        collator([dict(records[0], scores=[float("nan")] + records[0]["scores"][1:])])
    with pytest.raises(ValueError, match="query 'q0' has 1 document.* at least 2"):
        collator([dict(records[0], documents=records[0]["documents"][:1], scores=records[0]["scores"][:1])])
    with pytest.raises(ValueError, match="documents_per_query=1 but the configured losses need at least 2"):
        DistillationCollator(tok, documents_per_query=1, min_documents=2)


# ---- the trainer's loss and its gradients ------------------------------------------------


def make_trainer(tmp_path, tok, encoder, *, losses, batch_size, accumulation=1, pooling="cls", similarity="dot",
                 records=None, **arguments):
    records = records or make_records()
    args = DistillationArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.5, optim="sgd",
        lr_scheduler_type="constant", warmup_steps=0, logging_steps=1, seed=0, use_cpu=True,
        dataloader_drop_last=False, **arguments,
    )
    collator = DistillationCollator(tok, documents_per_query=4, sampling="top", seed=0, query_max_length=8,
                                    document_max_length=16)
    return DistillationTrainer(
        model=DualEncoder(encoder, pooling, similarity), args=args, train_dataset=training_records_to_dataset(records),
        data_collator=collator, processing_class=tok, objective=DistillationObjective(losses),
    ), records, collator


@pytest.mark.numerics
def test_compute_loss_is_the_objective_mean_and_logs_components(tmp_path, tok):
    trainer, records, collator = make_trainer(tmp_path, tok, tiny_bert(tok, dtype=torch.float64),
                                              losses="margin_mse+kl:0.5", batch_size=4)
    batch = collator([training_records_to_dataset(records)[i] for i in range(4)])
    loss = trainer.compute_loss(trainer.model, batch)
    encoder = trainer.model.encoder
    with torch.no_grad():
        q = encoder(input_ids=batch["query_input_ids"],
                    attention_mask=batch["query_attention_mask"]).last_hidden_state[:, 0]
        d = encoder(input_ids=batch["document_input_ids"],
                    attention_mask=batch["document_attention_mask"]).last_hidden_state[:, 0].view(4, 4, -1)
        student = (q[:, None] * d).sum(-1)
        teacher, mask = batch["teacher_scores"], batch["document_mask"]
        expected = (margin_mse_loss(student, teacher, mask) + 0.5 * kl_divergence_loss(student, teacher, mask)).mean()
    assert loss.dtype == expected.dtype == torch.float64  # the student's precision, end to end
    torch.testing.assert_close(loss.detach(), expected, **FLOAT64_TOLERANCE)
    assert set(trainer.loss_parts.sums) == {"margin_mse_loss", "kl_loss"}


def trained_parameters(trainer):
    trainer.train()
    return {name: p.detach().clone() for name, p in trainer.model.encoder.named_parameters()}


@pytest.mark.numerics
def test_gradient_accumulation_equals_the_full_batch(tmp_path, tok):
    student = functools.partial(tiny_bert, tok, dtype=torch.float64)  # float64: see conftest
    full, _, _ = make_trainer(tmp_path / "a", tok, student(), losses="margin_mse+kl", batch_size=4)
    accumulated, _, _ = make_trainer(tmp_path / "b", tok, student(), losses="margin_mse+kl", batch_size=2,
                                     accumulation=2)
    reference, before = trained_parameters(full), {n: p.detach().clone() for n, p in student().named_parameters()}
    got = trained_parameters(accumulated)
    moved = max((reference[n] - before[n]).abs().max().item() for n in reference)
    assert moved > 1e-3  # the step did something
    for name in reference:
        assert got[name].dtype == torch.float64, name  # the Trainer and SGD kept float64
        torch.testing.assert_close(got[name], reference[name], **FLOAT64_TOLERANCE, msg=name)
    loss_full = full.state.log_history[0]["loss"]
    # the Trainer sums the logged loss in a float32 tensor (two float32 additions here): float32's precision
    assert accumulated.state.log_history[0]["loss"] == pytest.approx(loss_full, rel=1e-6)


@pytest.mark.numerics
@pytest.mark.parametrize("student", ["bert", "tite"])
def test_activation_checkpointing_gives_the_same_step(tmp_path, tok, student):
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    def build():  # float64: see conftest
        if student == "bert":
            return tiny_bert(tok, dtype=torch.float64), "cls"
        torch.manual_seed(0)
        return TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok), hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)).double(), "pooler"

    encoder, pooling = build()
    initial = {n: p.detach().clone() for n, p in encoder.named_parameters()}
    plain, _, _ = make_trainer(tmp_path / "a", tok, encoder, losses="margin_mse+infonce", batch_size=4, pooling=pooling)
    encoder, pooling = build()
    checkpointed, _, _ = make_trainer(tmp_path / "b", tok, encoder, losses="margin_mse+infonce", batch_size=4,
                                      pooling=pooling, activation_checkpointing=True)
    reference, got = trained_parameters(plain), trained_parameters(checkpointed)
    assert any(getattr(m, "gradient_checkpointing", False) for m in checkpointed.model.encoder.modules())
    assert not any(getattr(m, "gradient_checkpointing", False) for m in plain.model.encoder.modules())
    moved = max((reference[n] - initial[n]).abs().max().item() for n in reference)
    assert moved > 1e-3  # the step did something
    for name in reference:
        assert got[name].dtype == torch.float64, name
        torch.testing.assert_close(got[name], reference[name], **FLOAT64_TOLERANCE, msg=name)


# ---- CLI, saved student, two processes ---------------------------------------------------


def distill_argv(student, train_file, output_dir, *extra):
    return ["distill", "--student", str(student), "--train_file", str(train_file), "--output_dir", str(output_dir),
            "--losses", "margin_mse+kl+infonce", "--pooling", "cls", "--documents_per_query", "4",
            "--sampling", "top", "--max_steps", "1", "--learning_rate", "0.5", "--optim", "sgd",
            "--lr_scheduler_type", "constant", "--warmup_steps", "0", "--logging_steps", "1", "--use_cpu",
            "--infonce_theta", "1.0", *extra]


@pytest.mark.numerics
@pytest.mark.slow
def test_cli_distill_writes_a_student_that_loads_everywhere(tmp_path, tok, bert_student_folder, capsys):
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "distilled"
    assert main(distill_argv(bert_student_folder, train_file, output, "--per_device_train_batch_size", "4")) == 0
    state = json.loads((output / "trainer_state.json").read_text())
    logged = state["log_history"][0]
    assert {"loss", "margin_mse_loss", "kl_loss", "infonce_loss"} <= set(logged)
    assert logged["loss"] == pytest.approx(logged["margin_mse_loss"] + logged["kl_loss"] + logged["infonce_loss"],
                                           abs=2e-4)
    # the student loads as a plain transformers model and as a SentenceTransformer with CLS pooling
    from sentence_transformers import SentenceTransformer

    reloaded = AutoModel.from_pretrained(output).eval()
    texts = ["dense retrieval", "a teacher scores documents"]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        cls = reloaded(**batch).last_hidden_state[:, 0]
    np.testing.assert_allclose(SentenceTransformer(str(output)).encode(texts), cls.numpy(), atol=1e-5)
    assert json.loads((output / "distillation_setup.json").read_text())["losses"] == "margin_mse+kl+infonce"
    # bad input: a named error and exit code 2
    assert main(distill_argv(bert_student_folder, train_file, tmp_path / "x") + ["--losses", "margin+kl"]) == 2
    assert "unknown loss 'margin'" in capsys.readouterr().err.lower()
    single = write_training_file(tmp_path / "single.jsonl", make_records(num_documents=1))
    assert main(distill_argv(bert_student_folder, single, tmp_path / "y", "--per_device_train_batch_size", "4")) == 2
    assert re.search(r"single.jsonl:1: query 'q0' has 1 document\(s\) but --losses .* needs at least 2",
                     capsys.readouterr().err)


@pytest.mark.slow
@pytest.mark.numerics
def test_two_processes_equal_one_process_on_the_global_batch(tmp_path, tok, float64_student_folder):
    student = float64_student_folder  # float64 end to end: see conftest
    train_file = write_training_file(tmp_path / "train.jsonl", make_records(num_queries=4))
    one = tmp_path / "one"
    assert main(distill_argv(student, train_file, one, "--per_device_train_batch_size", "4")) == 0
    two = tmp_path / "two"
    argv = distill_argv(student, train_file, two, "--per_device_train_batch_size", "2", "--ddp_backend", "gloo")
    argv.remove("--use_cpu")  # a machine without a GPU trains with DDP on the CPU all the same (before: 2 replicas)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "dense_encoders.cli", *argv]
    # CPU and gloo, also on a GPU machine (else rank 1 asks for cuda:1 on a one-GPU machine)
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env=cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src")))
    assert result.returncode == 0, result.stderr[-6000:]
    assert "2 processes on a machine without a GPU: training one model on the CPU with DDP (--use_cpu)" in result.stderr
    log_one = json.loads((one / "trainer_state.json").read_text())["log_history"][0]
    log_two = json.loads((two / "trainer_state.json").read_text())["log_history"][0]
    # the Trainer sums the logged loss in a float32 tensor: float32's precision, not the model's
    assert log_two["loss"] == pytest.approx(log_one["loss"], rel=1e-6)
    for key in ("margin_mse_loss", "kl_loss", "infonce_loss"):
        assert log_two[key] == pytest.approx(log_one[key], abs=1e-4), key  # logged rounded to 4 decimals
    from safetensors.torch import load_file

    weights_one, weights_two = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert set(weights_one) == set(weights_two) and not any(k.startswith("pooler.") for k in weights_one)
    assert all(value.dtype == torch.float64 for value in weights_two.values())
    initial = load_file(student / "model.safetensors")
    assert max((weights_one[k] - initial[k]).abs().max().item() for k in initial) > 1e-3
    for name, value in weights_one.items():
        torch.testing.assert_close(weights_two[name], value, **FLOAT64_TOLERANCE, msg=name)


@pytest.mark.numerics
@pytest.mark.slow
def test_cli_distills_into_a_two_layer_all_minilm_student(tmp_path, minilm_path, tok):
    """The real all-MiniLM-L6-v2 as student: pooling (mean) and cosine come from its own configuration."""
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "minilm-2"
    argv = ["distill", "--student", str(minilm_path), "--student_num_layers", "2", "--train_file", str(train_file),
            "--output_dir", str(output), "--losses", "margin_mse+kl", "--kl_temperature", "0.05",
            "--documents_per_query", "4", "--query_max_length", "16", "--document_max_length", "32",
            "--per_device_train_batch_size", "2", "--max_steps", "2", "--use_cpu", "--logging_steps", "1"]
    assert main(argv) == 0
    weights = load_file(output / "model.safetensors")
    teacher = load_file(minilm_path / "model.safetensors")
    assert {k.split(".")[2] for k in weights if k.startswith("encoder.layer.")} == {"0", "1"}
    # MiniLM's own pooler, unused and frozen, saved as loaded: the student loads without a report
    assert all(torch.equal(weights[k], teacher[k]) for k in ("pooler.dense.weight", "pooler.dense.bias"))
    # the embeddings were trained (they moved), the shape is the teacher's
    assert weights["embeddings.word_embeddings.weight"].shape == teacher["embeddings.word_embeddings.weight"].shape
    assert not torch.equal(weights["encoder.layer.1.output.dense.weight"],
                           teacher["encoder.layer.1.output.dense.weight"])

    texts = ["what do cells use for energy", "The mitochondrion produces ATP."]
    model = AutoModel.from_pretrained(output).eval()
    tokenizer = AutoTokenizer.from_pretrained(output)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    student = SentenceTransformer(str(output))
    assert student.similarity_fn_name == "cosine" and [type(m).__name__ for m in student][-1] == "Normalize"
    np.testing.assert_allclose(student.encode(texts), expected.numpy(), atol=1e-5)


PLAIN_LOAD = """
import json
from sentence_transformers import SentenceTransformer
model = SentenceTransformer({folder!r}, device="cpu")
print("VECTORS" + json.dumps(model.encode({texts!r}).tolist()))
"""


@pytest.mark.numerics
def test_a_student_cut_from_a_bert_with_a_pooler_loads_without_a_report(tmp_path, tok):
    """A student cut from a checkpoint with a pooler (all-MiniLM-L6-v2's layout: BertModel, mean pooling,
    cosine) keeps that pooler, frozen and saved as loaded: a plain SentenceTransformer load in a fresh interpreter
    (without the package) prints no report of missing, newly initialised weights and gives the vectors of the
    student's own weights (mean pooling, normalised)."""
    from conftest import run_python_without_package
    from safetensors.torch import load_file

    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    teacher = tmp_path / "minilm-like"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(teacher)
    tok.save_pretrained(teacher)
    write_sentence_transformers_files(teacher, pooling="mean", similarity="cosine")
    assert "pooler.dense.weight" in load_file(teacher / "model.safetensors")
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "student"
    assert main(["distill", "--student", str(teacher), "--student_num_layers", "1", "--train_file", str(train_file),
                 "--output_dir", str(output), "--losses", "kl", "--documents_per_query", "4", "--max_steps", "2",
                 "--per_device_train_batch_size", "2", "--learning_rate", "1e-2", "--use_cpu"]) == 0
    weights, source = load_file(output / "model.safetensors"), load_file(teacher / "model.safetensors")
    assert set(weights) == {k for k in source if not k.startswith(("encoder.layer.1.", "encoder.layer.2."))}
    assert all(torch.equal(weights[k], source[k]) for k in ("pooler.dense.weight", "pooler.dense.bias"))
    trained = "encoder.layer.0.output.dense.weight"
    assert not torch.equal(weights[trained], source[trained])

    texts = ["what do cells use for energy", "The mitochondrion produces ATP."]
    code = PLAIN_LOAD.format(folder=str(output), texts=texts)
    result = run_python_without_package(code, tmp_path)
    printed = result.stdout + result.stderr
    assert not any(word in printed for word in ("LOAD REPORT", "MISSING", "newly initialized")), printed
    vectors = np.array(json.loads(result.stdout[result.stdout.rindex("VECTORS") + 7:].splitlines()[0]))
    model = BertModel.from_pretrained(output).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    # two float32 computations of one function: rounding of the hidden states (one layer and the embeddings),
    # which the normalisation divides by the vectors' norm (> 1 here)
    assert np.linalg.norm((states * mask).sum(1) / mask.sum(1), axis=-1).min() > 1
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=float32_atol(states, depth=2))


@pytest.mark.numerics
@pytest.mark.slow
def test_cli_distills_a_tite_student_that_loads_without_the_package(tmp_path, tok):
    from conftest import run_python_without_package

    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    torch.manual_seed(0)
    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "tite-distilled"
    argv = ["distill", "--student", str(folder), "--train_file", str(train_file), "--output_dir", str(output),
            "--losses", "m3se+sce:0.5+infonce", "--sce_temperature", "4", "--documents_per_query", "3",
            "--per_device_train_batch_size", "2", "--max_steps", "2", "--use_cpu", "--logging_steps", "1"]
    assert main(argv) == 0  # pooler_output and dot product: TITE's own conventions, no --pooling needed
    logged = json.loads((output / "trainer_state.json").read_text())["log_history"][0]
    assert {"m3se_loss", "sce_loss", "infonce_loss"} <= set(logged)
    assert {"modeling_tite.py", "configuration_tite.py", "pooling_tite.py", "modules.json"} <= {
        p.name for p in output.iterdir()}
    texts = ["dense retrieval", "a token independent text encoder"]
    model = TiteModel.from_pretrained(output).eval()
    with torch.no_grad():
        expected = model(**tok(texts, padding=True, return_tensors="pt")).pooler_output
    code = f"""
import json, torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
model = AutoModel.from_pretrained({str(output)!r}, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained({str(output)!r}, trust_remote_code=True)
with torch.no_grad():
    vectors = model(**tok({texts!r}, padding=True, return_tensors="pt")).pooler_output
st = SentenceTransformer({str(output)!r}, trust_remote_code=True).encode({texts!r})
print(json.dumps({{"auto": vectors.tolist(), "st": st.tolist(), "similarity": SentenceTransformer({str(output)!r},
      trust_remote_code=True).similarity_fn_name}}))
"""
    result = json.loads(run_python_without_package(code, cwd=tmp_path).stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(result["auto"], expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(result["st"], expected.numpy(), atol=1e-5)
    assert result["similarity"] == "dot"


# ---- resuming: a resumed run ends where the uninterrupted run ends ----------------------------


def resumable_argv(student, train_file, output_dir, *extra, max_steps=6, logging_steps=2):
    """:func:`distill_argv` for a run of ``max_steps`` steps of 2 queries per process, a checkpoint every 2
    steps and a log every ``logging_steps``; ``extra`` flags come last."""
    values = {"--max_steps": str(max_steps), "--logging_steps": str(logging_steps), "--learning_rate": "0.05"}
    argv = distill_argv(student, train_file, output_dir)
    for flag, value in values.items():
        argv[argv.index(flag) + 1] = value
    return argv + ["--per_device_train_batch_size", "2", "--save_strategy", "steps", "--save_steps", "2", *extra]


def logged_steps(folder: Path) -> dict[int, dict]:
    """The training logs of a finished run (``loss`` and its parts) by step."""
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry for entry in history if "loss" in entry}


def resume_copy(run: Path, checkpoint: str, output_dir: Path) -> Path:
    """A run killed right after ``checkpoint`` was saved: a fresh folder holding only that checkpoint."""
    shutil.copytree(run / checkpoint, output_dir / checkpoint)
    return output_dir


@pytest.mark.slow
@pytest.mark.numerics
def test_distill_resumed_at_max_steps_takes_no_further_step(tmp_path, float64_student_folder):
    """Killed right after its last checkpoint (checkpoint-6 of --max_steps 6, mid-epoch: 10 queries make 5 steps
    an epoch), the resumed run trains nothing: the uninterrupted run's weights, global step 6, no 7th log."""
    from safetensors.torch import load_file

    train_file = write_training_file(tmp_path / "train.jsonl", make_records(num_queries=10))
    full = tmp_path / "full"
    assert main(resumable_argv(float64_student_folder, train_file, full, logging_steps=1)) == 0
    resumed = resume_copy(full, "checkpoint-6", tmp_path / "resumed")
    assert main(resumable_argv(float64_student_folder, train_file, resumed, "--resume_from_checkpoint", "latest",
                               logging_steps=1)) == 0

    state = json.loads((resumed / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and max(entry["step"] for entry in state["log_history"]) == 6
    assert sorted(logged_steps(resumed)) == [1, 2, 3, 4, 5, 6]  # steps 1-6 from the checkpoint, no 7th
    weights, resumed_weights = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    initial = load_file(float64_student_folder / "model.safetensors")
    assert max((weights[k] - initial[k]).abs().max().item() for k in initial) > 1e-3  # the 6 steps trained
    assert weights.keys() == resumed_weights.keys()
    for name, value in weights.items():
        assert torch.equal(resumed_weights[name], value), name  # nothing trained after the checkpoint


@pytest.mark.slow
@pytest.mark.numerics
def test_distill_resumed_mid_run_logs_and_ends_as_the_uninterrupted_run(tmp_path, float64_student_folder):
    """Resumed from checkpoint-2, the run logs at steps 4 and 6 what the uninterrupted run logs there (each loss
    part the mean of the window's steps, not its sum divided by the global step) and ends with its weights."""
    train_file = write_training_file(tmp_path / "train.jsonl", make_records(num_queries=10))
    full = tmp_path / "full"
    assert main(resumable_argv(float64_student_folder, train_file, full)) == 0
    resumed = resume_copy(full, "checkpoint-2", tmp_path / "resumed")
    assert main(resumable_argv(float64_student_folder, train_file, resumed, "--resume_from_checkpoint", "latest")) == 0
    assert_same_run(full, resumed, "checkpoint-2", parts=("margin_mse_loss", "kl_loss", "infonce_loss"))


@pytest.mark.slow
@pytest.mark.numerics
def test_distill_with_persistent_workers_samples_each_epoch_afresh_and_resumes_exactly(tmp_path,
                                                                                     float64_student_folder):
    """--dataloader_persistent_workers: the workers keep the collator of the first epoch, yet the second epoch
    (step 6 of 5-step epochs) samples its own documents ('random' sampling), as a run without workers does, and
    a run resumed from checkpoint-2 (whose workers start afresh) ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    train_file = write_training_file(tmp_path / "train.jsonl", make_records(num_queries=10, num_documents=12))

    def run(output_dir, *extra):  # in a process of its own: no data-loader worker outlives the test here
        command = resumable_argv(float64_student_folder, train_file, output_dir, *extra)
        command[command.index("--sampling") + 1] = "random"
        result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", *command], cwd=tmp_path, text=True,
                                capture_output=True, timeout=600, env=torchrun_env())
        assert result.returncode == 0, result.stderr[-6000:]

    workers = ("--dataloader_num_workers", "1", "--dataloader_persistent_workers")
    no_workers, full = tmp_path / "no-workers", tmp_path / "full"
    run(no_workers)
    run(full, *workers)
    expected, got = load_file(no_workers / "model.safetensors"), load_file(full / "model.safetensors")
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, **FLOAT64_TOLERANCE, msg=name)
    resumed = resume_copy(full, "checkpoint-2", tmp_path / "resumed")
    run(resumed, *workers, "--resume_from_checkpoint", "latest")
    assert_same_run(full, resumed, "checkpoint-2", parts=("margin_mse_loss", "kl_loss", "infonce_loss"))


def assert_same_run(full: Path, resumed: Path, checkpoint: str, parts: tuple[str, ...]) -> None:
    """The run resumed from ``checkpoint`` logs what the uninterrupted run logs after it, and ends with its final
    weights (float64 students)."""
    from safetensors.torch import load_file

    expected, got = logged_steps(full), logged_steps(resumed)
    assert sorted(got) == sorted(expected) == [2, 4, 6]
    for step in (4, 6):  # the windows trained after the resume
        # the Trainer sums the logged loss in a float32 tensor: float32's precision, not the model's
        assert got[step]["loss"] == pytest.approx(expected[step]["loss"], rel=1e-6), step
        for part in parts:  # logged rounded to 4 decimals: equal float64 values round alike
            assert got[step][part] == pytest.approx(expected[step][part], abs=1e-4), (step, part)
        # the parts add up to the loss: they are means over the same window
        assert got[step]["loss"] == pytest.approx(sum(got[step][part] for part in parts), abs=5e-4), step
    weights, resumed_weights = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    at_resume = load_file(full / checkpoint / "model.safetensors")
    assert max((weights[k] - at_resume[k]).abs().max().item() for k in at_resume) > 1e-3  # steps after it trained
    assert weights.keys() == resumed_weights.keys()
    for name, value in weights.items():
        torch.testing.assert_close(resumed_weights[name], value, **FLOAT64_TOLERANCE, msg=name)


def torchrun_distill(student: Path, train_file: Path, output_dir: Path, *extra: str) -> list[str]:
    """The command of a 2-process ``torchrun`` of :func:`resumable_argv` (gloo, 'random' document sampling), without
    ``--use_cpu``, as a user starts it on a machine without a GPU (one model, DDP on the CPU)."""
    argv = resumable_argv(student, train_file, output_dir, "--ddp_backend", "gloo", *extra)
    argv[argv.index("--sampling") + 1] = "random"
    argv.remove("--use_cpu")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "dense_encoders.cli", *argv]


def torchrun_env() -> dict[str, str]:
    # CPU and gloo, also on a GPU machine (else rank 1 asks for cuda:1 on a one-GPU machine)
    return cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), OMP_NUM_THREADS="1")


def run_torchrun(command: list[str], cwd: Path) -> str:
    """Run ``command`` to the end; its stderr."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=torchrun_env())
    assert result.returncode == 0, result.stderr[-6000:]
    return result.stderr


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, tok):
    """A float64 student with dropout (as real students have: each process must draw the uninterrupted run's
    random numbers), 10 queries of 8 documents (global batches of 4, the last one of each epoch completed by
    accelerate, 3 steps an epoch), and the uninterrupted 2-process run of :func:`torchrun_distill` on them."""
    folder = tmp_path_factory.mktemp("two-process-distill")
    student = folder / "student64-dropout"
    tiny_bert(tok, dtype=torch.float64, hidden_dropout_prob=0.1).save_pretrained(student)
    tok.save_pretrained(student)
    train_file = write_training_file(folder / "train.jsonl", make_records(num_queries=10, num_documents=8))
    full = folder / "full"
    run_torchrun(torchrun_distill(student, train_file, full), folder)
    return student, train_file, full


@pytest.mark.slow
@pytest.mark.numerics
def test_two_process_distill_resumes_exactly(tmp_path, two_process_run):
    """torchrun with 2 processes and InfoNCE over the gathered batch: resumed from 'latest' (checkpoint-2, mid-epoch),
    the run crosses into the next epoch with the uninterrupted run's batches and document samples ('random'
    sampling), logs and final weights. 'latest' skips checkpoint-4, which lacks process 1's RNG state (rank 1
    killed while saving it)."""
    student, train_file, full = two_process_run
    resumed = resume_copy(full, "checkpoint-2", tmp_path / "resumed")
    assert {p.name for p in resumed.glob("checkpoint-2/rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    # rank 1 killed while saving checkpoint-4: rank 0 wrote its part and trainer_state.json, rank 1 no RNG state
    resume_copy(full, "checkpoint-4", resumed)
    (resumed / "checkpoint-4" / "rng_state_1.pth").unlink()
    log = run_torchrun(torchrun_distill(student, train_file, resumed, "--resume_from_checkpoint", "latest"), tmp_path)
    assert ("skipping the incomplete checkpoint-4 (no rng_state_1.pth: process 1 was stopped before it saved its "
            f"random state) (killed while saving?); resuming from {resumed / 'checkpoint-2'}") in log
    assert_same_run(full, resumed, "checkpoint-2", parts=("margin_mse_loss", "kl_loss", "infonce_loss"))


def process_of_rank(launcher_pid: int, rank: int) -> int:
    """The PID of the worker of ``rank`` that the ``torchrun`` process ``launcher_pid`` started (its child whose
    environment holds ``RANK=<rank>``), read from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environment = (entry / "environ").read_bytes().split(b"\0") if parent == launcher_pid else []
        except (OSError, IndexError, ValueError):  # the process ended meanwhile
            continue
        if f"RANK={rank}".encode() in environment:
            return int(entry.name)
    raise AssertionError(f"torchrun (PID {launcher_pid}) has no worker of rank {rank}")


def is_written(checkpoint: Path) -> bool:
    """Whether both processes have written their part of ``checkpoint``: each its whole RNG state (a zip file,
    whose directory comes last), and rank 0 the whole ``trainer_state.json`` (it writes it last)."""
    if not all(zipfile.is_zipfile(checkpoint / f"rng_state_{rank}.pth") for rank in (0, 1)):
        return False
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds torchrun's rank 1 through /proc")
def test_two_process_distill_resumes_exactly_after_rank_1_is_killed(tmp_path, two_process_run):
    """A real kill: rank 1 of the torchrun gets SIGKILL once checkpoint-4 (mid-epoch, in the second epoch) is
    written, and torchrun stops rank 0, which holds the folder's lock. The same command with
    --resume_from_checkpoint latest then continues from checkpoint-4 with the uninterrupted run's batches, document
    samples, in-batch negatives and random numbers on both processes: its logs and final weights are the
    uninterrupted run's."""
    student, train_file, full = two_process_run
    killed = tmp_path / "killed"
    command = torchrun_distill(student, train_file, killed)
    with open(tmp_path / "killed.log", "w") as log:
        launcher = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=torchrun_env())
        try:
            while not is_written(killed / "checkpoint-4"):
                assert launcher.poll() is None, (tmp_path / "killed.log").read_text()[-6000:]
                time.sleep(0.005)
            os.kill(process_of_rank(launcher.pid, 1), signal.SIGKILL)
            assert launcher.wait(timeout=300) != 0
        finally:
            if launcher.poll() is None:  # torchrun stops its processes on SIGTERM
                launcher.terminate()
                launcher.wait(timeout=60)
    assert "exitcode  : -9" in (tmp_path / "killed.log").read_text()  # torchrun reports rank 1's SIGKILL
    # rank 0 cannot train on alone (every step gathers from rank 1): checkpoint-4 is the last one
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not (killed / "model.safetensors").exists()
    run_torchrun(command + ["--resume_from_checkpoint", "latest"], tmp_path)
    assert_same_run(full, killed, "checkpoint-4", parts=("margin_mse_loss", "kl_loss", "infonce_loss"))
    from safetensors.torch import load_file

    # checkpoint-6, written by the resumed run, is the uninterrupted run's too
    expected, got = (load_file(folder / "checkpoint-6" / "model.safetensors") for folder in (full, killed))
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, **FLOAT64_TOLERANCE, msg=name)


# ---- flags and lines that would train nothing, or something else than asked ------------------------------


def test_distill_refuses_length_grouped_sampling_in_one_line(tmp_path, bert_student_folder, capsys):
    """transformers' length-grouped samplers read token lengths from the dataset's input_ids; distill's examples
    are queries with their documents, tokenized by the collator. Before, the answer was transformers' own line
    ("Can only automatically infer lengths ... 'input_ids' key"), after the output folder had been made."""
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    for strategy in ("group_by_length", "batch_rebalance"):
        output = tmp_path / strategy
        assert main(distill_argv(bert_student_folder, train_file, output, "--train_sampling_strategy", strategy)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert (f"--train_sampling_strategy {strategy}: distill has no token lengths to sort by (an example is a "
                "query with its documents, tokenized by the collator); use 'random' (the default) or "
                "'sequential'") in err
        assert not output.exists()


def test_distill_refuses_a_zero_loss_weight_and_zero_steps(tmp_path, bert_student_folder, capsys):
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "distilled"
    zero_weight = ("weight for loss 'kl' must be a finite number > 0, got '0': a zero weight trains nothing; drop "
                   "'kl' from the spec instead")
    for extra, message in ((["--losses", "margin_mse+kl:0"], zero_weight),
                           (["--max_steps", "0"], "--max_steps 0: give a number of optimizer steps >= 1")):
        assert main(distill_argv(bert_student_folder, train_file, output, *extra)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
    assert not output.exists()


def test_distill_save_steps_alone_saves_on_that_schedule(tmp_path, bert_student_folder):
    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    steps = ["--max_steps", "4", "--per_device_train_batch_size", "2"]
    output = tmp_path / "distilled"
    assert main(distill_argv(bert_student_folder, train_file, output, *steps, "--save_steps", "2")) == 0
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((output / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2
    # an explicit --save_strategy wins; without either flag, no checkpoints (the default)
    for extra, name in ((["--save_steps", "2", "--save_strategy", "no"], "no"), ([], "none")):
        folder = tmp_path / name
        assert main(distill_argv(bert_student_folder, train_file, folder, *steps, *extra)) == 0
        assert not list(folder.glob("checkpoint-*")) and (folder / "model.safetensors").is_file()
    assert DistillationArguments(output_dir="x", save_steps=3, use_cpu=True).save_strategy == "steps"
    assert DistillationArguments(output_dir="x", use_cpu=True).save_strategy == "no"


def test_distill_refuses_blank_queries_and_scores_beyond_float32_by_file_line(tmp_path, bert_student_folder, capsys):
    output = tmp_path / "distilled"
    for line, message in (({"query_id": "q1", "query": ""}, "query 'q1' has an empty or blank text"),
                          ({"query_id": None, "query": " \t"}, "the query has an empty or blank text"),
                          ({"scores": [1e308, 0.0, -1.0, -2.0, -3.0]}, "score 1 is 1e+308, beyond float32's range"),
                          ({"scores": [5.0, 0.0, -1.0, -2.0, -1e39]}, "score 5 is -1e+39, beyond float32's range")):
        records = make_records()
        records[1].update(line)
        train_file = write_training_file(tmp_path / "train.jsonl", records)
        assert main(distill_argv(bert_student_folder, train_file, output)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{train_file}:2: {message}" in err, err
    assert not output.exists()


def test_qrels_judging_a_pair_twice_with_two_grades_are_refused_by_file_line(tmp_path, bert_student_folder, capsys):
    from dense_encoders.data.retrieval import read_qrels

    records = make_records()
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({k: r[k] for k in ("query_id", "query", "document_ids", "documents",
                                                                  "scores")}) + "\n" for r in records))
    beir = tmp_path / "qrels.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\nq0\tq0d1\t1\nq1\tq1d0\t2\nq0\tq0d1\t1\nq0\tq0d1\t0\n")
    trec = tmp_path / "qrels.txt"
    trec.write_text("q0 0 q0d1 1\nq0 0 q0d1 3\n")
    output = tmp_path / "distilled"
    for qrels, line, first, grades in ((beir, 5, 2, (1, 0)), (trec, 2, 1, (1, 3))):
        assert main(distill_argv(bert_student_folder, train_file, output, "--qrels", str(qrels),
                                 "--losses", "m3se")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and (
            f"{qrels}:{line}: document 'q0d1' is judged twice for query 'q0', with grade {grades[0]} (line {first}) "
            f"and grade {grades[1]}: keep one of the two lines") in err, err
    assert not output.exists()
    # the same grade twice says nothing new: read once, as trec_eval-style tools do
    beir.write_text("query-id\tcorpus-id\tscore\nq0\tq0d1\t1\nq0\tq0d1\t1\n")
    assert read_qrels(beir) == {"q0": {"q0d1": 1}}


def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_the_run_resumes(tmp_path, bert_student_folder, capsys,
                                                                                monkeypatch):
    """The disk fills while checkpoint-2 is saved (torch.save's own error for a failed write, with little room left
    on the disk; before: RuntimeError "[enforce fail at inline_container.cc:672]" and a traceback): one line naming
    the folder and the room a checkpoint needs; checkpoint-1 stays, and the run resumes from it."""
    import collections
    import shutil as shutil_module

    import dense_encoders.data.files as files

    train_file = write_training_file(tmp_path / "train.jsonl", make_records())
    output = tmp_path / "distilled"
    save = torch.save

    def full_disk(value, target, *args, **kwargs):
        if "checkpoint-2" in str(target):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4352 vs 4240")
        return save(value, target, *args, **kwargs)

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(files.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    argv = distill_argv(bert_student_folder, train_file, output, "--max_steps", "2", "--save_steps", "1",
                        "--per_device_train_batch_size", "2")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"dense-encoders distill: error: the disk of {output} is full (1.0 KB free; writing there needs " in err
    assert (output / "checkpoint-1" / "trainer_state.json").is_file()
    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(files.shutil, "disk_usage", shutil_module.disk_usage)
    assert main([*argv, "--resume_from_checkpoint", "latest"]) == 0
    assert (output / "model.safetensors").is_file()
