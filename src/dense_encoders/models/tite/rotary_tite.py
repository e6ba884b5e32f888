"""Rotary position embeddings (RoFormer, Su et al., 2021) at half-integer positions for TITE.

TITE's pooled queries sit at their windows' centres ``i * s + (k - 1) / 2`` (Schlatt et al.,
SIGIR 2025, Sec. 3.1), half-integers for even kernels, so positions are given in HALF units: index
``j`` means position ``j / 2``. The rotation is the rotate-half form on pairs ``(m, m + d/2)`` of
each head's ``d`` features, at angle ``position * theta^(-2m/d)``.

Two implementations of the same function:

* :func:`rotary_table` + :func:`apply_rotary_rows`: a cached cos/sin table (per device and dtype)
  whose rows are gathered once per batch, then ``x * cos + roll(x, d/2) * sin``; runs anywhere.
  :func:`rotary_rows` computes the same rows from the positions (the table is built with it), for traced graphs.
* :class:`TritonRotary`: one Triton kernel per call that computes the angles from the indices and
  reads and writes ``x`` once (forward; the backward is the inverse rotation), for CUDA tensors.

Shipped as remote code next to every checkpoint: imports ``torch`` (and, optionally, ``triton``)
absolutely and nothing from ``dense_encoders``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

import torch
from torch.autograd.function import once_differentiable

try:  # optional: everything here works without Triton, through the table implementation
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

_TABLES: dict = {}


def rotary_table(head_dim: int, theta: float, rows: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """RoPE table over half-integer positions, cached per device and dtype.

    Row ``j`` holds position ``j / 2`` as ``([cos | cos], [-sin | sin])`` of shape ``(2, 1, head_dim)``,
    so that the rotate-half form is ``x * cos + roll(x, head_dim / 2) * sin``.
    """
    key = (torch.device(device), dtype, head_dim, float(theta))
    table = _TABLES.get(key)
    if table is None or table.shape[0] < rows:
        rows = max(rows, 2 * 1024)
        with torch.inference_mode(False), torch.no_grad():
            table = rotary_rows(torch.arange(rows, device=device), head_dim, theta, dtype)
        _TABLES[key] = table
    return table


def rotary_rows(index: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """The :func:`rotary_table` rows of the half-unit positions ``index``, computed from the index itself
    (tensor ops only, so a traced graph computes them for any length): ``(*index.shape, 2, 1, head_dim)``."""
    exponents = torch.arange(0, head_dim, 2, device=index.device, dtype=dtype) / head_dim
    angles = (index.to(dtype) / 2)[..., None] * (1.0 / theta**exponents)
    cos, sin = angles.cos(), angles.sin()
    return torch.stack((torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)), -2)[..., None, :]


def apply_rotary_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x`` ``(..., rows, heads, head_dim)`` with its gathered :func:`rotary_table` rows."""
    cos, sin = rows.unbind(1)
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin).to(x.dtype)


# --------------------------------------------------------------------------------------------------
# Triton kernel (wrapped with triton.jit on first use, see pooling_tite.py for why)
# --------------------------------------------------------------------------------------------------


def _rotary_kernel(
    XQ,
    YQ,
    INDEX_Q,
    rows_q,
    stride_xq,
    stride_yq,
    XK,
    YK,
    INDEX_K,
    rows_k,
    stride_xk,
    stride_yk,
    blocks_q,
    log2_theta,
    SIGN: tl.constexpr,
    HEADS: tl.constexpr,
    HALF: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """Queries and keys in one launch: programs ``[0, blocks_q)`` rotate query rows, the rest key rows.

    Y[r, h, m] / Y[r, h, m + HALF] = x1 cos - x2 sin / x2 cos + x1 sin at angle (INDEX[r] / 2) theta^(-m/HALF)
    (SIGN = -1: the inverse rotation, for the backward pass); cos / sin are computed once per
    (row, pair) and reused for every head.
    """
    pid = tl.program_id(0)
    pair = tl.arange(0, HALF_BLOCK)
    inverse_frequency = tl.exp2(pair.to(tl.float32) * (-log2_theta / HALF))
    for which in tl.static_range(2):  # resolved at compile time: no run-time pointer selection
        if which == 0:
            X, Y, INDEX, n_rows, stride_x, stride_y = XQ, YQ, INDEX_Q, rows_q, stride_xq, stride_yq
            row = pid * BLOCK_R + tl.arange(0, BLOCK_R)
        else:
            X, Y, INDEX, n_rows, stride_x, stride_y = XK, YK, INDEX_K, rows_k, stride_xk, stride_yk
            row = (pid - blocks_q) * BLOCK_R + tl.arange(0, BLOCK_R)
        row_ok = (row >= 0) & (row < n_rows)  # the other tensor's programs fall outside [0, n_rows)
        ok = row_ok[:, None] & (pair < HALF)[None, :]
        position = tl.load(INDEX + row, mask=row_ok, other=0).to(tl.float32) * 0.5
        angle = position[:, None] * inverse_frequency[None, :]
        cos = tl.cos(angle)
        sin = tl.sin(angle) * SIGN
        base_x = X + row.to(tl.int64)[:, None] * stride_x + pair[None, :]
        base_y = Y + row.to(tl.int64)[:, None] * stride_y + pair[None, :]
        for head in tl.static_range(HEADS):
            x1 = tl.load(base_x + head * 2 * HALF, mask=ok, other=0.0).to(tl.float32)
            x2 = tl.load(base_x + head * 2 * HALF + HALF, mask=ok, other=0.0).to(tl.float32)
            tl.store(base_y + head * 2 * HALF, (x1 * cos - x2 * sin).to(Y.dtype.element_ty), mask=ok)
            tl.store(base_y + head * 2 * HALF + HALF, (x2 * cos + x1 * sin).to(Y.dtype.element_ty), mask=ok)


@functools.cache
def _kernel(interpret: bool):
    del interpret  # cache key only: triton.jit reads TRITON_INTERPRET itself
    return triton.jit(_rotary_kernel)


def _contiguous_heads(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 and x.stride(-2) == x.shape[-1] else x.contiguous()


def _launch(query, key, query_index, key_index, theta: float, sign: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``query`` and ``key`` ``(rows, heads, head_dim)`` (same heads and head_dim) in one launch."""
    query, key = _contiguous_heads(query), _contiguous_heads(key)
    out_q, out_k = torch.empty_like(query), torch.empty_like(key)
    heads, head_dim = query.shape[1], query.shape[2]
    half_block = triton.next_power_of_2(head_dim // 2)
    block_r = max(1, min(128, 2048 // half_block))
    blocks_q, blocks_k = triton.cdiv(query.shape[0], block_r), triton.cdiv(key.shape[0], block_r)
    if blocks_q + blocks_k == 0:
        return out_q, out_k
    kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
    with torch.cuda.device(query.device) if query.is_cuda else contextlib.nullcontext():
        kernel[(blocks_q + blocks_k,)](
            query, out_q, query_index, query.shape[0], query.stride(0), out_q.stride(0),
            key, out_k, key_index, key.shape[0], key.stride(0), out_k.stride(0),
            blocks_q, math.log2(theta),
            SIGN=sign, HEADS=heads, HALF=head_dim // 2, HALF_BLOCK=half_block, BLOCK_R=block_r, num_warps=4,
        )
    return out_q, out_k


class TritonRotary(torch.autograd.Function):
    """RoPE of queries and keys at half-integer positions ``index / 2`` in one Triton kernel;
    the backward is the inverse rotation of the incoming gradients, again in one kernel."""

    @staticmethod
    def forward(ctx, query, key, query_index, key_index, theta: float):
        ctx.save_for_backward(query_index, key_index)
        ctx.theta = theta
        return _launch(query, key, query_index, key_index, theta, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_query, grad_key):
        query_index, key_index = ctx.saved_tensors
        grad_query, grad_key = _launch(grad_query, grad_key, query_index, key_index, ctx.theta, -1)
        return grad_query, grad_key, None, None, None


def fused_rotary_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether :class:`TritonRotary` runs for tensors of this device and dtype (CUDA, fp16/bf16/fp32)."""
    return triton is not None and torch.device(device).type == "cuda" and dtype != torch.float64


def apply_rotary(query, key, query_index, key_index, theta: float, query_rows=None, key_rows=None):
    """RoPE on ``query`` and ``key`` ``(rows, heads, head_dim)`` at positions ``index / 2``: through the
    gathered table rows when given (any device), else with one Triton kernel for both (CUDA)."""
    if key_rows is not None:
        return apply_rotary_rows(query, query_rows), apply_rotary_rows(key, key_rows)
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad):
        return TritonRotary.apply(query, key, query_index, key_index, theta)
    return _launch(query, key, query_index, key_index, theta, 1)  # inference: no autograd node


__all__ = ["TritonRotary", "apply_rotary", "apply_rotary_rows", "fused_rotary_available", "rotary_rows", "rotary_table"]
