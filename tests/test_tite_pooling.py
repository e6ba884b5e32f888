"""TITE packed pooling (TITE Eq. 1, pool_{k,s}) as the model runs it: a :class:`PoolPlan` (lengths, window
rows, window centres) and :func:`pool_planned` (PyTorch and Triton) against naive per-sequence references."""

import logging
import math
import os

import numpy as np
import pytest
import torch
from conftest import FLOAT64_TOLERANCE

from dense_encoders.models.tite import pooling_tite as P
from dense_encoders.models.tite.pooling_tite import PLAN_PARTS, DeviceArrays, PoolPlan, pool_planned

KS = [(k, s) for k in range(1, 5) for s in range(1, 5)]
WIDE_KS = [(9, 9), (9, 4), (9, 1), (2, 9), (7, 3), (5, 6)]


def cu_from(lengths, dtype=torch.int32):
    return torch.tensor([0] + list(lengths), dtype=torch.int64).cumsum(0).to(dtype)


def planned(lengths, k, s, device="cpu", dtype=np.int64) -> PoolPlan:
    """The plan a TITE layer pools with (every part: PyTorch bags, Triton windows and tokens), on ``device``."""
    arrays = DeviceArrays()
    plan = PoolPlan(np.asarray(lengths, dtype=dtype), k, s, arrays, needs=frozenset(PLAN_PARTS))
    arrays.transfer(torch.device(device))
    return plan


def pool(hidden, lengths, k, s, implementation="torch"):
    """What a TITE layer runs: ``pool_planned`` with a :class:`PoolPlan` of the batch's lengths;
    returns the pooled rows and the plan's pooled ``cu_seqlens``."""
    plan = planned(lengths, k, s, hidden.device)
    return pool_planned(hidden, plan, implementation), plan.out_cu_seqlens


def random_lengths(seed, n=6, high=11):
    g = torch.Generator().manual_seed(seed)
    return [0, 1] + torch.randint(0, high, (n - 2,), generator=g).tolist()


def naive_pool(hidden, lengths, k, s):
    """Per sequence, per window: windows start at 0, s, 2s, ... until one reaches the sequence end."""
    rows, start = [], 0
    for length in lengths:
        i = 0
        while length > 0:
            window = hidden[start + i * s : start + min(i * s + k, length)]
            rows.append(window.mean(0) if len(window) else hidden.new_zeros(hidden.shape[1]))
            if i * s + k >= length:
                break
            i += 1
        start += length
    return torch.stack(rows) if rows else hidden.new_zeros((0, hidden.shape[1]))


def naive_centres(lengths, k, s):
    """Per sequence, per window (as :func:`naive_pool` walks them): the centre of its full k-token span."""
    centres = []
    for length in lengths:
        i = 0
        while length > 0:
            centres.append(i * s + (k - 1) / 2)
            if i * s + k >= length:
                break
            i += 1
    return centres


# ---------------------------------------------------------------- lengths, offsets, centres


@pytest.mark.parametrize(
    "length,k,s,expected",
    [
        (5, 2, 2, 3),
        (1, 2, 2, 1),
        (1, 4, 1, 1),
        (0, 2, 2, 0),
        (0, 1, 1, 0),
        (3, 4, 2, 1),
        (4, 4, 2, 1),
        (6, 4, 2, 2),
        (7, 3, 1, 5),
        (5, 1, 3, 3),
    ],
)
def test_pooled_lengths_hand_cases(length, k, s, expected):
    plan = planned([length], k, s)
    assert plan.out_lengths.tolist() == [expected] and plan.out_cu_seqlens.tolist() == [0, expected]


def test_pooled_lengths_formula_vectorised_keeps_dtype():
    lengths = np.arange(0, 40, dtype=np.int32)
    for k in range(1, 10):
        for s in range(1, 10):
            plan = planned(lengths, k, s, dtype=np.int32)
            # host lengths in int64 (the plan's sizes), device cu_seqlens in int32 (what varlen attention takes)
            assert plan.out_lengths.dtype == np.int64 and plan.out_cu_seqlens.dtype == torch.int32
            assert plan.out_cu_seqlens.device == torch.device("cpu")
            expected = [0 if n == 0 else math.ceil(max(0, n - k) / s) + 1 for n in range(40)]
            assert plan.out_lengths.tolist() == expected, (k, s)
            assert plan.out_cu_seqlens.tolist() == np.concatenate(([0], np.cumsum(expected))).tolist(), (k, s)
            assert P.pooled_lengths_host(lengths, k, s).tolist() == expected, (k, s)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_pooled_cu_seqlens_and_window_centres(dtype):
    plan = planned([5, 0, 2, 1], 2, 2, dtype=dtype)
    assert plan.out_cu_seqlens.tolist() == [0, 3, 3, 4, 5] and plan.out_lengths.tolist() == [3, 0, 1, 1]
    assert (plan.total_in, plan.total_out, plan.max_out) == (8, 5, 3)
    # the rotary index of every window: twice i*s + (k-1)/2, also for the partial last window of the first sequence
    assert (plan.centre_index / 2).tolist() == [0.5, 2.5, 4.5, 0.5, 0.5]
    assert (planned([5, 0, 2, 1], 3, 1, dtype=dtype).centre_index / 2).tolist() == [1.0, 2.0, 3.0, 1.0, 1.0]
    assert planned([], 2, 2).centre_index.size == 0


@pytest.mark.parametrize("k,s", KS + WIDE_KS)
def test_window_centres_match_the_naive_walk(k, s):
    lengths = random_lengths(seed=10 * k + s, high=20)
    assert (planned(lengths, k, s).centre_index / 2).tolist() == naive_centres(lengths, k, s)


# ---------------------------------------------------------------- PyTorch implementation


@pytest.mark.parametrize("k,s", KS + WIDE_KS)
def test_torch_matches_naive_reference(k, s):
    lengths = random_lengths(seed=10 * k + s)
    hidden = torch.randn(sum(lengths), 8, dtype=torch.float64)
    pooled, out_cu = pool(hidden, lengths, k, s)
    expected = naive_pool(hidden, lengths, k, s)
    assert pooled.shape == expected.shape and pooled.dtype == torch.float64
    torch.testing.assert_close(pooled, expected, rtol=0, atol=1e-12)
    assert (
        out_cu.tolist()
        == [0] + torch.tensor([len(naive_pool(hidden[:n], [n], k, s)) for n in lengths]).cumsum(0).tolist()
    )


def test_torch_fp16_accumulates_in_fp32():
    lengths = [9, 1, 0, 4]
    hidden = torch.randn(sum(lengths), 8)
    pooled, _ = pool(hidden.half(), lengths, 3, 2)
    assert pooled.dtype == torch.float16
    torch.testing.assert_close(pooled.float(), naive_pool(hidden, lengths, 3, 2), rtol=0, atol=2e-3)


@pytest.mark.parametrize("k,s", [(2, 2), (3, 1), (4, 3), (2, 3), (1, 1)])
def test_torch_gradcheck(k, s):
    lengths = [0, 1, 5, 3, 7]
    hidden = torch.randn(sum(lengths), 3, dtype=torch.float64, requires_grad=True)
    plan = planned(lengths, k, s)
    assert torch.autograd.gradcheck(lambda h: pool_planned(h, plan, "torch"), (hidden,))


def test_torch_empty_batches():
    for lengths in ([], [0], [0, 0, 0]):
        hidden = torch.randn(0, 4, requires_grad=True)
        pooled, out_cu = pool(hidden, lengths, 2, 2)
        assert pooled.shape == (0, 4) and out_cu.tolist() == [0] * (len(lengths) + 1)
        pooled.sum().backward()
        assert hidden.grad.shape == (0, 4)


# ---------------------------------------------------------------- Triton implementation


def triton_vs_torch(lengths, k, s, dim=8, dtype=torch.float64, seed=0, hidden=None):
    """Triton (in its CPU interpreter, which supports float64: the tests that call this take the
    ``triton_interpreter`` fixture) against the PyTorch pooling, forward and backward.

    float64 (the default): conftest's equivalence tolerance. float32 / float16: both implementations add at
    most k values (forward) or ceil(k/s) window gradients (backward) in float32 and round once to ``dtype``;
    the order differs, so they may land up to a few ulps of the largest magnitude apart: 4 ulps of
    max(|hidden|, |upstream|) for float16 (rounding-boundary flips), 16 for float32 (summation order).
    """
    torch.manual_seed(seed)
    if hidden is None:
        hidden = torch.randn(sum(lengths), dim).to(dtype)
    hidden = hidden.to(dtype)
    x_torch = hidden.detach().clone().requires_grad_()
    x_triton = hidden.detach().clone().requires_grad_()
    ref, ref_cu = pool(x_torch, lengths, k, s, implementation="torch")
    out, out_cu = pool(x_triton, lengths, k, s, implementation="triton")
    upstream = torch.randn(ref.shape).to(dtype)
    if dtype == torch.float64:
        atol = FLOAT64_TOLERANCE["atol"]
    else:
        largest = max([1.0] + [float(t.abs().max()) for t in (hidden, upstream) if t.numel()])
        atol = (4 if dtype == torch.float16 else 16) * torch.finfo(dtype).eps * largest
    assert type(out.grad_fn).__name__ == "TritonPackedPoolBackward"
    assert out.dtype == dtype and torch.equal(out_cu, ref_cu) and torch.equal(out_cu, cu_from(
        [len(naive_centres([n], k, s)) for n in lengths]))
    torch.testing.assert_close(out, ref, rtol=0, atol=atol)
    ref.backward(upstream)
    out.backward(upstream)
    assert x_triton.grad.dtype == dtype
    torch.testing.assert_close(x_triton.grad, x_torch.grad, rtol=0, atol=atol)
    return x_triton.grad


@pytest.mark.numerics
@pytest.mark.parametrize("k,s", KS)
def test_triton_matches_torch(k, s, triton_interpreter):
    pytest.importorskip("triton")
    triton_vs_torch(random_lengths(seed=k * 7 + s), k, s, seed=k + s)


@pytest.mark.numerics
def test_triton_wide_kernels_strides_and_edge_batches(triton_interpreter):
    pytest.importorskip("triton")
    for i, (k, s) in enumerate(WIDE_KS):
        triton_vs_torch(random_lengths(seed=i, high=20), k, s, seed=i)
    for lengths in ([], [0], [0, 0], [1], [1, 1, 0, 1]):
        triton_vs_torch(lengths, 3, 2)
    # several window, token and dim blocks per sequence; a non-contiguous input
    triton_vs_torch([70, 1, 33], 2, 2, dim=130)
    triton_vs_torch([9, 0, 4], 3, 2, hidden=torch.randn(8, 13, dtype=torch.float64).t())


@pytest.mark.numerics
def test_triton_gaps_get_zero_gradient(triton_interpreter):
    pytest.importorskip("triton")
    grad = triton_vs_torch([7], 2, 3)  # windows [0,2), [3,5), [6,7): tokens 2 and 5 are in none
    assert grad[[2, 5]].abs().sum() == 0 and grad[[0, 1, 3, 4, 6]].abs().min() > 0


@pytest.mark.numerics
def test_triton_fp32(triton_interpreter):
    pytest.importorskip("triton")
    triton_vs_torch([11, 0, 1, 6, 70], 4, 2, dtype=torch.float32)


@pytest.mark.numerics
def test_triton_fp16(triton_interpreter):
    pytest.importorskip("triton")
    triton_vs_torch([11, 0, 1, 6], 3, 2, dtype=torch.float16)


def test_the_interpreter_fixture_alone_runs_the_kernels_on_cpu_tensors(monkeypatch, request):
    # on a GPU machine conftest leaves TRITON_INTERPRET unset (the rest of the suite runs compiled kernels): the
    # fixture alone must put a test's Triton pooling of CPU tensors in the interpreter
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(P, "_FALLBACK_WARNED", True)  # the fallback's one warning is tested below
    lengths, hidden = [5, 2], torch.randn(7, 4, dtype=torch.float64)
    without, _ = pool(hidden.clone().requires_grad_(), lengths, 2, 2, implementation="triton")
    assert type(without.grad_fn).__name__ != "TritonPackedPoolBackward"  # PyTorch's pooling: no interpreter
    request.getfixturevalue("triton_interpreter")
    out, _ = pool(hidden.clone().requires_grad_(), lengths, 2, 2, implementation="triton")
    assert type(out.grad_fn).__name__ == "TritonPackedPoolBackward"
    torch.testing.assert_close(out, naive_pool(hidden, lengths, 2, 2), **FLOAT64_TOLERANCE)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="without CUDA, conftest runs every test in the interpreter")
def test_outside_the_fixture_a_gpu_machine_compiles_the_kernels():
    # importing this module sets nothing: the GPU tests of a full suite run compiled Triton
    assert os.environ.get("TRITON_INTERPRET") != "1"


# ---------------------------------------------------------------- dispatcher


def test_auto_agrees_with_torch_and_never_picks_the_cpu_interpreter(monkeypatch):
    lengths = [6, 0, 1, 9]
    hidden = torch.randn(sum(lengths), 8)
    ref, ref_cu = pool(hidden, lengths, 4, 2, implementation="torch")
    out, out_cu = pool(hidden, lengths, 4, 2, implementation="auto")
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(out, naive_pool(hidden, lengths, 4, 2), rtol=0, atol=1e-5)
    assert torch.equal(out_cu, ref_cu)
    leaf = hidden.clone().requires_grad_()
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter is for explicit "triton" (tests) only
    assert type(pool(leaf, lengths, 4, 2, implementation="auto")[0].grad_fn).__name__ != "TritonPackedPoolBackward"
    assert type(pool(leaf, lengths, 4, 2, implementation="triton")[0].grad_fn).__name__ == \
        "TritonPackedPoolBackward"


@pytest.mark.parametrize("installed", [True, False])
def test_triton_request_falls_back_with_one_warning(monkeypatch, caplog, installed):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(P, "triton_available", lambda: installed)
    monkeypatch.setattr(P, "_FALLBACK_WARNED", False)
    lengths = [5, 2]
    hidden = torch.randn(7, 4)
    with caplog.at_level(logging.WARNING, logger=P.__name__):
        for _ in range(3):
            out, _ = pool(hidden, lengths, 2, 2, implementation="triton")
            torch.testing.assert_close(out, naive_pool(hidden, lengths, 2, 2))
        pool(hidden, lengths, 2, 2, implementation="auto")
    records = [r for r in caplog.records if r.name == P.__name__]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    message = records[0].getMessage()
    assert "\n" not in message
    assert ("not installed" in message) if not installed else ("TRITON_INTERPRET=1" in message and "CUDA" in message)


@pytest.mark.parametrize(
    "k,s,match",
    [(0, 1, "kernel_size"), (2, 0, "stride"), (2.0, 1, "kernel_size"), (True, 1, "kernel_size"), (2, -1, "stride")],
)
def test_invalid_windows_name_the_fix(k, s, match):
    with pytest.raises(ValueError, match=match):
        planned([4], k, s)


@pytest.mark.parametrize(
    "hidden,lengths,impl,match",
    [
        (torch.randn(1, 4, 2), [4], "torch", "2-D"),
        (torch.randn(4), [4], "torch", "2-D"),
        (torch.ones(4, 2, dtype=torch.long), [4], "torch", "floating-point"),
        (torch.randn(4, 2), [3], "torch", "4 rows but the pooling plan was made for 3"),
        (torch.randn(4, 2), [2, 3], "torch", "4 rows but the pooling plan was made for 5"),
        (torch.randn(4, 2), [4], "cuda", "implementation"),
    ],
)
def test_invalid_arguments(hidden, lengths, impl, match):
    with pytest.raises(ValueError, match=match):
        pool(hidden, lengths, 2, 2, implementation=impl)


def test_stride_larger_than_kernel_is_allowed_here():
    out, out_cu = pool(torch.ones(5, 2), [5], 1, 3, implementation="torch")
    # windows [0,1), [3,4), [6,7): the formula's last window starts past the end and is empty -> 0
    assert out_cu.tolist() == [0, 3] and out[:, 0].tolist() == [1.0, 1.0, 0.0]
