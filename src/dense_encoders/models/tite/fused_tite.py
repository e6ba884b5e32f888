"""What follows a TITE layer's matrix products, fused for inference on CUDA.

A TITE layer (Schlatt et al., "TITE: Token-Independent Text Encoder", SIGIR 2025) is BERT's post-norm layer
with pooling: twice per layer ``LayerNorm(dense(x) + residual)``, and the feed-forward's
``output(GELU(intermediate(x)))``. Without gradients, on CUDA, two of those steps move fewer bytes:

* :func:`residual_layer_norm`: ``LayerNorm(hidden + residual)`` in one Triton kernel that reads both inputs once
  and writes the output once (three passes over the rows, where PyTorch's ``add`` then ``layer_norm`` make five).
  The sum and the statistics are taken in fp32 (PyTorch rounds the sum to the input dtype first).
* :func:`linear_gelu`: the GELU inside the intermediate product's epilogue (cuBLASLt, through
  ``torch._addmm_activation``), so its 4 x width activations are written once instead of written, read and written
  again. cuBLASLt's GELU is the tanh form, at most 4.7e-4 from the exact (erf) one; it is taken only for bf16
  activations, where the separate GELU's input is already rounded by up to 2^-9 of its value (4e-3 at 2): the
  epilogue applies the tanh form to the product before rounding, and lands at least as close to the exact GELU in
  float64 as the separate kernel does (``tests/test_tite_gpu.py``). Exact-erf models in fp32 or fp16, training, and
  any other activation keep PyTorch's ops.

Both fall back to PyTorch's ops wherever they do not apply: CPU, autograd, ``torch.compile`` (which fuses these
itself), export, hooked or replaced modules. Shipped as remote code next to every checkpoint: imports ``torch``
(and, optionally, ``triton``) absolutely and nothing from ``dense_encoders``.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
from torch import nn

try:  # optional: everything here works without Triton, through PyTorch's ops
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

# The operator behind cuBLASLt's GEMM + bias + GELU epilogue. Private, so its absence keeps the separate GELU.
_addmm_activation = getattr(torch, "_addmm_activation", None)

MAX_FUSED_WIDTH = 8192  # one program holds a whole row of the LayerNorm in registers up to this width


def _fusable(*tensors: torch.Tensor) -> bool:
    """Whether a fused inference kernel may replace PyTorch's ops on ``tensors``: CUDA, no autograd, no autocast,
    not traced or compiled."""
    if not tensors[0].is_cuda or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    if torch.is_autocast_enabled("cuda"):  # autocast gives LayerNorm an fp32 output: PyTorch's ops keep that
        return False
    return not (torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors))


def plain_module(module: nn.Module, kind: type) -> bool:
    """``module`` is exactly ``kind`` with no hooks (an adapter, a quantised layer or a hook keeps PyTorch's path)."""
    return type(module) is kind and not module._forward_hooks and not module._forward_pre_hooks


# --------------------------------------------------------------------------------------------------
# residual + LayerNorm: one Triton kernel (wrapped with triton.jit on first use, see pooling_tite.py for why; its
# tl.sum runs in the interpreter only where TRITON_INTERPRET=1 was set before triton was imported)
# --------------------------------------------------------------------------------------------------


def _residual_norm_kernel(
    X,
    R,
    W,
    B,
    Y,
    rows,
    width,
    stride_x,
    stride_r,
    stride_y,
    eps,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Y[r] = (h - mean(h)) / sqrt(var(h) + eps) * W + B with h = X[r] + R[r], in fp32, BLOCK_R rows per program."""
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    row_ok = row < rows
    col_ok = cols < width
    ok = row_ok[:, None] & col_ok[None, :]
    row = row.to(tl.int64)
    x = tl.load(X + row[:, None] * stride_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    r = tl.load(R + row[:, None] * stride_r + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    h = x + r
    mean = tl.sum(h, 1) / width
    centred = tl.where(ok, h - mean[:, None], 0.0)
    variance = tl.sum(centred * centred, 1) / width
    scale = 1.0 / tl.sqrt(variance + eps)
    weight = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    bias = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = centred * scale[:, None] * weight[None, :] + bias[None, :]
    tl.store(Y + row[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=ok)


@functools.cache
def _kernel(interpret: bool):
    del interpret  # cache key only: triton.jit reads TRITON_INTERPRET itself
    return triton.jit(_residual_norm_kernel)


def _launch_residual_norm(hidden: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                          eps: float) -> torch.Tensor:
    """The Triton kernel on ``(rows, width)`` ``hidden`` and ``residual`` (any device Triton runs on)."""
    hidden = hidden if hidden.stride(-1) == 1 else hidden.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    out = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device)
    rows, width = hidden.shape
    if rows == 0:
        return out
    block_d = triton.next_power_of_2(width)
    # about 4 KiB of fp32 per operand and program: several rows per program at small widths
    block_r = max(1, min(16, 1024 // block_d, triton.next_power_of_2(rows)))
    warps = max(1, min(8, block_r * block_d // 256))
    kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
    with torch.cuda.device(hidden.device) if hidden.is_cuda else contextlib.nullcontext():
        kernel[(triton.cdiv(rows, block_r),)](
            hidden, residual, weight, bias, out, rows, width, hidden.stride(0), residual.stride(0), out.stride(0),
            eps, BLOCK_R=block_r, BLOCK_D=block_d, num_warps=warps,
        )
    return out


def residual_layer_norm(hidden: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """``norm(hidden + residual)`` for packed ``(rows, width)`` rows: one Triton kernel in CUDA inference (module
    docstring), PyTorch's ``add`` and ``layer_norm`` otherwise."""
    if (
        triton is not None
        and _fusable(hidden, residual, norm.weight)
        and plain_module(norm, nn.LayerNorm)
        and norm.weight is not None
        and norm.bias is not None
        and hidden.dim() == 2
        and hidden.shape == residual.shape
        and hidden.dtype == residual.dtype == norm.weight.dtype
        and hidden.dtype in (torch.float32, torch.bfloat16, torch.float16)  # the kernel computes in fp32
        and hidden.shape[1] <= MAX_FUSED_WIDTH
    ):
        return _launch_residual_norm(hidden, residual, norm.weight, norm.bias, norm.eps)
    return norm(hidden + residual)


# --------------------------------------------------------------------------------------------------
# intermediate product + GELU: cuBLASLt's epilogue
# --------------------------------------------------------------------------------------------------


def gelu_epilogue_applies(states: torch.Tensor, linear: nn.Module, hidden_act) -> bool:
    """Whether :func:`linear_gelu` computes the GELU in the product's epilogue (module docstring)."""
    return (
        _addmm_activation is not None
        and hidden_act in ("gelu", "gelu_pytorch_tanh", "gelu_new")
        and states.dim() == 2
        and states.dtype == torch.bfloat16
        and plain_module(linear, nn.Linear)
        and linear.bias is not None
        and linear.weight.dtype == states.dtype
        and _fusable(states, linear.weight)
    )


def linear_gelu(states: torch.Tensor, linear: nn.Module, activation: nn.Module, hidden_act) -> torch.Tensor:
    """``activation(linear(states))``; with the GELU in cuBLASLt's epilogue where :func:`gelu_epilogue_applies`."""
    if gelu_epilogue_applies(states, linear, hidden_act):
        return _addmm_activation(linear.bias, states, linear.weight.t(), use_gelu=True)
    return activation(linear(states))


__all__ = ["MAX_FUSED_WIDTH", "plain_module", "gelu_epilogue_applies", "linear_gelu", "residual_layer_norm"]
