"""The machine's GEMM rate: the limit a forward's GFLOP/s is a share of.

:func:`gemm_rate` times a square matrix product ``A[n x n] @ B[n x n]`` (``2 n^3`` floating-point operations) in
every library present that runs it: on the CPU torch's BLAS (``torch.mm``) and, in float32, numpy's BLAS
(``numpy.matmul``, e.g. OpenBLAS in numpy's wheels) at torch's thread count (threadpoolctl fixes numpy's threads,
as the exact search does: ``evaluation.backends.core.score_threads``; without threadpoolctl numpy is left out,
its thread count being unknown), and the runtimes ``encode --runtime`` runs, when installed: a ``MatMul`` graph in
OpenVINO (oneDNN) and in ONNX Runtime (MLAS), compiled as their encoding runs are
(``evaluation.runtimes.openvino_compiled`` / ``onnxruntime_session``). The runtimes count: on a CPU with AVX-512
their kernels can reach far past numpy's and torch's BLAS (an AMD EPYC of Zen 5, 2 threads: OpenVINO 418 and ONNX
Runtime 411 GFLOP/s against OpenBLAS's 245, whose kernels there are AVX2's), and a forward in them is measured
against what the machine does, not against a slower library. Every CPU library's product is compared with
torch's (``max_difference``), so that a library that computed something else is seen. On CUDA ``torch.mm`` in
the dtype the rows compute in (bf16 / fp16 / fp32, with torch's TF32 setting as the rows have it), synchronized,
several products per timed call. Each library multiplies
into a buffer made beforehand; after ``warmup`` untimed products each, ``repeats`` timed ones, the libraries
alternated; the rate is the BEST product's: the fastest the machine multiplies, what a forward of large matrix
products could approach. Used by ``dense-encoders bench`` (every row's GFLOP/s as a share of it) and
``benchmarks/peers.py``.

The default sizes: 2048 on the CPU (17 GFLOP a product, large enough for the BLAS libraries' blocked kernels to
run at their plateau: 0.1-0.3 s a product on 2 cores, 1-2 s for the whole measurement), 8192 on a GPU (1.1 TFLOP a
product, about 1.5 ms in bf16 on an H200). Other jobs on the cores lower the rate as they lower the rows': the
CPU pressure during the measurement is recorded beside it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import time
from collections.abc import Callable

import numpy as np
import torch

from .timing import cpu_stall, pressure_during

GEMM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CUDA_PRODUCTS_PER_CALL = 10  # a GPU product takes a millisecond or two: time several per call


def gemm_rate(device: str | torch.device = "cpu", dtype: str = "fp32", size: int = 2048, *, repeats: int = 3,
              warmup: int = 1, threads: int | None = None, seed: int = 0) -> dict:
    """The best rate of a square ``size`` x ``size`` product in ``dtype`` on ``device``, over the libraries there.

    Returns a JSON-ready dict: ``device``, ``dtype``, ``size``, ``threads`` (torch's, and numpy's BLAS's while it
    runs), ``repeats``, ``warmup``, ``products_per_call``, ``gflop`` (``2 size^3 / 1e9``, one product),
    ``libraries`` (``{name: {"blas", "seconds": [per product, each timed call], "gflops": the best,
    "max_difference": the largest difference of its product from torch's (0 for torch's own)}}``), ``skipped``
    (``{name: why}``), the fastest: ``library`` and ``gflops``, and ``cpu_pressure``: the CPU pressure (%) during the
    measurement (Linux PSI, :func:`.timing.pressure_during`; None without it): other jobs on the cores lower the
    rate."""
    device = torch.device(device)
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"dtype={dtype!r}: choose one of {', '.join(GEMM_DTYPES)}")
    if size < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"size={size}, repeats={repeats}, warmup={warmup}: size and repeats >= 1, warmup >= 0")
    threads = torch.get_num_threads() if threads is None else threads
    per_call = CUDA_PRODUCTS_PER_CALL if device.type == "cuda" else 1
    generator = torch.Generator().manual_seed(seed)
    left, right = (torch.randn(size, size, generator=generator) for _ in range(2))
    products, blas, skipped = {}, {}, {}
    # torch: on the device, in the dtype
    a, b = (matrix.to(device=device, dtype=GEMM_DTYPES[dtype]) for matrix in (left, right))
    out = torch.empty_like(a)

    def torch_product():
        for _ in range(per_call):
            torch.mm(a, b, out=out)

    products["torch.mm"], blas["torch.mm"] = torch_product, torch_blas(device)
    limits = contextlib.nullcontext()
    if device.type != "cpu":
        skipped["numpy.matmul"] = "CPU only"
    elif dtype != "fp32":
        skipped["numpy.matmul"] = f"no {dtype} product in numpy"
    elif importlib.util.find_spec("threadpoolctl") is None:
        skipped["numpy.matmul"] = "threadpoolctl is not installed: numpy's BLAS threads cannot be set"
    else:
        from threadpoolctl import threadpool_limits

        a_np, b_np = left.numpy(), right.numpy()
        out_np = np.empty_like(a_np)
        products["numpy.matmul"] = lambda: np.matmul(a_np, b_np, out=out_np)
        blas["numpy.matmul"] = numpy_blas()
        limits = threadpool_limits(limits=threads, user_api="blas")
    results = {"torch.mm": out, "numpy.matmul": out_np} if "numpy.matmul" in products else {"torch.mm": out}
    if device.type == "cpu" and dtype == "fp32":
        _runtime_products(left.numpy(), right.numpy(), threads, products, blas, results, skipped)
    else:
        skipped.update({name: "CPU float32 only" for name in RUNTIME_LIBRARIES})
    with limits, _torch_threads(threads):
        stall, started = cpu_stall(), time.perf_counter()
        seconds = _alternated(products, device, repeats, warmup)
        pressure = pressure_during(stall, started)
    reference = out.float().cpu().numpy()
    libraries = {name: {"blas": blas[name], "seconds": [value / per_call for value in times],
                        "gflops": 2 * size ** 3 * per_call / min(times) / 1e9,
                        "max_difference": float(np.abs(_as_numpy(results[name]) - reference).max())}
                 for name, times in seconds.items()}
    fastest = max(libraries, key=lambda name: libraries[name]["gflops"])
    return {"device": str(device), "dtype": dtype, "size": size, "threads": threads, "repeats": repeats,
            "warmup": warmup, "products_per_call": per_call, "gflop": 2 * size ** 3 / 1e9, "libraries": libraries,
            "skipped": skipped, "library": fastest, "gflops": libraries[fastest]["gflops"], "cpu_pressure": pressure}


# the runtimes whose product counts (gemm_rate): the names ``encode --runtime`` takes
RUNTIME_LIBRARIES = ("openvino", "onnxruntime")


def _as_numpy(result) -> np.ndarray:
    """A product's output as a float32 numpy matrix on the host (a torch tensor, an array, or a callable giving
    one)."""
    result = result() if callable(result) else result
    return result.float().cpu().numpy() if isinstance(result, torch.Tensor) else np.asarray(result)


def _runtime_products(left: np.ndarray, right: np.ndarray, threads: int, products: dict, blas: dict, results: dict,
                      skipped: dict) -> None:
    """Add the square product in each installed runtime of :data:`RUNTIME_LIBRARIES` to ``products`` (its output
    in ``results``, its library in ``blas``), or say in ``skipped`` why not: a ``MatMul`` of the two matrices as
    graph inputs, its output written into a buffer made beforehand (ONNX Runtime's through an I/O binding)."""
    from ..evaluation.runtimes import onnxruntime_session, openvino_compiled, runtime_version

    n = left.shape[0]
    if importlib.util.find_spec("openvino") is None:
        skipped["openvino"] = "not installed"
    else:
        import openvino
        from openvino import opset13

        inputs = [opset13.parameter([n, n], np.float32) for _ in range(2)]
        request = openvino_compiled(openvino.Model([opset13.matmul(*inputs, False, False)], inputs),
                                    threads).create_infer_request()
        for index, matrix in enumerate((left, right)):
            request.set_input_tensor(index, openvino.Tensor(matrix))
        products["openvino"], results["openvino"] = request.infer, lambda: request.get_output_tensor(0).data
        blas["openvino"] = f"oneDNN, OpenVINO {runtime_version('openvino')}"
    if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
        skipped["onnxruntime"] = "not installed (with onnx, which writes the graph)"
        return
    from onnx import TensorProto, helper

    matrices = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, n]) for name in ("a", "b", "c")]
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", matrices[:2], matrices[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)  # what every ONNX Runtime >= 1.20 reads
    session = onnxruntime_session(model.SerializeToString(), threads)
    out = np.empty((n, n), dtype=np.float32)
    binding = session.io_binding()
    for name, matrix in (("a", left), ("b", right), ("c", out)):
        getattr(binding, "bind_output" if name == "c" else "bind_input")(
            name, "cpu", 0, np.float32, [n, n], matrix.ctypes.data)
    products["onnxruntime"] = lambda: session.run_with_iobinding(binding)
    results["onnxruntime"], blas["onnxruntime"] = out, f"MLAS, ONNX Runtime {runtime_version('onnxruntime')}"


def _alternated(products: dict[str, Callable[[], None]], device: torch.device, repeats: int, warmup: int
                ) -> dict[str, list[float]]:
    """Seconds of each timed call of every product: ``warmup`` untimed calls each, then ``repeats`` rounds in
    which each runs once, the order rotating (no library always runs first)."""
    names = list(products)
    for _ in range(warmup):
        for name in names:
            products[name]()
    seconds = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            _synchronize(device)
            start = time.perf_counter()
            products[name]()
            _synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _torch_threads(threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def torch_blas(device: torch.device) -> str:
    """The library behind ``torch.mm`` on ``device``: cuBLAS on CUDA, else the BLAS torch was built with (MKL,
    OpenBLAS, ...; ``torch.__config__.show()``)."""
    if device.type == "cuda":
        return "cuBLAS"
    match = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return match.group(1) if match else ("mkl" if torch.backends.mkl.is_available() else "unknown")


def numpy_blas() -> str:
    """The BLAS numpy was built with (``numpy.show_config``), e.g. scipy-openblas."""
    with contextlib.suppress(Exception):
        return str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"])
    return "unknown"


def gemm_dtype(dtype: str | None, weights_dtype: str | None) -> str:
    """The dtype the rows' matrix products run in: bf16 under bf16 autocast or with bf16 weights, else fp32."""
    return "bf16" if "bf16" in (dtype, weights_dtype) else "fp32"


def achieved_gflops(macs: float, seconds: float) -> float:
    """GFLOP/s of ``macs`` multiply-adds (2 floating-point operations each) done in ``seconds``."""
    return 2 * macs / seconds / 1e9


def share_of_gemm(gflops: float, gemm: dict | None) -> float | None:
    """``gflops`` / the GEMM rate of :func:`gemm_rate` (None without one)."""
    return None if not gemm else gflops / gemm["gflops"]


def rate_text(gflops: float, gemm: dict | None) -> str:
    """``"48 GFLOP/s, 41 % of the GEMM rate"`` (without the share when no GEMM rate was measured)."""
    share = share_of_gemm(gflops, gemm)
    return f"{gflops:.0f} GFLOP/s" + ("" if share is None else f", {share:.0%} of the GEMM rate")


def gemm_line(gemm: dict) -> str:
    """One line: the GEMM rate, its library and settings, every library's rate, and the CPU pressure meanwhile."""
    n, fastest = gemm["size"], gemm["libraries"][gemm["library"]]
    others = [f"{name} ({library['blas']}) {library['gflops']:.0f}" for name, library in gemm["libraries"].items()]
    skipped = [f"{name}: {why}" for name, why in gemm["skipped"].items()]
    per_call = "" if gemm["products_per_call"] == 1 else f" ({gemm['products_per_call']} per timed call)"
    return (f"GEMM rate: {gemm['gflops']:.0f} GFLOP/s, {gemm['library']} ({fastest['blas']}): the best of "
            f"{gemm['repeats']} {gemm['dtype']} products {n} x {n} @ {n} x {n}{per_call} after {gemm['warmup']} "
            f"warm-up, {gemm['threads']} thread(s); by library: {', '.join(others)} GFLOP/s"
            + (f" (not measured: {'; '.join(skipped)})" if skipped else "")
            + ("" if gemm.get("cpu_pressure") is None else f"; CPU pressure {gemm['cpu_pressure']:.0f}%")
            + ". The machine's limit: every GFLOP/s below is also given as a share of it")


__all__ = ["CUDA_PRODUCTS_PER_CALL", "GEMM_DTYPES", "RUNTIME_LIBRARIES", "achieved_gflops", "gemm_dtype", "gemm_line",
           "gemm_rate", "numpy_blas", "rate_text", "share_of_gemm", "torch_blas"]
