"""Windowed mean pooling over packed (unpadded) sequences for TITE (Schlatt et al., SIGIR 2025).

TITE Eq. 1 (pool_{k,s}): a sequence of ``L`` real tokens is pooled with kernel ``k`` and stride
``s`` into ``L_out = ceil(max(0, L - k) / s) + 1`` vectors (``0`` when ``L == 0``). Window ``i``
covers positions ``[i*s, min(i*s + k, L))`` of its own sequence and is the plain mean of exactly
those tokens, so padding is never mixed in, a partial last window averages only its real tokens,
and ``L < k`` collapses to one vector. With ``s > k`` (accepted here, refused by the TITE config)
tokens between windows belong to none (zero gradient), and the formula can end on a window that
starts at or past ``L``: such an empty window is defined as 0.

Sequences are packed: ``hidden`` is ``[total_tokens, dim]`` and ``cu_seqlens`` (``[batch + 1]``,
int32 or int64, ``cu_seqlens[0] == 0``) holds cumulative lengths, as for varlen flash attention.

Two implementations give the same numbers (fp32 accumulation, output in the input dtype):

* :func:`pool_packed_torch`: plain, vectorised PyTorch; runs anywhere, differentiable by autograd.
* a Triton kernel pair (forward and backward) behind a :class:`torch.autograd.Function`; runs on
  CUDA, or on CPU in Triton's interpreter when ``TRITON_INTERPRET=1`` (slow; for tests).

:func:`pool_packed` picks one. Shipped as remote code next to checkpoints: imports ``torch``
(and, optionally, ``triton``) absolutely and nothing from ``dense_encoders``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import numbers
import os
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

try:  # optional: everything here works without Triton, through the PyTorch implementation
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

logger = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "triton", "torch")

# CUDA caps grid axes 1 and 2 at 65535 blocks: larger batches are launched in chunks.
_MAX_GRID_BATCH = 65535

_FALLBACK_WARNED = False  # the "triton requested but cannot run" warning is logged once per process


# --------------------------------------------------------------------------------------------------
# Lengths, offsets and window positions
# --------------------------------------------------------------------------------------------------


def _check_window(kernel_size, stride) -> tuple[int, int]:
    for name, value in (("kernel_size", kernel_size), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}; pass e.g. {name}=2.")
    return int(kernel_size), int(stride)


def _check_cu_seqlens_structure(cu_seqlens) -> None:
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(
            f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}; build it with "
            "torch.nn.functional.pad(lengths.cumsum(0), (1, 0))."
        )
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        raise ValueError(
            f"cu_seqlens must be 1-D with batch + 1 entries (cu_seqlens[0] == 0), got shape {tuple(cu_seqlens.shape)}."
        )
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}; cast it with .to(torch.int32).")


def pooled_lengths(lengths: torch.Tensor, kernel_size: int, stride: int) -> torch.Tensor:
    """Number of pooled vectors per sequence, TITE Eq. 1 (pool_{k,s}).

    ``ceil(max(0, L - k) / s) + 1`` for ``L > 0`` and ``0`` for ``L == 0``; vectorised, in the
    dtype and on the device of ``lengths``.
    """
    kernel_size, stride = _check_window(kernel_size, stride)
    if not isinstance(lengths, torch.Tensor) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError("lengths must be an integer torch.Tensor of sequence lengths.")
    n_out = torch.div(torch.clamp(lengths - kernel_size, min=0) + (stride - 1), stride, rounding_mode="floor") + 1
    return torch.where(lengths > 0, n_out, torch.zeros_like(n_out)).to(lengths.dtype)


def pooled_cu_seqlens(cu_seqlens: torch.Tensor, kernel_size: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cumulative lengths of the pooled sequences, TITE Eq. 1 (pool_{k,s}).

    Returns ``(out_cu_seqlens, out_lengths)``, both in the dtype and on the device of
    ``cu_seqlens``; ``out_cu_seqlens[0] == 0``. Does not synchronise with the device.
    """
    kernel_size, stride = _check_window(kernel_size, stride)
    _check_cu_seqlens_structure(cu_seqlens)
    out_lengths = pooled_lengths(cu_seqlens[1:] - cu_seqlens[:-1], kernel_size, stride)
    out_cu = torch.zeros_like(cu_seqlens)
    out_cu[1:] = torch.cumsum(out_lengths, dim=0).to(cu_seqlens.dtype)
    return out_cu, out_lengths


def window_centres(cu_seqlens: torch.Tensor, kernel_size: int, stride: int) -> torch.Tensor:
    """Position of every pooled vector within its sequence, TITE Eq. 1 (pool_{k,s}).

    Window ``i`` sits at ``i*s + (k-1)/2`` (float32, packed like the pooled output), the centre of
    its full ``k``-token span, for rotary positions of pooled queries. A PARTIAL last window keeps
    this nominal centre, not the centre of its real tokens ``(i*s + min(i*s + k, L) - 1) / 2``,
    so positions stay on one regular grid of step ``s`` whatever the sequence length.
    """
    out_cu, out_lengths = pooled_cu_seqlens(cu_seqlens, kernel_size, stride)
    total_out = int(out_cu[-1])
    window = torch.arange(total_out, device=out_cu.device, dtype=torch.int64)
    window = window - torch.repeat_interleave(out_cu[:-1].long(), out_lengths.long(), output_size=total_out)
    return window.to(torch.float32) * stride + (kernel_size - 1) / 2


class _PackedLayout(NamedTuple):
    """Validated input and output offsets; host-side sizes come from one device synchronisation."""

    cu_seqlens: torch.Tensor  # on the device of hidden
    out_cu_seqlens: torch.Tensor
    lengths: torch.Tensor
    out_lengths: torch.Tensor
    total_out: int
    max_len: int
    max_out: int


def _layout(hidden: torch.Tensor, cu_seqlens: torch.Tensor, kernel_size: int, stride: int) -> _PackedLayout:
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        shape = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(
            f"hidden must be a 2-D packed tensor [total_tokens, dim], got {shape}; unpad a "
            "[batch, seq, dim] tensor with hidden[attention_mask.bool()]."
        )
    if not hidden.dtype.is_floating_point:
        raise ValueError(f"hidden must be floating point, got {hidden.dtype}.")
    _check_cu_seqlens_structure(cu_seqlens)
    host = cu_seqlens.detach().to("cpu", torch.int64)
    lengths_host = host[1:] - host[:-1]
    if host[0] != 0 or bool((lengths_host < 0).any()):
        raise ValueError(
            "cu_seqlens must start at 0 and be non-decreasing (cumulative sequence lengths), got "
            f"{host.tolist()[:8]}{'...' if host.numel() > 8 else ''}."
        )
    if host[-1] != hidden.shape[0]:
        raise ValueError(
            f"cu_seqlens[-1] must equal hidden.shape[0] (the number of packed tokens): got "
            f"{int(host[-1])} and {hidden.shape[0]}."
        )
    out_lengths_host = pooled_lengths(lengths_host, kernel_size, stride)
    cu_seqlens = cu_seqlens.to(hidden.device)
    out_cu, out_lengths = pooled_cu_seqlens(cu_seqlens, kernel_size, stride)
    return _PackedLayout(
        cu_seqlens=cu_seqlens,
        out_cu_seqlens=out_cu,
        lengths=cu_seqlens[1:] - cu_seqlens[:-1],
        out_lengths=out_lengths,
        total_out=int(out_lengths_host.sum()),
        max_len=int(lengths_host.max()) if lengths_host.numel() else 0,
        max_out=int(out_lengths_host.max()) if out_lengths_host.numel() else 0,
    )


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# --------------------------------------------------------------------------------------------------
# PyTorch implementation
# --------------------------------------------------------------------------------------------------


def _pool_torch(hidden: torch.Tensor, layout: _PackedLayout, kernel_size: int, stride: int) -> torch.Tensor:
    device, total_out = hidden.device, layout.total_out
    batch = layout.lengths.numel()
    seq = torch.repeat_interleave(
        torch.arange(batch, device=device), layout.out_lengths.long(), output_size=total_out
    )  # sequence of every output window
    window = torch.arange(total_out, device=device) - layout.out_cu_seqlens[:-1].long()[seq]
    first = window * stride  # first position of every window within its sequence
    length = layout.lengths.long()[seq]
    base = layout.cu_seqlens[:-1].long()[seq] + first  # first packed row of every window
    # Real tokens per window; 0 only for the empty windows that stride > kernel_size can leave
    # at the end of a sequence, whose mean is defined as 0.
    count = torch.clamp(length - first, min=1, max=kernel_size)
    acc_dtype = _accumulator_dtype(hidden.dtype)
    acc = hidden.new_zeros((total_out, hidden.shape[1]), dtype=acc_dtype)
    # k gathers of one row per window (at least one, so that the output stays in the graph)
    for offset in range(max(1, min(kernel_size, layout.max_len))):
        valid = (first + offset) < length
        rows = torch.where(valid, base + offset, torch.zeros_like(base))
        acc = acc + torch.where(valid[:, None], hidden.index_select(0, rows).to(acc_dtype), 0.0)
    return (acc / count[:, None].to(acc_dtype)).to(hidden.dtype)


def pool_packed_torch(
    hidden: torch.Tensor, cu_seqlens: torch.Tensor, kernel_size: int, stride: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TITE Eq. 1 (pool_{k,s}) in plain PyTorch: windowed means over each packed sequence.

    Vectorised (``k`` row gathers, no loop over sequences or windows), fp32 accumulation (fp64
    for fp64 input), differentiable by autograd. Returns ``(pooled [total_out, dim],
    out_cu_seqlens)``.
    """
    kernel_size, stride = _check_window(kernel_size, stride)
    layout = _layout(hidden, cu_seqlens, kernel_size, stride)
    return _pool_torch(hidden, layout, kernel_size, stride), layout.out_cu_seqlens


# --------------------------------------------------------------------------------------------------
# Triton implementation
# --------------------------------------------------------------------------------------------------
# The kernels are written as plain functions and wrapped with ``triton.jit`` on first use
# (:func:`_triton_kernels`): ``triton.jit`` decides between the compiler and the CPU interpreter
# when it wraps, so TRITON_INTERPRET=1 only has to be set before the first pooling call, not
# before this module is imported. They call only ``@builtin`` functions of ``triton.language``
# (``tl.full``, not ``tl.zeros``): the library's own ``@triton.jit`` helpers (``tl.zeros``,
# ``tl.cdiv``, ...) are wrapped when ``triton`` is imported, and in Triton 3.9 the interpreter
# fails on them ("Cannot call @triton.jit'd outside of the scope of a kernel") whenever
# ``triton`` was imported before TRITON_INTERPRET=1 was set.


def _pool_fwd_kernel(
    X,
    Y,
    CU,
    OUT_CU,
    dim,
    stride_xt,
    stride_xd,
    stride_yt,
    stride_yd,
    batch_offset,
    KERNEL: tl.constexpr,
    STRIDE: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Y[window] = mean of the real tokens of the window; grid (dim blocks, window blocks, batch)."""
    pid_d = tl.program_id(0)
    pid_w = tl.program_id(1)
    seq = tl.program_id(2) + batch_offset
    start = tl.load(CU + seq).to(tl.int64)
    length = tl.load(CU + seq + 1).to(tl.int64) - start
    out_start = tl.load(OUT_CU + seq).to(tl.int64)
    n_out = tl.load(OUT_CU + seq + 1).to(tl.int64) - out_start
    if pid_w * BLOCK_W >= n_out:
        return
    window = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    window_ok = window < n_out
    col_ok = cols < dim
    first = window.to(tl.int64) * STRIDE
    if ACC_FP64:
        acc = tl.full((BLOCK_W, BLOCK_D), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_W, BLOCK_D), 0.0, tl.float32)
    for offset in tl.static_range(KERNEL):
        pos = first + offset
        ok = window_ok & (pos < length)
        x = tl.load(
            X + (start + pos)[:, None] * stride_xt + cols[None, :] * stride_xd,
            mask=ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        acc += x.to(acc.dtype)
    # empty windows (only possible with stride > kernel) have count 0: their mean is 0
    count = tl.maximum(tl.minimum(length - first, KERNEL), 1)
    out = acc / count.to(acc.dtype)[:, None]
    tl.store(
        Y + (out_start + window)[:, None] * stride_yt + cols[None, :] * stride_yd,
        out.to(Y.dtype.element_ty),
        mask=window_ok[:, None] & col_ok[None, :],
    )


def _pool_bwd_kernel(
    GY,
    GX,
    CU,
    OUT_CU,
    dim,
    stride_gyt,
    stride_gyd,
    stride_gxt,
    stride_gxd,
    batch_offset,
    KERNEL: tl.constexpr,
    STRIDE: tl.constexpr,
    MAX_WINDOWS: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """GX[t] = sum over windows w containing t of GY[w] / count_w; grid (dim blocks, token blocks, batch)."""
    pid_d = tl.program_id(0)
    pid_t = tl.program_id(1)
    seq = tl.program_id(2) + batch_offset
    start = tl.load(CU + seq).to(tl.int64)
    length = tl.load(CU + seq + 1).to(tl.int64) - start
    out_start = tl.load(OUT_CU + seq).to(tl.int64)
    n_out = tl.load(OUT_CU + seq + 1).to(tl.int64) - out_start
    if pid_t * BLOCK_T >= length:
        return
    pos = (pid_t * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    pos_ok = pos < length
    col_ok = cols < dim
    # windows containing p: ceil((p - k + 1) / s) <= w <= floor(p / s), clipped to [0, n_out - 1];
    # numerators are kept >= 0 so integer division rounds the same in every backend
    w_lo = (tl.maximum(pos - (KERNEL - 1), 0) + (STRIDE - 1)) // STRIDE
    w_hi = tl.minimum(pos // STRIDE, n_out - 1)
    if ACC_FP64:
        acc = tl.full((BLOCK_T, BLOCK_D), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_T, BLOCK_D), 0.0, tl.float32)
    for j in tl.static_range(MAX_WINDOWS):  # at most ceil(k / s) windows contain a token
        w = w_lo + j
        ok = pos_ok & (w <= w_hi)
        count = tl.maximum(tl.minimum(length - w * STRIDE, KERNEL), 1)
        g = tl.load(
            GY + (out_start + w)[:, None] * stride_gyt + cols[None, :] * stride_gyd,
            mask=ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        acc += g.to(acc.dtype) / count.to(acc.dtype)[:, None]
    # every real token is written (tokens in no window, possible with stride > kernel, get 0)
    tl.store(
        GX + (start + pos)[:, None] * stride_gxt + cols[None, :] * stride_gxd,
        acc.to(GX.dtype.element_ty),
        mask=pos_ok[:, None] & col_ok[None, :],
    )


def triton_available() -> bool:
    """True when the ``triton`` package imports (it may still need CUDA or TRITON_INTERPRET=1)."""
    return triton is not None


def _interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _triton_kernels(interpret: bool):
    """``triton.jit``-wrapped (forward, backward) kernels, built once per mode on first use."""
    del interpret  # cache key only: triton.jit reads TRITON_INTERPRET itself
    return triton.jit(_pool_fwd_kernel), triton.jit(_pool_bwd_kernel)


def _block(n: int, cap: int) -> int:
    return max(1, min(triton.next_power_of_2(max(n, 1)), cap))


def _launch(kernel, out, inp, layout: _PackedLayout, rows_per_seq: int, block_rows: int, **meta) -> None:
    """Grid (dim blocks, row blocks, batch), in chunks of at most 65535 sequences."""
    dim = inp.shape[1]
    batch = layout.lengths.numel()
    if dim == 0 or rows_per_seq == 0 or batch == 0:
        return
    block_d = _block(dim, 128)
    # launch on the tensor's own GPU, not the current one
    with torch.cuda.device(inp.device) if inp.is_cuda else contextlib.nullcontext():
        for batch_offset in range(0, batch, _MAX_GRID_BATCH):
            n_seq = min(_MAX_GRID_BATCH, batch - batch_offset)
            grid = (triton.cdiv(dim, block_d), triton.cdiv(rows_per_seq, block_rows), n_seq)
            kernel[grid](
                inp,
                out,
                layout.cu_seqlens,
                layout.out_cu_seqlens,
                dim,
                inp.stride(0),
                inp.stride(1),
                out.stride(0),
                out.stride(1),
                batch_offset,
                BLOCK_D=block_d,
                **meta,
            )


class TritonPackedPool(torch.autograd.Function):
    """TITE Eq. 1 (pool_{k,s}) with Triton forward and backward kernels over packed sequences."""

    @staticmethod
    def forward(ctx, hidden, layout: _PackedLayout, kernel_size: int, stride: int):
        fwd, _ = _triton_kernels(_interpret_mode())
        out = hidden.new_empty((layout.total_out, hidden.shape[1]))
        block_w = _block(layout.max_out, 16)
        meta = {"KERNEL": kernel_size, "STRIDE": stride, "ACC_FP64": hidden.dtype == torch.float64, "BLOCK_W": block_w}
        _launch(fwd, out, hidden, layout, layout.max_out, block_w, **meta)
        ctx.layout = layout
        ctx.kernel_size, ctx.stride = kernel_size, stride
        ctx.input_shape = hidden.shape
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        _, bwd = _triton_kernels(_interpret_mode())
        layout, kernel_size, stride = ctx.layout, ctx.kernel_size, ctx.stride
        grad_in = grad_out.new_empty(ctx.input_shape)  # every row is written by the kernel
        block_t = _block(layout.max_len, 32)
        meta = {"KERNEL": kernel_size, "STRIDE": stride, "MAX_WINDOWS": -(-kernel_size // stride), "BLOCK_T": block_t}
        meta["ACC_FP64"] = grad_out.dtype == torch.float64
        _launch(bwd, grad_in, grad_out, layout, layout.max_len, block_t, **meta)
        return grad_in, None, None, None


def pool_packed_triton(
    hidden: torch.Tensor, cu_seqlens: torch.Tensor, kernel_size: int, stride: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TITE Eq. 1 (pool_{k,s}) with the Triton kernels (CUDA, or CPU with TRITON_INTERPRET=1).

    Same contract as :func:`pool_packed_torch`; raises RuntimeError when Triton cannot run.
    """
    kernel_size, stride = _check_window(kernel_size, stride)
    reason = _triton_unavailable_reason(hidden)
    if reason is not None:
        raise RuntimeError(f"Triton pooling cannot run: {reason}")
    layout = _layout(hidden, cu_seqlens, kernel_size, stride)
    return TritonPackedPool.apply(hidden, layout, kernel_size, stride), layout.out_cu_seqlens


# --------------------------------------------------------------------------------------------------
# Dispatcher
# --------------------------------------------------------------------------------------------------


def _triton_unavailable_reason(hidden: torch.Tensor):
    """None when the Triton kernels can run on ``hidden``, else why not and how to enable them."""
    if not triton_available():
        return "the `triton` package is not installed (pip install triton, on a machine with a CUDA GPU)"
    if getattr(hidden, "is_cuda", False) or _interpret_mode():
        return None
    device = hidden.device if isinstance(hidden, torch.Tensor) else "cpu"
    return (
        f"the tensor is on {device}, and Triton kernels need a CUDA tensor; move it to the GPU, or set "
        "TRITON_INTERPRET=1 before the first pooling call to run them in Triton's (slow) CPU interpreter"
    )


def pool_packed(
    hidden: torch.Tensor,
    cu_seqlens: torch.Tensor,
    kernel_size: int,
    stride: int,
    implementation: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """TITE Eq. 1 (pool_{k,s}) over packed sequences; returns ``(pooled, out_cu_seqlens)``.

    ``implementation``: ``"torch"``; ``"triton"`` (falls back to torch, with one warning per
    process, when Triton cannot run); ``"auto"`` (the compiled Triton kernel for CUDA tensors when
    Triton imports, else torch, silently: Triton's CPU interpreter is for tests, never chosen
    automatically). ``stride > kernel_size`` is accepted here.
    """
    global _FALLBACK_WARNED
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}.")
    kernel_size, stride = _check_window(kernel_size, stride)
    layout = _layout(hidden, cu_seqlens, kernel_size, stride)
    use_triton = False
    if implementation == "triton" or (implementation == "auto" and hidden.is_cuda):
        reason = _triton_unavailable_reason(hidden)
        use_triton = reason is None
        if implementation == "triton" and reason is not None and not _FALLBACK_WARNED:
            _FALLBACK_WARNED = True
            logger.warning("pool_packed(implementation='triton'): using PyTorch instead, because %s.", reason)
    if use_triton:
        return TritonPackedPool.apply(hidden, layout, kernel_size, stride), layout.out_cu_seqlens
    return _pool_torch(hidden, layout, kernel_size, stride), layout.out_cu_seqlens


__all__ = [
    "IMPLEMENTATIONS",
    "TritonPackedPool",
    "pool_packed",
    "pool_packed_torch",
    "pool_packed_triton",
    "pooled_cu_seqlens",
    "pooled_lengths",
    "triton_available",
    "window_centres",
]
