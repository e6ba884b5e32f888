"""Pre-training: gradient cache, data parallelism, resuming, and the CLI end to end."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import FLOAT64_TOLERANCE, REPO_ROOT, cpu_only_env, random_mlm_batch, tiny_condenser_config

from dense_encoders import CoCondenserForPreTraining
from dense_encoders.trainer import PreTrainingArguments, PreTrainingSetup, PreTrainingTrainer, RandomState, pretrain

WORDS = (
    "retrieval dense passage query encoder transformer attention layer sentence document corpus index ranking "
    "river mountain ocean planet comet galaxy protein enzyme cell music rhythm harmony bridge tower engine "
    "climate weather storm harvest wheat bread language grammar market price trade"
).split()


@pytest.fixture
def corpus_file(tmp_path) -> Path:
    """40 documents of 170-230 words: two or more 40-60-token spans each."""
    return write_corpus(tmp_path / "corpus.jsonl", 40, min_words=170, max_words=230)


def write_corpus(path: Path, num_documents: int, min_words: int, max_words: int) -> Path:
    """A JSONL corpus of ``num_documents`` documents of random WORDS, ``min_words``-``max_words`` each (seeded)."""
    rng = random.Random(0)
    with path.open("w") as handle:
        for index in range(num_documents):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
            handle.write(json.dumps({"id": str(index), "title": f"document {index}", "text": text}) + "\n")
    return path


def training_args(output_dir, **overrides) -> PreTrainingArguments:
    settings = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        max_steps=4,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        seed=7,
        disable_tqdm=True,
        report_to="none",
    )
    settings.update(overrides)
    return PreTrainingArguments(**settings)


def logged(folder: Path, key: str) -> dict[int, float]:
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry}


# ---------------------------------------------------------------------------- gradient cache


def parameter_gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.numerics
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4])
def test_grad_cache_gradients_equal_unchunked_step(tmp_path, chunk_size):
    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config()).double()  # float64: see conftest
    batch = random_mlm_batch(batch_size=8, seed=3)

    model.zero_grad()
    reference_output = model(**batch)
    reference_output.loss.backward()
    reference = parameter_gradients(model)

    model.zero_grad()
    trainer = PreTrainingTrainer(model=model, args=training_args(tmp_path, grad_cache_chunk_size=chunk_size))
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.training_step(trainer.model, dict(batch))
    cached = parameter_gradients(model)

    assert loss.dtype == reference_output.loss.dtype == torch.float64  # no float32 cast on the way
    torch.testing.assert_close(loss, reference_output.loss.detach(), **FLOAT64_TOLERANCE)
    assert reference.keys() == cached.keys() and len(reference) > 50
    for name in reference:
        assert cached[name].dtype == torch.float64, name
        torch.testing.assert_close(cached[name], reference[name], **FLOAT64_TOLERANCE, msg=name)


def test_random_state_replays_dropout_exactly():
    dropout = torch.nn.Dropout(0.5)
    values = torch.ones(1000)
    state = RandomState(values.device)
    first = dropout(values)
    after_first = torch.rand(3)
    with state.replay():
        replayed = dropout(values)
    assert torch.equal(first, replayed)
    assert not torch.equal(first, dropout(values))  # the replay did not rewind the global stream
    assert after_first.shape == (3,)


def test_grad_cache_chunk_size_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="grad_cache_chunk_size=0"):
        training_args(tmp_path, grad_cache_chunk_size=0)


# ---------------------------------------------------------------------------- data parallel


def torchrun(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    # CPU and gloo, also on a GPU machine (else rank 1 asks for cuda:1 on a one-GPU machine)
    env = cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"torchrun failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return result


@pytest.mark.slow
@pytest.mark.numerics
def test_contrastive_loss_and_gradients_match_one_process_on_the_global_batch(tmp_path):
    torchrun(str(REPO_ROOT / "tests" / "distributed_worker.py"), str(tmp_path / "ddp.pt"), cwd=tmp_path)
    result = torch.load(tmp_path / "ddp.pt")

    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config(late_mlm=False)).double()  # as the workers
    batch = random_mlm_batch(batch_size=8, seed=1)
    output = model(**{k: v for k, v in batch.items() if k != "labels"})
    output.loss.backward()

    # both ranks saw all 8 spans (6 + 2) and the loss of the whole global batch
    assert result["spans"].tolist() == [8, 8]
    assert result["losses"].dtype == torch.float64
    torch.testing.assert_close(result["losses"], output.loss.detach().repeat(2), **FLOAT64_TOLERANCE)
    # DDP-averaged gradients equal the single-process gradient of the global loss
    gradients = parameter_gradients(model)
    assert result["grads"].keys() == gradients.keys()
    for name, grad in gradients.items():
        torch.testing.assert_close(result["grads"][name], grad, **FLOAT64_TOLERANCE, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("grad_cache", [[], ["--grad_cache_chunk_size", "2"]], ids=["plain", "grad-cache"])
def test_torchrun_cli_trains_cocondenser_on_the_global_batch(tmp_path, corpus_file, grad_cache):
    output_dir = tmp_path / "run"
    torchrun(
        "-m", "dense_encoders.cli", "pretrain", "cocondenser",
        "--corpus", str(corpus_file), "--output_dir", str(output_dir), "--max_steps", "3",
        "--per_device_train_batch_size", "3", "--logging_steps", "1", "--save_strategy", "no",
        "--min_span_tokens", "40", "--max_span_tokens", "60", "--max_seq_length", "64",
        "--use_cpu", "--report_to", "none", *grad_cache,
        cwd=tmp_path,
    )
    spans = logged(output_dir, "contrastive_spans")
    assert spans == {1: 12, 2: 12, 3: 12}  # 2 processes x 3 documents x 2 spans
    assert all(value > 0 for value in logged(output_dir, "contrastive_loss").values())
    assert (output_dir / "model.safetensors").is_file()


# ---------------------------------------------------------------------------- resume, CLI


@pytest.fixture
def float64_pretraining(monkeypatch):
    """``pretrain`` builds its model in float64 (equivalence tests: see conftest's FLOAT64_TOLERANCE)."""
    from dense_encoders.trainer import pretraining

    build_model = pretraining.build_model
    monkeypatch.setattr(pretraining, "build_model", lambda *a, **k: build_model(*a, **k).double())


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.parametrize("architecture", ["condenser", "cocondenser"])
def test_resuming_from_a_checkpoint_continues_with_the_same_losses(tmp_path, corpus_file, architecture,
                                                                  float64_pretraining):
    from safetensors.torch import load_file

    setup = PreTrainingSetup(
        architecture=architecture, preset="tiny", corpus=str(corpus_file), max_seq_length=64,
        min_span_tokens=40, max_span_tokens=60,
    )
    full = tmp_path / "full"
    pretrain(setup, training_args(full, max_steps=6, save_strategy="steps", save_steps=3))
    interrupted = tmp_path / "interrupted"
    shutil.copytree(full / "checkpoint-3", interrupted / "checkpoint-3")
    pretrain(setup, training_args(interrupted, max_steps=6, resume_from_checkpoint=str(interrupted / "checkpoint-3")))

    # the resumed run ends with the uninterrupted run's weights (float64 end to end, AdamW state included)
    final, resumed_final = load_file(full / "model.safetensors"), load_file(interrupted / "model.safetensors")
    initial = load_file(full / "checkpoint-3" / "model.safetensors")
    assert final.keys() == resumed_final.keys() and all(v.dtype == torch.float64 for v in final.values())
    assert max((final[k] - initial[k]).abs().max().item() for k in final) > 1e-4  # steps 4-6 moved the weights
    for name, value in final.items():
        torch.testing.assert_close(resumed_final[name], value, **FLOAT64_TOLERANCE, msg=name)

    uninterrupted, resumed = logged(full, "loss"), logged(interrupted, "loss")
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]  # steps 1-3 come from the checkpoint's trainer state
    assert resumed[1] == uninterrupted[1]
    for step in (4, 5, 6):
        # the Trainer sums the logged loss in a float32 tensor: float32's precision, not the model's
        assert resumed[step] == pytest.approx(uninterrupted[step], rel=1e-6), step
    for component in (("head_mlm_loss", "late_mlm_loss")
                      + (("contrastive_loss",) if architecture == "cocondenser" else ())):
        # components are logged rounded to 4 decimals: equal float64 values round alike
        assert logged(interrupted, component)[6] == pytest.approx(logged(full, component)[6], abs=1e-4)


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.parametrize("streaming", [False, True], ids=["dataset", "streamed"])
def test_a_run_resumed_at_max_steps_takes_no_further_step(tmp_path, corpus_file, float64_pretraining, streaming):
    """Killed right after its last checkpoint (checkpoint-6 of --max_steps 6, mid-epoch: the corpus makes dozens
    of batches; streamed: the stream's first pass), the resumed `pretrain` trains nothing: it ends with the
    uninterrupted run's weights, global step 6 and no 7th log."""
    from safetensors.torch import load_file

    from dense_encoders.cli import main

    def argv(output_dir, *extra):
        return ["pretrain", "condenser", "--preset", "tiny", "--corpus", str(corpus_file), "--output_dir",
                str(output_dir), "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2",
                "--per_device_train_batch_size", "4", "--max_seq_length", "64", "--logging_steps", "1", "--seed", "7",
                "--use_cpu", "--report_to", "none", *(["--streaming"] if streaming else []), *extra]

    full = tmp_path / "full"
    assert main(argv(full)) == 0
    resumed = tmp_path / "resumed"
    shutil.copytree(full / "checkpoint-6", resumed / "checkpoint-6")
    assert main(argv(resumed, "--resume_from_checkpoint", "latest")) == 0

    state = json.loads((resumed / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and max(entry["step"] for entry in state["log_history"]) == 6
    assert sorted(logged(resumed, "loss")) == [1, 2, 3, 4, 5, 6]  # from the checkpoint's state: no 7th step
    final, resumed_final = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert final.keys() == resumed_final.keys() and all(v.dtype == torch.float64 for v in final.values())
    for name, value in final.items():
        assert torch.equal(resumed_final[name], value), name  # nothing trained after the checkpoint


def test_length_grouped_order_is_drawn_from_the_seed_and_the_epoch():
    """--train_sampling_strategy group_by_length: each epoch's order is a permutation of the dataset fixed by the
    data seed and the epoch (not by the global RNG, which a resumed run restores only after the epoch's iterator
    started), another one in the next epoch, and grouped by length as transformers groups it: each megabatch of 50
    batches sorted longest first."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from dense_encoders.trainer.resume import LengthGroupedEpochSampler

    lengths = [random.Random(index).randint(5, 500) for index in range(1000)]
    sampler = LengthGroupedEpochSampler(2, lengths, seed=7)
    assert isinstance(sampler, LengthGroupedSampler)
    torch.manual_seed(0)
    first = list(sampler)
    torch.manual_seed(1)  # the global RNG plays no part
    assert list(sampler) == first and sorted(first) == list(range(1000))
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(second) == list(range(1000)) and second != first
    assert list(LengthGroupedEpochSampler(2, lengths, seed=7)) == first  # a fresh sampler (resumed run): epoch 0
    for order in (first, second):
        assert lengths[order[0]] == max(lengths)  # the longest text first (an out-of-memory error shows at once)
        for start in range(0, 1000, 100):  # megabatches of 50 batches of 2, each sorted longest first; only
            tail = [lengths[index] for index in order[start + 1:start + 100]]  # the heads of two may be swapped
            assert tail == sorted(tail, reverse=True), start


@pytest.mark.slow
@pytest.mark.numerics
def test_a_length_grouped_run_resumed_in_its_second_epoch_ends_as_the_uninterrupted_one(tmp_path,
                                                                                     float64_pretraining):
    """`pretrain --train_sampling_strategy group_by_length`, resumed from checkpoint-9 (the second epoch: the
    corpus makes 8 batches of 4 blocks), trains on the uninterrupted run's batches: the same losses at steps
    10-12 and the same final weights. Before, the resumed run drew the second epoch's order from the global RNG
    before the Trainer restored it, and ended 8.9e-5 away."""
    from safetensors.torch import load_file

    from dense_encoders.cli import main

    # 10 documents of 30-230 words: blocks of up to 64 tokens, of many lengths
    corpus = write_corpus(tmp_path / "corpus.jsonl", 10, min_words=30, max_words=230)

    def argv(output_dir, *extra):
        return ["pretrain", "condenser", "--preset", "tiny", "--corpus", str(corpus), "--output_dir", str(output_dir),
                "--max_steps", "12", "--save_strategy", "steps", "--save_steps", "3", "--per_device_train_batch_size",
                "4", "--max_seq_length", "64", "--min_span_tokens", "20", "--max_span_tokens", "60",
                "--train_sampling_strategy", "group_by_length", "--logging_steps", "1", "--seed", "7", "--use_cpu",
                "--report_to", "none", *extra]

    full = tmp_path / "full"
    assert main(argv(full)) == 0
    assert json.loads((full / "checkpoint-9" / "trainer_state.json").read_text())["epoch"] == 1.125
    resumed = tmp_path / "resumed"
    shutil.copytree(full / "checkpoint-9", resumed / "checkpoint-9")
    assert main(argv(resumed, "--resume_from_checkpoint", "latest")) == 0

    uninterrupted, again = logged(full, "loss"), logged(resumed, "loss")
    assert sorted(again) == list(range(1, 13))
    for step in (10, 11, 12):  # float32 sums of float64 losses: float32's precision
        assert again[step] == pytest.approx(uninterrupted[step], rel=1e-6), step
    final, resumed_final = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    at_resume = load_file(full / "checkpoint-9" / "model.safetensors")
    assert max((final[k] - at_resume[k]).abs().max().item() for k in final) > 1e-5  # steps 10-12 trained
    assert final.keys() == resumed_final.keys() and all(v.dtype == torch.float64 for v in final.values())
    for name, value in final.items():
        torch.testing.assert_close(resumed_final[name], value, **FLOAT64_TOLERANCE, msg=name)


def test_gradient_accumulation_and_partial_batches_train(tmp_path, corpus_file):
    """7 documents with batch 2 and accumulation 2: steps see 4, 4, ... then a partial 3-document batch."""
    lines = corpus_file.read_text().splitlines()[:7]
    small = tmp_path / "seven.jsonl"
    small.write_text("\n".join(lines) + "\n")
    setup = PreTrainingSetup(
        architecture="cocondenser", preset="tiny", corpus=str(small), max_seq_length=64,
        min_span_tokens=40, max_span_tokens=60,
    )
    output = tmp_path / "run"
    pretrain(setup, training_args(output, max_steps=-1, num_train_epochs=2, per_device_train_batch_size=2,
                                  gradient_accumulation_steps=2, logging_steps=1))
    spans = logged(output, "contrastive_spans")
    assert spans and min(spans.values()) >= 2
    # the last batch of each epoch holds a single document (7 = 2+2+2+1): 2 spans, averaged in
    assert any(value < 4 for value in spans.values())


def test_cli_pretrain_writes_a_complete_checkpoint(tmp_path, corpus_file):
    from dense_encoders.cli import main

    output = tmp_path / "cli-run"
    code = main([
        "pretrain", "condenser", "--corpus", str(corpus_file), "--output_dir", str(output), "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--save_strategy", "no", "--use_cpu", "--report_to", "none",
        "--max_seq_length", "64", "--logging_steps", "1",
    ])
    assert code == 0
    names = {p.name for p in output.iterdir()}
    assert {"model.safetensors", "config.json", "modeling_condenser.py", "configuration_condenser.py",
            "tokenizer.json", "modules.json", "1_Pooling", "trainer_state.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    assert set(logged(output, "head_mlm_loss")) == set(logged(output, "late_mlm_loss")) == {1, 2}


def test_cli_reads_a_json_config(tmp_path, corpus_file):
    from dense_encoders.cli import main

    config = tmp_path / "pretrain.json"
    config.write_text(json.dumps({
        "corpus": str(corpus_file), "output_dir": str(tmp_path / "from-json"), "max_steps": 1,
        "per_device_train_batch_size": 2, "save_strategy": "no", "use_cpu": True, "report_to": "none",
        "max_seq_length": 48, "n_head_layers": 1,
    }))
    assert main(["pretrain", "condenser", str(config)]) == 0
    saved = json.loads((tmp_path / "from-json" / "config.json").read_text())
    assert saved["n_head_layers"] == 1


def test_cli_rejects_unknown_architecture(capsys):
    from dense_encoders.cli import main

    assert main(["pretrain", "colbert"]) == 2
    assert "unknown architecture 'colbert'" in capsys.readouterr().err


def test_cli_reports_bad_input_without_a_traceback(tmp_path, corpus_file, capsys):
    from dense_encoders.cli import main

    assert main(["pretrain", "condenser", "--corpus", str(corpus_file), "--streaming",
                 "--output_dir", str(tmp_path / "x"), "--use_cpu"]) == 2
    assert "--streaming needs --max_steps" in capsys.readouterr().err
    assert main(["pretrain", "condenser", "--corpus", str(tmp_path / "missing.jsonl"),
                 "--output_dir", str(tmp_path / "y"), "--max_steps", "1", "--use_cpu"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_streaming_corpus_trains(tmp_path, corpus_file):
    setup = PreTrainingSetup(architecture="cocondenser", preset="tiny", corpus=str(corpus_file), streaming=True,
                             max_seq_length=64, min_span_tokens=40, max_span_tokens=60)
    output = tmp_path / "streamed"
    pretrain(setup, training_args(output, max_steps=2, per_device_train_batch_size=3))
    assert logged(output, "contrastive_spans") == {1: 6, 2: 6}


# ---------------------------------------------------------------------------- TITE through the same path


def test_cli_pretrains_tite_with_its_own_losses(tmp_path, corpus_file):
    from dense_encoders.cli import main

    output = tmp_path / "tite"
    assert main([
        "pretrain", "tite", "--preset", "tiny-tite-3-late", "--corpus", str(corpus_file), "--output_dir", str(output),
        "--max_steps", "2", "--per_device_train_batch_size", "3", "--logging_steps", "1", "--save_strategy", "no",
        "--max_seq_length", "27", "--use_cpu", "--report_to", "none",
    ]) == 0
    assert set(logged(output, "mae_loss")) == set(logged(output, "bow_loss")) == {1, 2}
    assert json.loads((output / "config.json").read_text())["auto_map"]["AutoModelForPreTraining"] == (
        "modeling_tite.TiteForPreTraining")
    assert (output / "pooling_tite.py").is_file()


def test_presets_are_checked_per_architecture(tmp_path):
    with pytest.raises(ValueError, match="Unknown tite preset 'tiny'"):
        PreTrainingSetup(architecture="tite", preset="tiny")
    with pytest.raises(ValueError, match="Unknown condenser preset 'tite-2-late'"):
        PreTrainingSetup(architecture="condenser", preset="tite-2-late")
    assert PreTrainingSetup(architecture="tite").mlm_probability == 0.0  # TITE: no input masking
    assert PreTrainingSetup(architecture="condenser").mlm_probability == 0.15


@pytest.mark.slow
def test_torchrun_without_use_cpu_trains_one_tite_whose_short_texts_skip_q_and_k(tmp_path):
    """On a machine without a GPU, ``torchrun`` without ``--use_cpu`` trains one model with DDP (before: each process
    a replica of its own, with transformers' warning only). Texts of at most 4 tokens reach one key per query from
    TITE's third layer on, where Q and K are skipped: under DDP with gradient checkpointing (no unused-parameter
    detection) the run trains (before: "Expected to have finished reduction in the prior iteration" at step 2)."""
    corpus = write_corpus(tmp_path / "short.jsonl", 12, min_words=1, max_words=3)
    output_dir = tmp_path / "tite-ddp"
    result = torchrun(
        "-m", "dense_encoders.cli", "pretrain", "tite", "--preset", "tiny-tite-2-late", "--corpus", str(corpus),
        "--output_dir", str(output_dir), "--max_steps", "3", "--per_device_train_batch_size", "2",
        "--logging_steps", "1", "--save_strategy", "no", "--max_seq_length", "4", "--gradient_checkpointing",
        "--ddp_backend", "gloo", "--report_to", "none",
        cwd=tmp_path,
    )
    assert "2 processes on a machine without a GPU: training one model on the CPU with DDP (--use_cpu)" in result.stderr
    assert set(logged(output_dir, "mae_loss")) == {1, 2, 3}
    environment = json.loads((output_dir / "training_environment.json").read_text())
    assert environment["processes"] == 2 and "CPU" in environment["device"]


def test_a_launch_transformers_would_leave_unsynchronised_is_refused(tmp_path):
    """The safety net: where transformers sets up no DDP for several processes (here: a GPU the machine is said to
    have, so --use_cpu is not implied, and none to train on), the arguments refuse in one line on every process."""
    script = tmp_path / "unsynchronised.py"
    script.write_text(
        "import sys\n"
        "from dense_encoders.trainer import processes\n"
        "processes.accelerator_available = lambda: True\n"
        "from dense_encoders.trainer import DistillationArguments\n"
        "try:\n"
        "    DistillationArguments(output_dir='out', ddp_backend='gloo', report_to='none')\n"
        "except ValueError as error:\n"
        "    import os, pathlib\n"
        "    pathlib.Path(f\"refused-{os.environ['RANK']}.txt\").write_text(str(error))\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n")
    torchrun(str(script), cwd=tmp_path, timeout=120)
    # Each process writes its own file: two processes printing to one pipe may interleave their lines.
    for rank in (0, 1):
        assert (tmp_path / f"refused-{rank}.txt").read_text().startswith(
            "2 processes were launched, but transformers set up no distributed training for them on cpu: "
            "each would train a model of its own")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_torchrun_cli_trains_tite(tmp_path, corpus_file):
    output_dir = tmp_path / "tite-ddp"
    torchrun(
        "-m", "dense_encoders.cli", "pretrain", "tite", "--preset", "tiny-tite-2-staggered",
        "--corpus", str(corpus_file), "--output_dir", str(output_dir), "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--logging_steps", "1", "--save_strategy", "no",
        "--max_seq_length", "16", "--use_cpu", "--report_to", "none",
        cwd=tmp_path,
    )
    assert set(logged(output_dir, "mae_loss")) == {1, 2}
    assert (output_dir / "model.safetensors").is_file()
