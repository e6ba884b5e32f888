"""TITE on CUDA: varlen vs padded vs naive, compiled Triton pooling, bf16 batch invariance, host syncs.

Skipped without CUDA (CI has none); run on a GPU machine with ``python -m pytest tests/test_tite_gpu.py``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings

import numpy as np
import pytest
import torch

from dense_encoders.models.tite import modeling_tite as M
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.pooling_tite import DeviceArrays, PoolPlan, pool_planned
from dense_encoders.models.tite.presets import tite_preset

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PRESETS = ["tiny-tite-2-late", "tiny-tite-2-staggered", "tiny-tite-3-late", "tiny-tite-2-late-pre",
           "tiny-tite-2-late-post", "tiny-tite-2-late-upscale"]


def model_on_cuda(name: str, dtype=torch.bfloat16, **overrides) -> TiteModel:
    torch.manual_seed(0)
    settings = dict(vocab_size=60, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = tite_preset(name, **{**settings, **overrides})
    config._attn_implementation = "sdpa"
    return TiteModel(config).to("cuda", dtype).eval()


def ragged(lengths, width=None, seed=0, device="cuda"):
    generator = torch.Generator().manual_seed(seed)
    width = width or max(lengths)
    ids = torch.randint(1, 60, (len(lengths), width), generator=generator)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": (ids * mask).to(device), "attention_mask": mask.to(device)}


@contextlib.contextmanager
def sync_debug_mode(mode: str):
    """Run the block under torch.cuda.set_sync_debug_mode(mode), after the queued work has finished."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def force_padded_attention(monkeypatch):
    monkeypatch.setattr(M, "varlen_attn", None)
    monkeypatch.setattr(M, "_flash_attention_forward", None)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected.double()).norm() / expected.double().norm())


@pytest.mark.parametrize("name", PRESETS)
def test_varlen_padded_sdpa_and_the_reference_agree(name, monkeypatch):
    """bf16 varlen and padded sdpa against the fp64 model on the CPU (the naive reference's precision)."""
    model = model_on_cuda(name)
    lengths = [model.config.max_position_embeddings, 1, 9, 2, 13]
    batch = ragged(lengths)
    reference = TiteModel(copy.deepcopy(model.config)).double().eval()
    reference.load_state_dict({k: v.double().cpu() for k, v in model.state_dict().items()})
    reference.config._attn_implementation = "eager"
    with torch.no_grad():
        expected = reference(**{k: v.cpu() for k, v in batch.items()}).pooler_output
        assert model.plan(**batch).varlen
        varlen = model(**batch).pooler_output
        force_padded_attention(monkeypatch)
        assert not model.plan(**batch).varlen
        padded = model(**batch).pooler_output
    assert relative_error(varlen.cpu(), expected) < 2e-2
    assert relative_error(padded.cpu(), expected) < 2e-2
    assert relative_error(varlen, padded) < 2e-2


def test_varlen_backward_matches_padded_sdpa(monkeypatch):
    model = model_on_cuda("tiny-tite-2-late")
    batch = ragged([16, 3, 11, 1])
    grads = []
    for varlen in (True, False):
        if not varlen:
            force_padded_attention(monkeypatch)
        model.zero_grad()
        model.train()
        model(**batch).pooler_output.float().pow(2).sum().backward()
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None]))
    assert relative_error(grads[0], grads[1]) < 3e-2


def test_the_direct_flash_operator_equals_public_varlen_attn(monkeypatch):
    model = model_on_cuda("tiny-tite-2-late-upscale")
    batch = ragged([16, 3, 11, 1, 7])
    with torch.no_grad():
        direct = model(**batch).pooler_output
        monkeypatch.setattr(M, "_flash_attention_forward", None)
        public = model(**batch).pooler_output
    torch.testing.assert_close(direct, public, atol=0, rtol=0)  # the same kernel


def test_attention_dropout_trains_on_the_varlen_path():
    model = model_on_cuda("tiny-tite-2-late", attention_probs_dropout_prob=0.5)
    batch = ragged([16, 3, 11, 5])
    model.train()
    assert model.plan(**batch).varlen
    outputs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        outputs.append(model(**batch).pooler_output)
    outputs[0].float().sum().backward()
    assert torch.equal(outputs[0], outputs[1])  # the dropout stream follows the seed
    assert not torch.equal(outputs[0], outputs[2])  # and dropout is really applied
    model.eval()
    with torch.no_grad():
        assert relative_error(model(**batch).pooler_output, outputs[0].detach()) > 1e-2
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ["tiny-tite-2-late", "tiny-tite-3-staggered", "tiny-tite-2-late-upscale"])
def test_bf16_batch_invariance(name):
    model = model_on_cuda(name)
    n = model.config.max_position_embeddings
    lengths = [n, 2, 7, 1, n - 1, 5]
    batch = ragged(lengths)
    with torch.no_grad():
        together = model(**batch).pooler_output.float()
        for row, length in enumerate(lengths):
            alone = model(**{k: v[row : row + 1, :length] for k, v in batch.items()}).pooler_output.float()
            assert relative_error(together[row], alone[0]) <= 2e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 3), (3, 2), (4, 1), (2, 3)])
def test_compiled_triton_pooling_matches_torch(kernel, stride, dtype):
    pytest.importorskip("triton")
    lengths = np.array([0, 1, 80, 33, 2, 511, 7])
    arrays = DeviceArrays()
    plan = PoolPlan(lengths, kernel, stride, arrays)
    arrays.transfer(torch.device("cuda"))
    hidden = torch.randn(int(lengths.sum()), 768, device="cuda", dtype=dtype)
    leaves = [hidden.clone().requires_grad_() for _ in range(2)]
    out_triton = pool_planned(leaves[0], plan, "triton")
    out_torch = pool_planned(leaves[1], plan, "torch")
    assert type(out_triton.grad_fn).__name__ == "TritonPackedPoolBackward"
    tolerance = 0 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out_triton, out_torch, atol=tolerance or 1e-6, rtol=tolerance)
    upstream = torch.randn_like(out_torch)
    out_triton.backward(upstream)
    out_torch.backward(upstream)
    torch.testing.assert_close(leaves[0].grad, leaves[1].grad, atol=tolerance or 1e-6, rtol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rotary_equals_the_table_path(dtype):
    from dense_encoders.models.tite.rotary_tite import apply_rotary, apply_rotary_rows, rotary_table

    x = torch.randn(1000, 12, 64, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(2000, 12, 64, device="cuda", dtype=dtype)
    index = torch.randint(0, 1024, (1000,), device="cuda", dtype=torch.int32)
    index_k = torch.randint(0, 1024, (2000,), device="cuda", dtype=torch.int32)
    rows = rotary_table(64, 10000.0, 1024, torch.device("cuda"), torch.float32).index_select(0, index)
    rows_k = rotary_table(64, 10000.0, 1024, torch.device("cuda"), torch.float32).index_select(0, index_k)
    fused, fused_k = apply_rotary(x, k, index, index_k, 10000.0)
    table = apply_rotary_rows(x, rows)
    assert relative_error(fused_k, apply_rotary_rows(k, rows_k)) < (1e-4 if dtype == torch.float32 else 2e-2)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    assert relative_error(fused, table) < tolerance
    upstream = torch.randn_like(fused)
    (grad_fused,) = torch.autograd.grad(fused, x, upstream)
    (grad_table,) = torch.autograd.grad(table, x, upstream)
    assert relative_error(grad_fused, grad_table) < tolerance


def test_a_forward_with_a_cpu_mask_never_synchronises():
    model = model_on_cuda("tiny-tite-2-staggered")
    batch = ragged([16, 4, 9])
    batch["attention_mask"] = batch["attention_mask"].cpu()
    with torch.no_grad():
        model(**batch)  # warm-up: kernels compiled, rotary tables cached
        with sync_debug_mode("error"):
            vectors = model(**batch).pooler_output
    assert vectors.shape == (3, model.config.hidden_size)


def test_a_forward_with_a_cuda_mask_synchronises_once():
    model = model_on_cuda("tiny-tite-2-late")
    batch = ragged([16, 4, 9])
    with torch.no_grad():
        model(**batch)
        with warnings.catch_warnings(record=True) as caught, sync_debug_mode("warn"):
            warnings.simplefilter("always")
            model(**batch)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) == 1, [str(w.message) for w in syncs]


def test_cuda_graphs_replay_the_eager_forward():
    model = model_on_cuda("tiny-tite-2-late")
    n = model.config.max_position_embeddings
    batches = [ragged([n, 3, 9, 1]), ragged([5, n, 2, 2, 7], seed=1), ragged([n] * 20 + [1], seed=2), ragged([4, 4])]
    with torch.no_grad():
        eager = [model(**batch).pooler_output for batch in batches]
        model.config.cuda_graphs = True
        graphed = [model(**batch).pooler_output for batch in batches]
        again = [model(**batch).pooler_output for batch in reversed(batches)][::-1]  # replays, other order
    assert len(model._cuda_graphs) >= 2  # several buckets were captured
    for e, g, a in zip(eager, graphed, again):
        assert g.shape == e.shape
        assert relative_error(g, e) < 1e-2
        assert torch.equal(a, g)  # a replay with new inputs in the same bucket computes the same
    model.train()  # training never replays graphs
    assert not model._graphs_apply(batches[0]["input_ids"])


def test_cuda_graph_replays_do_not_synchronise_beyond_the_mask_read():
    model = model_on_cuda("tiny-tite-2-staggered", cuda_graphs=True)
    batch = ragged([16, 4, 9])
    batch["attention_mask"] = batch["attention_mask"].cpu()
    with torch.no_grad():
        first = model(**batch).pooler_output  # capture
        with sync_debug_mode("error"):
            replayed = model(**batch).pooler_output
    assert torch.equal(first, replayed)
