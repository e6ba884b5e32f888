"""fused_tite: residual + LayerNorm in one Triton kernel and the GELU in cuBLASLt's epilogue (CUDA inference).

The kernel runs on CPU tensors in Triton's interpreter (the ``triton_interpreter`` fixture); the compiled kernel, the
epilogue and the dispatch run on a CUDA machine only (skipped without one).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dense_encoders.models.tite import fused_tite

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# the kernel's tl.sum is a triton.jit function of triton's own, which the interpreter runs only where TRITON_INTERPRET=1
# was set before triton was imported (conftest does so without CUDA); on a CUDA machine the compiled kernel is tested
interpreter = pytest.mark.skipif(torch.cuda.is_available(), reason="the compiled kernel is tested on CUDA below")


def reference_norm(hidden, residual, weight, bias, eps):
    """LayerNorm(hidden + residual) in float64."""
    h = hidden.double() + residual.double()
    return F.layer_norm(h, (h.shape[-1],), weight.double(), bias.double(), eps)


def inputs(rows, width, dtype, device="cpu", seed=0, strided=False):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, width + 3 if strided else width, generator=generator)[:, :width]
    residual = 2 + 3 * torch.randn(rows, width, generator=generator)  # an offset and a scale the norm removes
    weight, bias = 1 + torch.randn(width, generator=generator), torch.randn(width, generator=generator)
    return [t.to(device, dtype) for t in (hidden, residual, weight, bias)]


@interpreter
@pytest.mark.parametrize("rows,width", [(0, 32), (1, 32), (37, 48), (5, 1000), (2, 768)])
def test_the_residual_norm_kernel_is_the_float64_layer_norm_of_the_sum(rows, width, triton_interpreter):
    pytest.importorskip("triton")
    hidden, residual, weight, bias = inputs(rows, width, torch.float32, strided=rows == 37)
    out = fused_tite._launch_residual_norm(hidden, residual, weight, bias, 1e-12)
    assert out.shape == (rows, width) and out.dtype == torch.float32
    # fp32 sums over the width: |error| <~ width * 2^-24 of the normalised values (|y| < ~10 here)
    torch.testing.assert_close(out.double(), reference_norm(hidden, residual, weight, bias, 1e-12),
                               atol=width * 2**-24 * 40, rtol=0)


@interpreter
def test_the_residual_norm_kernel_keeps_half_precision_outputs(triton_interpreter):
    pytest.importorskip("triton")
    hidden, residual, weight, bias = inputs(9, 64, torch.bfloat16)
    out = fused_tite._launch_residual_norm(hidden, residual, weight, bias, 1e-5)
    expected = reference_norm(hidden, residual, weight, bias, 1e-5)
    assert out.dtype == torch.bfloat16
    # one bf16 rounding of the output, within one unit of its last place (2^-7 relative: the interpreter's casts may
    # truncate): the sum is taken in fp32, not rounded to bf16 first
    torch.testing.assert_close(out.double(), expected, atol=0, rtol=2**-7)


@cuda
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_on_cuda_the_fused_norm_is_at_least_as_close_to_float64_as_pytorchs(dtype, tolerance):
    hidden, residual, weight, bias = inputs(3001, 768, dtype, device="cuda", seed=1)
    norm = torch.nn.LayerNorm(768, eps=1e-12).to("cuda", dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
        norm.bias.copy_(bias)
        fused = fused_tite.residual_layer_norm(hidden, residual, norm)
        unfused = norm(hidden + residual)
    expected = reference_norm(hidden, residual, weight, bias, 1e-12)

    def error(actual):
        return float((actual.double() - expected).norm() / expected.norm())

    assert error(fused) < tolerance
    assert error(fused) <= error(unfused) * 1.01


@cuda
def test_on_cuda_the_gelu_epilogue_is_at_least_as_close_to_the_exact_gelu_as_the_separate_kernel():
    """bf16: cuBLASLt's tanh GELU on the fp32 product against PyTorch's exact GELU on the bf16-rounded product, both
    against the exact GELU of the float64 product."""
    generator = torch.Generator().manual_seed(2)
    states = torch.randn(4096, 768, generator=generator).to("cuda", torch.bfloat16)
    linear = torch.nn.Linear(768, 3072).to("cuda", torch.bfloat16)
    with torch.no_grad():
        assert fused_tite.gelu_epilogue_applies(states, linear, "gelu")
        fused = fused_tite.linear_gelu(states, linear, torch.nn.GELU(), "gelu")
        separate = F.gelu(linear(states))
    expected = F.gelu(F.linear(states.double(), linear.weight.double(), linear.bias.double()))
    fused_error, separate_error = (fused.double() - expected).abs(), (separate.double() - expected).abs()
    assert fused.dtype == torch.bfloat16 and fused.shape == expected.shape
    assert float(fused_error.mean()) <= float(separate_error.mean()) * 1.05
    assert float(fused_error.max()) <= float(separate_error.max()) * 1.05


@cuda
def test_on_cuda_the_fused_paths_serve_inference_only(monkeypatch):
    """Inference takes the kernel and the epilogue; training, float64, fp32 GELU and hooked modules keep
    PyTorch's ops (autograd needs them)."""
    calls = []
    launch = fused_tite._launch_residual_norm
    monkeypatch.setattr(fused_tite, "_launch_residual_norm", lambda *args: calls.append(1) or launch(*args))
    hidden, residual, weight, bias = inputs(64, 32, torch.bfloat16, device="cuda")
    norm = torch.nn.LayerNorm(32).to("cuda", torch.bfloat16)
    linear = torch.nn.Linear(32, 64).to("cuda", torch.bfloat16)
    with torch.no_grad():
        fused_tite.residual_layer_norm(hidden, residual, norm)
        assert fused_tite.gelu_epilogue_applies(hidden, linear, "gelu")
        assert not fused_tite.gelu_epilogue_applies(hidden.float(), linear.float(), "gelu")
        assert not fused_tite.gelu_epilogue_applies(hidden, linear, "relu")
        fused_tite.residual_layer_norm(hidden.double(), residual.double(), norm.double())
    assert len(calls) == 1
    trained = fused_tite.residual_layer_norm(hidden, residual.requires_grad_(), norm.float().bfloat16())
    assert len(calls) == 1 and trained.grad_fn is not None
    assert not fused_tite.gelu_epilogue_applies(hidden, linear, "gelu")  # the weights require grad
    handle = norm.register_forward_hook(lambda module, args, output: output)
    with torch.no_grad():
        fused_tite.residual_layer_norm(hidden, residual, norm)
    handle.remove()
    assert len(calls) == 1
