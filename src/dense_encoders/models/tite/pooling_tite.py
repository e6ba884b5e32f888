"""Windowed mean pooling over packed (unpadded) sequences for TITE (Schlatt et al., "TITE:
Token-Independent Text Encoder", SIGIR 2025).

TITE Eq. 1 (pool_{k,s}): a sequence of ``L`` real tokens is pooled with kernel ``k`` and stride
``s`` into ``L_out = ceil(max(0, L - k) / s) + 1`` vectors (``0`` when ``L == 0``; the formula is
``configuration_tite.pooled_length``, which :func:`pooled_lengths_host` applies elementwise). Window
``i`` covers positions ``[i*s, min(i*s + k, L))`` of its own sequence and is the plain mean of exactly
those tokens, so padding is never mixed in, a partial last window averages only its real tokens,
and ``L < k`` collapses to one vector. With ``s > k`` (accepted here, refused by the TITE config)
tokens between windows belong to none (zero gradient), and the formula can end on a window that
starts at or past ``L``: such an empty window is defined as 0.

Sequences are packed: ``hidden`` is ``[total_tokens, dim]``, the sequences' rows one after another.
A :class:`PoolPlan` holds every index one pooling step needs (per window: its first row, token
count and centre; per token: the windows it falls in), computed on the host from the lengths and
moved to the device with the rest of a batch's plan, so pooling never reads a device value. Two
implementations give the same numbers (fp32 accumulation, output in the input dtype):

* PyTorch: one ``embedding_bag`` (mode ``mean``) over the windows' rows; runs anywhere,
  differentiable by autograd.
* a Triton kernel pair (forward and backward) behind a :class:`torch.autograd.Function`, walking
  the packed rows at memory speed; runs on CUDA, or on CPU in Triton's interpreter when
  ``TRITON_INTERPRET=1`` (slow; for tests).

:func:`pool_planned` picks one (:func:`uses_triton`); :func:`plan_parts` tells a plan which indices
that choice reads. Shipped as remote code next to checkpoints: imports ``torch`` and ``numpy`` (and,
optionally, ``triton``) absolutely, ``configuration_tite`` relatively, and nothing from ``dense_encoders``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import numbers
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .configuration_tite import pooled_length

try:  # optional: everything here works without Triton, through the PyTorch implementation
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

logger = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "triton", "torch")

_FALLBACK_WARNED = False  # the "triton requested but cannot run" warning is logged once per process


# --------------------------------------------------------------------------------------------------
# Pooling plans: every index a pooling step needs, computed on the host from the lengths
# --------------------------------------------------------------------------------------------------


def _check_window(kernel_size, stride) -> tuple[int, int]:
    for name, value in (("kernel_size", kernel_size), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}; pass e.g. {name}=2.")
    return int(kernel_size), int(stride)


class DeviceArrays:
    """Named int32 host arrays moved to a device in ONE transfer (pinned, asynchronous on CUDA).

    ``add`` returns a key; after :meth:`transfer`, ``self[key]`` is the device view of that array.
    A plan that collects all its indices here costs one copy and no synchronisation.
    """

    def __init__(self):
        self._arrays: list[np.ndarray] = []
        self._views: dict[int, torch.Tensor] | None = None
        self._flat: torch.Tensor | None = None
        self._sizes: list[int] | None = None

    def add(self, array, capacity: int | None = None) -> int:
        """Register ``array``; with ``capacity``, zero-padded to that many entries (static shapes)."""
        array = np.ascontiguousarray(array, dtype=np.int32).reshape(-1)
        if capacity is not None:
            if array.size > capacity:
                raise ValueError(f"an index array of {array.size} entries exceeds its capacity {capacity}")
            array = np.pad(array, (0, capacity - array.size))
        self._arrays.append(array)
        return len(self._arrays) - 1

    def transfer(self, device: torch.device, into: DeviceArrays | None = None) -> None:
        """Copy every array to ``device`` at once; ``into``: reuse that transferred set's device buffer
        (same sizes, e.g. the static inputs of a CUDA graph) instead of allocating a new one."""
        sizes = [a.size for a in self._arrays]
        # one host buffer (pinned for an asynchronous copy to a GPU), filled array by array
        host = torch.empty(sum(sizes), dtype=torch.int32, pin_memory=device.type == "cuda")
        if sizes:
            np.concatenate(self._arrays, out=host.numpy())
        if into is not None:
            if into._sizes != sizes:
                raise ValueError("DeviceArrays.transfer(into=...): the arrays do not have the target's sizes")
            into._flat.copy_(host, non_blocking=True)
            self._flat, self._views = into._flat, into._views
        else:
            self._flat = host.to(device, non_blocking=True)
            self._views = {}
        self._sizes = sizes
        self._offsets = np.concatenate(([0], np.cumsum(sizes))).tolist()

    def __getitem__(self, key: int) -> torch.Tensor:
        view = self._views.get(key)
        if view is None:  # views are made on first use: a plan holds more arrays than a forward reads
            view = self._views[key] = self._flat[self._offsets[key] : self._offsets[key + 1]]
        return view


PLAN_PARTS = ("windows", "tokens", "bags")


def segment_positions(lengths: np.ndarray) -> np.ndarray:
    """Position of every packed row inside its own segment (0, 1, ..., n-1 per segment)."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


class PoolPlan:
    """Everything one pooling step (TITE Eq. 1, pool_{k,s}) needs, for one batch of lengths.

    Built on the host from the input lengths (a NumPy array, so no device value is read); the
    index arrays are registered with a :class:`DeviceArrays` and become device tensors after its
    transfer. Host sizes (``total_in``, ``total_out``, ``max_out``) are Python ints.

    Per output window ``w``: ``window_first[w]`` (its first packed input row),
    ``window_count[w]`` (real tokens in it; 0 only for the empty windows ``stride > kernel_size``
    can leave) and, on the host, ``centre_index[w]``: twice its centre ``i*s + (k-1)/2`` within its
    sequence (``i`` its index there), where TITE's pooled queries sit (Sec. 3.1). Per input row ``t``:
    ``token_window[t]`` (the first window containing it) and
    ``token_windows[t]`` (how many windows contain it), for the backward pass. ``bag_indices`` /
    ``bag_offsets`` list each window's rows for ``torch.nn.functional.embedding_bag``.
    """

    def __init__(self, lengths: np.ndarray, kernel_size: int, stride: int, arrays: DeviceArrays,
                 capacity: tuple[int, int, int] | None = None, needs: frozenset = frozenset(PLAN_PARTS)):
        """``capacity``: ``(input rows, output rows, longest output)`` upper bounds for static shapes
        (CUDA graphs): arrays are zero-padded to them (padding windows are empty: zero rows) and the
        host sizes report them instead of the batch's own. ``needs``: which of ``PLAN_PARTS``
        ("windows" for the Triton forward, "tokens" for its backward, "bags" for PyTorch) to build."""
        kernel_size, stride = _check_window(kernel_size, stride)
        lengths = np.asarray(lengths, dtype=np.int64)
        self.kernel_size, self.stride = kernel_size, stride
        self.lengths = lengths
        self.out_lengths = pooled_lengths_host(lengths, kernel_size, stride)
        self.total_in, self.total_out = int(lengths.sum()), int(self.out_lengths.sum())
        self.max_out = int(self.out_lengths.max()) if lengths.size else 0
        self.max_windows = -(-kernel_size // stride)  # at most ceil(k / s) windows contain a token
        in_starts = np.cumsum(lengths) - lengths
        window = segment_positions(self.out_lengths)  # index of every window inside its sequence
        window_seq = np.repeat(np.arange(lengths.size), self.out_lengths)
        first = window * stride
        count = np.clip(lengths[window_seq] - first, 0, kernel_size)
        first += in_starts[window_seq]  # first packed row of every window
        # twice every window's centre i*s + (k-1)/2 (the rotary table's half-position units): the
        # nominal centre of its full k-token span, also for a partial last window, so pooled
        # positions stay on one grid of step s whatever the sequence length
        self.centre_index = 2 * stride * window + (kernel_size - 1)
        rows_in = rows_out = None
        if capacity is not None:
            rows_in, rows_out, longest = capacity
            self.total_in, self.total_out, self.max_out = rows_in, rows_out, longest
        self._keys = dict(out_cu_seqlens=arrays.add(np.concatenate(([0], np.cumsum(self.out_lengths)))))
        if "windows" in needs:
            self._keys.update(window_first=arrays.add(first, rows_out), window_count=arrays.add(count, rows_out))
        if "tokens" in needs:
            if kernel_size == stride:  # windows tile each sequence in order: one window per token
                token_window = np.repeat(np.arange(window.size), count)
                token_windows = np.ones(int(lengths.sum()), dtype=np.int64)
            else:  # windows containing p: ceil((p - k + 1) / s) <= w <= min(floor(p / s), n_out - 1)
                position = segment_positions(lengths)
                token_seq = np.repeat(np.arange(lengths.size), lengths)
                w_lo = (np.maximum(position - (kernel_size - 1), 0) + stride - 1) // stride
                w_hi = np.minimum(position // stride, self.out_lengths[token_seq] - 1)
                out_starts = np.cumsum(self.out_lengths) - self.out_lengths
                token_window, token_windows = out_starts[token_seq] + w_lo, np.maximum(w_hi - w_lo + 1, 0)
            self._keys.update(token_window=arrays.add(token_window, rows_in),
                              token_windows=arrays.add(token_windows, rows_in))
        if "bags" in needs and capacity is None:  # PyTorch's bags (their size varies: no static shape)
            if kernel_size == stride:  # the rows in order are the bags
                bag_indices = np.arange(int(lengths.sum()))
            else:
                bag_indices = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
            self._keys.update(bag_indices=arrays.add(bag_indices), bag_offsets=arrays.add(np.cumsum(count) - count))
        self._arrays = arrays

    def __getattr__(self, name):
        keys = self.__dict__.get("_keys")
        if keys is not None and name in keys:
            return self.__dict__["_arrays"][keys[name]]
        if name in ("window_first", "window_count", "token_window", "token_windows", "bag_indices", "bag_offsets"):
            raise AttributeError(f"this PoolPlan was built without {name!r} (see its `needs`)")
        raise AttributeError(name)


def pooled_lengths_host(lengths: np.ndarray, kernel_size: int, stride: int) -> np.ndarray:
    """Pooled vectors per sequence, TITE Eq. 1 (pool_{k,s}): ``ceil(max(0, L - k) / s) + 1``, 0 for
    ``L == 0`` (``configuration_tite.pooled_length``) on a NumPy array (host side, int64)."""
    return np.asarray(pooled_length(lengths, kernel_size, stride)).astype(np.int64)


# --------------------------------------------------------------------------------------------------
# PyTorch implementation
# --------------------------------------------------------------------------------------------------


def _pool_torch(hidden: torch.Tensor, plan: PoolPlan) -> torch.Tensor:
    """Windowed means as one ``embedding_bag`` (mode ``mean``; an empty bag is 0)."""
    source = hidden
    if hidden.device.type == "cpu" and hidden.dtype in (torch.float16, torch.bfloat16):
        source = hidden.float()  # accumulate in fp32
    pooled = F.embedding_bag(plan.bag_indices, source, plan.bag_offsets, mode="mean")
    return pooled.to(hidden.dtype)


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
#
# Both kernels walk the packed rows directly (grid: row blocks x feature blocks), reading the
# window / token indices of the plan, so no program idles on padding and loads are coalesced
# along the feature axis.


def _pool_fwd_kernel(
    X,
    Y,
    FIRST,
    COUNT,
    n_out,
    dim,
    stride_xt,
    stride_yt,
    KERNEL: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Y[w] = mean of X[first[w] : first[w] + count[w]] (0 for an empty window)."""
    pid_w = tl.program_id(0)
    pid_d = tl.program_id(1)
    window = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    window_ok = window < n_out
    col_ok = cols < dim
    first = tl.load(FIRST + window, mask=window_ok, other=0).to(tl.int64)
    count = tl.load(COUNT + window, mask=window_ok, other=0)
    if ACC_FP64:
        acc = tl.full((BLOCK_W, BLOCK_D), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_W, BLOCK_D), 0.0, tl.float32)
    for offset in tl.static_range(KERNEL):
        ok = window_ok & (offset < count)
        x = tl.load(
            X + (first + offset)[:, None] * stride_xt + cols[None, :],
            mask=ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        acc += x.to(acc.dtype)
    out = acc / tl.maximum(count, 1).to(acc.dtype)[:, None]
    tl.store(
        Y + window.to(tl.int64)[:, None] * stride_yt + cols[None, :],
        out.to(Y.dtype.element_ty),
        mask=window_ok[:, None] & col_ok[None, :],
    )


def _pool_bwd_kernel(
    GY,
    GX,
    TOKEN_WINDOW,
    TOKEN_WINDOWS,
    COUNT,
    n_in,
    dim,
    stride_gyt,
    stride_gxt,
    MAX_WINDOWS: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """GX[t] = sum over the windows w containing t of GY[w] / count[w] (0 for a token in none)."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    token = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    token_ok = token < n_in
    col_ok = cols < dim
    first_window = tl.load(TOKEN_WINDOW + token, mask=token_ok, other=0)
    n_windows = tl.load(TOKEN_WINDOWS + token, mask=token_ok, other=0)
    if ACC_FP64:
        acc = tl.full((BLOCK_T, BLOCK_D), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_T, BLOCK_D), 0.0, tl.float32)
    for j in tl.static_range(MAX_WINDOWS):
        ok = token_ok & (j < n_windows)
        w = (first_window + j).to(tl.int64)
        count = tl.load(COUNT + w, mask=ok, other=1)
        g = tl.load(GY + w[:, None] * stride_gyt + cols[None, :], mask=ok[:, None] & col_ok[None, :], other=0.0)
        acc += g.to(acc.dtype) / tl.maximum(count, 1).to(acc.dtype)[:, None]
    tl.store(
        GX + token.to(tl.int64)[:, None] * stride_gxt + cols[None, :],
        acc.to(GX.dtype.element_ty),
        mask=token_ok[:, None] & col_ok[None, :],
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


def _tiles(rows: int, dim: int, element_size: int) -> tuple[int, int, int]:
    """(rows per program, features per program, warps): 16-byte vectors along the features and
    about 8 KiB read per program and window offset, so that enough loads are in flight."""
    block_d = max(1, min(triton.next_power_of_2(max(dim, 1)), 4096 // element_size))
    block_rows = max(1, min(triton.next_power_of_2(max(rows, 1)), max(1, 8192 // (block_d * element_size)), 64))
    return block_rows, block_d, 4 if block_rows * block_d >= 2048 else 2


def _launch_over_rows(kernel, rows: int, source: torch.Tensor, row_block: str, *args, **meta) -> None:
    """Grid (row blocks, feature blocks) over ``rows`` packed rows of ``source``'s width."""
    dim = source.shape[1]
    if not rows or not dim:
        return
    block_rows, block_d, warps = _tiles(rows, dim, source.element_size())
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(dim, block_d))
    with torch.cuda.device(source.device) if source.is_cuda else contextlib.nullcontext():
        kernel[grid](*args, ACC_FP64=source.dtype == torch.float64, BLOCK_D=block_d, num_warps=warps,
                     **{row_block: block_rows}, **meta)


def _triton_forward(hidden: torch.Tensor, plan: PoolPlan) -> torch.Tensor:
    fwd, _ = _triton_kernels(_interpret_mode())
    if hidden.stride(-1) != 1:
        hidden = hidden.contiguous()
    out = hidden.new_empty((plan.total_out, hidden.shape[1]))
    _launch_over_rows(
        fwd, plan.total_out, hidden, "BLOCK_W",
        hidden, out, plan.window_first, plan.window_count, plan.total_out, hidden.shape[1], hidden.stride(0),
        out.stride(0), KERNEL=plan.kernel_size,
    )
    return out


def triton_pooling_backward(grad_out: torch.Tensor, plan: PoolPlan, input_shape) -> torch.Tensor:
    _, bwd = _triton_kernels(_interpret_mode())
    if grad_out.stride(-1) != 1:
        grad_out = grad_out.contiguous()
    grad_in = grad_out.new_empty(input_shape)  # every row is written by the kernel
    _launch_over_rows(
        bwd, plan.total_in, grad_out, "BLOCK_T",
        grad_out, grad_in, plan.token_window, plan.token_windows, plan.window_count, plan.total_in,
        grad_in.shape[1], grad_out.stride(0), grad_in.stride(0), MAX_WINDOWS=plan.max_windows,
    )
    return grad_in


class TritonPackedPool(torch.autograd.Function):
    """TITE Eq. 1 (pool_{k,s}) with Triton forward and backward kernels over packed sequences."""

    @staticmethod
    def forward(ctx, hidden, plan: PoolPlan):
        ctx.plan = plan
        ctx.input_shape = hidden.shape
        return _triton_forward(hidden, plan)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        if not ctx.needs_input_grad[0]:
            return None, None
        return triton_pooling_backward(grad_out, ctx.plan, ctx.input_shape), None


# --------------------------------------------------------------------------------------------------
# Dispatcher
# --------------------------------------------------------------------------------------------------


def _triton_unavailable_reason(hidden_or_device):
    """None when the Triton kernels can run on a tensor (or device), else why not and how to enable them."""
    if not triton_available():
        return "the `triton` package is not installed (pip install triton, on a machine with a CUDA GPU)"
    device = torch.device(getattr(hidden_or_device, "device", hidden_or_device))
    if device.type == "cuda" or _interpret_mode():
        return None
    return (
        f"the tensor is on {device}, and Triton kernels need a CUDA tensor; move it to the GPU, or set "
        "TRITON_INTERPRET=1 before the first pooling call to run them in Triton's (slow) CPU interpreter"
    )


def _triton_requested(device: torch.device, implementation: str) -> bool:
    return implementation == "triton" or (implementation == "auto" and device.type == "cuda")


def uses_triton(hidden: torch.Tensor, implementation: str) -> bool:
    """Whether :func:`pool_planned` runs the Triton kernels for ``hidden``.

    ``implementation``: ``"torch"``; ``"triton"`` (falls back to torch, with one warning per
    process, when Triton cannot run); ``"auto"`` (the compiled Triton kernel for CUDA tensors when
    Triton imports, else torch, silently: Triton's CPU interpreter is for tests, never chosen
    automatically).
    """
    global _FALLBACK_WARNED
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}.")
    if not _triton_requested(hidden.device, implementation):
        return False
    reason = _triton_unavailable_reason(hidden)
    if implementation == "triton" and reason is not None and not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        logger.warning("TITE pooling (implementation 'triton'): using PyTorch instead, because %s.", reason)
    return reason is None


def plan_parts(device, implementation: str, backward: bool) -> frozenset:
    """The :class:`PoolPlan` parts :func:`pool_planned` will read for tensors on ``device`` (the decision
    of :func:`uses_triton`): the Triton windows (+ tokens when a backward may follow), else bags."""
    device = torch.device(device)
    if not _triton_requested(device, implementation) or _triton_unavailable_reason(device) is not None:
        return frozenset({"bags"})
    return frozenset({"windows", "tokens"} if backward else {"windows"})


def pool_planned(hidden: torch.Tensor, plan: PoolPlan, implementation: str = "auto") -> torch.Tensor:
    """TITE Eq. 1 (pool_{k,s}) with a ready :class:`PoolPlan`: no host read, one kernel (Triton) or
    one ``embedding_bag`` (PyTorch). Returns the pooled ``[plan.total_out, dim]`` rows."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or not hidden.dtype.is_floating_point:
        shape = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(f"hidden must be a floating-point 2-D packed tensor [total_tokens, dim], got {shape}.")
    if hidden.shape[0] != plan.total_in:
        raise ValueError(
            f"hidden has {hidden.shape[0]} rows but the pooling plan was made for {plan.total_in} packed tokens."
        )
    if uses_triton(hidden, implementation):
        if torch.is_grad_enabled() and hidden.requires_grad:
            return TritonPackedPool.apply(hidden, plan)
        return _triton_forward(hidden, plan)  # inference: no autograd node
    return _pool_torch(hidden, plan)


__all__ = [
    "IMPLEMENTATIONS",
    "PLAN_PARTS",
    "DeviceArrays",
    "PoolPlan",
    "plan_parts",
    "pool_planned",
    "pooled_lengths_host",
    "segment_positions",
    "triton_pooling_backward",
    "uses_triton",
    "TritonPackedPool",
    "triton_available",
]
