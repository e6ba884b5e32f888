"""The runtime that runs a bi-encoder's transformer: torch (the default), OpenVINO or ONNX Runtime, on the CPU.

A search engineer serving on CPU runs encoders in OpenVINO or ONNX Runtime. :func:`use_runtime` moves the
forward of a :class:`~sentence_transformers.SentenceTransformer`'s transformer into one of them and leaves
everything else as it is: the tokenizer, the prompts, the pooling and normalisation modules, the token-sorted
batches that :func:`~dense_encoders.evaluation.corpus_encoding.encode_corpus` feeds, the embedding shards and
their resumption. Only ``model.forward`` of the transformer is replaced, so the weights (and with them
:func:`~dense_encoders.checkpoints.loading.model_fingerprint`), the config and the device stay those of the
torch model.

The transformer is exported once per runtime with a dynamic batch size and length: for OpenVINO by its own
``openvino.convert_model`` of the torch module (saved as OpenVINO IR), for ONNX Runtime by
``torch.onnx.export(..., dynamo=True)`` in eager attention; TITE goes through its traceable padded path
(``models/tite/padded_tite.py``). The export is cached under :func:`cache_root`, keyed by the model's
fingerprint, the graph's inputs and output, and the torch, transformers and exporter versions. Both runtimes
run in float32 (OpenVINO's ``INFERENCE_PRECISION_HINT`` is set: it would otherwise pick bfloat16 on CPUs that
have it) with as many threads as torch uses.

``auto`` (the commands' default, :func:`choose_runtime`) runs the fastest runtime installed on this machine: which
one is fastest depends on the CPU and the model (OpenVINO ran all-MiniLM-L6-v2 in half of torch's time on an AMD
EPYC; torch was the fastest for TITE on an Intel Xeon, issue 55), so it is measured, once per machine and model
shape, on the same batches in every runtime, and the measurement is kept beside the exports. The choice and its
measurement are recorded with the vectors (``RetrievalEncoder.settings``, the shards' ``runtime``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import socket
import tempfile
import time
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
import transformers

from ..checkpoints.folder import BACKEND_FILES
from ..data.embedding_shards import file_sha256
from ..data.files import process_is_gone, read_json, write_json
from ..vectors import AUTO_MEASURE_TEXTS, AUTO_RUNTIME, BACKEND_RUNTIMES, RUNTIME_CHOICES, RUNTIMES

logger = logging.getLogger(__name__)

# runtime -> the modules it needs (the runtime's, then its exporter's: torch.onnx.export(..., dynamo=True) writes
# through onnxscript) and the extra of dense-encoders that installs them
RUNTIME_PACKAGES = {"openvino": (("openvino",), "openvino"),
                    "onnxruntime": (("onnxruntime", "onnx", "onnxscript"), "onnxruntime")}
# runtime -> the file its export is kept in: ONNX Runtime reads torch.onnx.export's file, OpenVINO its own IR, which
# openvino.convert_model makes from the torch module (attention stays one SDPA operation, which OpenVINO's CPU
# plugin fuses; through ONNX it arrives as matmul and softmax)
EXPORT_FILES = {"onnxruntime": "model.onnx", "openvino": "openvino_model.xml"}
RECORD_FILE = "export.json"
# what this version's exports are beyond their key's versions (2: OpenVINO's output carries its name), so an export
# of an earlier layout in the cache is made again, not reused
EXPORT_LAYOUT = 2
# texts of the example batch the graph is traced with: two rows of different lengths, so the padding path
# (not a mask of ones only) is what the graph records
EXAMPLE_TEXTS = ("an example text of the export with several words", "a short one")


def cache_root() -> Path:
    """Where exported models are kept: ``$DENSE_ENCODERS_CACHE/runtimes``, else ``$XDG_CACHE_HOME`` (or
    ``~/.cache``) ``/dense-encoders/runtimes``."""
    if os.environ.get("DENSE_ENCODERS_CACHE"):
        return Path(os.environ["DENSE_ENCODERS_CACHE"]).expanduser() / "runtimes"
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return user_cache / "dense-encoders" / "runtimes"


def check_runtime(runtime: str, device: str | None = None, devices: list[str] | None = None) -> None:
    """A one-line ``ValueError`` for a runtime that is unknown, not installed, or asked for a GPU: the runtimes
    besides torch run on the CPU, in one process. ``auto`` is always accepted: it chooses among what can run
    (:func:`choose_runtime`)."""
    if runtime not in RUNTIME_CHOICES:
        raise ValueError(f"--runtime {runtime}: choose one of {', '.join(RUNTIME_CHOICES)}")
    if runtime in ("torch", AUTO_RUNTIME):
        return
    modules, extra = RUNTIME_PACKAGES[runtime]
    missing = [name for name in modules if not _installed(name)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ValueError(f"--runtime {runtime} needs {' and '.join(missing)}, which {verb} not installed: "
                         f"pip install 'dense-encoders[{extra}]'")
    if devices:
        raise ValueError(f"--runtime {runtime} runs in this process on the CPU: leave --devices out, or use "
                         "--runtime torch")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"--runtime {runtime} runs on the CPU, not on --device {device}: leave --device out, or "
                         "use --runtime torch")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def installed_runtimes() -> list[str]:
    """torch and every other runtime whose packages are installed, in :data:`RUNTIMES` order."""
    return [runtime for runtime in RUNTIMES
            if runtime == "torch" or all(_installed(name) for name in RUNTIME_PACKAGES[runtime][0])]


def runtime_version(runtime: str) -> str:
    """The installed version of ``runtime``'s package (torch's for torch)."""
    return torch.__version__ if runtime == "torch" else metadata.version(RUNTIME_PACKAGES[runtime][0][0])


@dataclass(frozen=True)
class ExportedGraph:
    """What the exported transformer takes and gives: the tokenizer's tensors it reads (``inputs``), the output
    field sentence-transformers reads (``output``), and the file of the export (``path``)."""

    inputs: tuple[str, ...]
    output: str
    path: Path


def use_runtime(model, runtime: str, fingerprint: str) -> dict | None:
    """Run the transformer of the SentenceTransformer ``model`` in ``runtime`` from now on; returns
    ``{"name", "version"}`` to record, or None for torch (nothing changes). ``fingerprint`` is the model's
    :func:`~dense_encoders.checkpoints.loading.model_fingerprint`, the key of the cached export."""
    check_runtime(runtime)
    if runtime == "torch":
        return None
    transformer = transformer_module(model)
    graph = exported_graph(model, transformer, fingerprint, runtime)
    transformer.model.forward = RuntimeForward(graph, runtime)
    return {"name": runtime, "version": runtime_version(runtime)}


def transformer_module(model):
    """The one module of ``model`` that holds a transformers model, if it is the first and its text goes through
    ``forward`` to one output field; else a one-line ``ValueError``."""
    holders = [module for module in model if isinstance(getattr(module, "model", None), transformers.PreTrainedModel)]
    first = next(iter(model), None)
    if len(holders) != 1 or holders[0] is not first:
        raise ValueError(f"another runtime than torch runs pipelines whose first module holds the only transformers "
                         f"model; this one is {[type(module).__name__ for module in model]}: use --runtime torch")
    text = getattr(first, "modality_config", {}).get("text", {})
    if text.get("method") != "forward" or not isinstance(text.get("method_output_name"), str):
        raise ValueError(f"another runtime than torch runs a transformer whose texts go through forward to one "
                         f"output; this one is configured {text}: use --runtime torch")
    return first


def exported_graph(model, transformer, fingerprint: str, runtime: str) -> ExportedGraph:
    """The cached export of ``transformer`` for ``runtime`` (made now when there is none)."""
    graph, key, example = _export_place(model, transformer, fingerprint, runtime)
    problem = export_problem(graph.path.parent, key)
    if problem is not None:
        if problem != NO_EXPORT:
            logger.warning("the cached %s export in %s is damaged (%s): exporting it again", runtime,
                           graph.path.parent, problem)
        _export(transformer.model, {name: example[name] for name in graph.inputs}, graph, key, runtime)
    return graph


def export_is_cached(model, transformer, fingerprint: str, runtime: str) -> bool:
    """Whether a sound export of ``transformer`` for ``runtime`` is in the cache (nothing is exported)."""
    graph, key, _ = _export_place(model, transformer, fingerprint, runtime)
    return export_problem(graph.path.parent, key) is None


def _export_place(model, transformer, fingerprint: str, runtime: str) -> tuple[ExportedGraph, dict, dict]:
    """Where the export of ``transformer`` for ``runtime`` is kept, its key, and the example batch it is traced
    with."""
    example = {name: value for name, value in model.preprocess(list(EXAMPLE_TEXTS)).items()
               if isinstance(value, torch.Tensor)}
    inputs = tuple(name for name in ("input_ids", "attention_mask", "token_type_ids") if name in example)
    if "input_ids" not in inputs or "attention_mask" not in inputs:
        raise ValueError(f"the tokenizer gives {sorted(example)}, not input_ids and attention_mask: another runtime "
                         "than torch exports text transformers only; use --runtime torch")
    output = transformer.modality_config["text"]["method_output_name"]
    exporter = "onnxscript" if runtime == "onnxruntime" else "openvino"
    key = {"fingerprint": fingerprint, "inputs": list(inputs), "output": output, "format": EXPORT_FILES[runtime],
           "layout": EXPORT_LAYOUT,
           "torch": torch.__version__, "transformers": transformers.__version__,
           exporter: metadata.version(exporter)}
    folder = cache_root() / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return ExportedGraph(inputs, output, folder / EXPORT_FILES[runtime]), key, example


def write_backend_files(model, folder: str | os.PathLike, fingerprint: str,
                        backends: tuple[str, ...] = tuple(BACKEND_RUNTIMES)) -> list[Path]:
    """Copy the exports of the SentenceTransformer ``model`` (loaded from ``folder``; made now where none is cached)
    for ``backends`` (sentence-transformers' names) into ``folder`` in their layout (``BACKEND_FILES``):
    ``onnx/model.onnx`` for ``backend="onnx"`` and ``openvino/openvino_model.xml`` (with its ``.bin``, float32
    weights) for ``backend="openvino"``, which load through optimum without an export configuration of their own.
    Returns the written paths; each file is written beside its place and moved in whole."""
    written = []
    transformer = transformer_module(model)
    for backend in backends:
        check_runtime(BACKEND_RUNTIMES[backend])
        graph = exported_graph(model, transformer, fingerprint, BACKEND_RUNTIMES[backend])
        target = Path(folder) / Path(BACKEND_FILES[backend]).parent
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(graph.path.parent.iterdir()):
            if source.name == RECORD_FILE:
                continue
            scratch = target / f".{source.name}.{os.getpid()}.partial"
            shutil.copyfile(source, scratch)
            os.replace(scratch, target / source.name)
            written.append(target / source.name)
    return written


NO_EXPORT = "no export yet"


def export_problem(folder: Path, key: dict) -> str | None:
    """Why the export in ``folder`` cannot serve ``key`` (None when it can), checked as strongly as an embedding
    shard: :data:`NO_EXPORT` when there is none; else what is wrong. Every file the record lists must be a plain file
    of the folder (no link, which could lead out of it) with the recorded size and SHA-256; the folder itself must be
    a folder, not a link."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return f"{folder.name} is a link or a file, not a folder of exported files"
    record_path = folder / RECORD_FILE
    if not record_path.exists() and not record_path.is_symlink():
        return NO_EXPORT
    try:
        record = read_json(record_path)
        files = record["files"]
        entries = [(name, entry["size"], entry["sha256"]) for name, entry in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"its record {RECORD_FILE} is not one this version reads"
    if record_path.is_symlink() or record.get("key") != key:
        return f"its record {RECORD_FILE} is not this export's"
    for name, size, digest in entries:
        path = folder / name
        if Path(name).name != name or path.is_symlink() or not path.is_file():
            return f"{name} is missing, a link, or outside the folder"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, not the {size} it was written with"
        if file_sha256(path) != digest:
            return f"{name} is not the file that was written (its SHA-256 differs)"
    return None


class _ExportedForward(torch.nn.Module):
    """The transformer as the graph sees it: the tokenizer's tensors in, one output field out."""

    def __init__(self, model, output: str):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            features["token_type_ids"] = token_type_ids
        return getattr(self.model(**features, return_dict=True), self.output)


def _scratch_prefix(pid: int) -> str:
    return f".export-{pid}@{socket.gethostname()}-"


def remove_stale_scratch(root: Path) -> list[Path]:
    """Remove the scratch folders of exports on this machine whose process is gone (killed before it could clean up:
    ``.export-PID@HOST-*``); returns them. Those of live processes, and of other machines sharing the cache, stay."""
    removed = []
    prefix = re.compile(rf"^\.export-(\d+)@{re.escape(socket.gethostname())}-[^/]+$")
    for folder in root.iterdir() if root.is_dir() else ():
        match = prefix.match(folder.name)
        if match and not folder.is_symlink() and folder.is_dir() and process_is_gone(int(match.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _export(model, example: dict[str, torch.Tensor], graph: ExportedGraph, key: dict, runtime: str) -> None:
    """Export ``model`` for ``runtime`` into ``graph.path``'s folder: written in a scratch folder beside it and moved
    into place whole, so a folder with a record always holds its complete files. Scratch folders that killed exports
    left behind are removed first."""
    logger.info("exporting the transformer for %s (once per model; kept in %s)", runtime, graph.path.parent)
    graph.path.parent.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_scratch(graph.path.parent.parent)
    scratch = Path(tempfile.mkdtemp(dir=graph.path.parent.parent, prefix=_scratch_prefix(os.getpid())))
    training = model.training
    # torch.onnx's notes on operators of packages not installed (torchvision), transformers' on what the tracers
    # read of the config ("`loss_type=None` was set in the config but it is unrecognized")
    exporter_logs = [logging.getLogger("torch.onnx"), logging.getLogger("transformers")]
    levels = [log.level for log in exporter_logs]
    try:
        for log in exporter_logs:
            log.setLevel(logging.ERROR)
        model.eval()
        module = _ExportedForward(model, graph.output).eval()
        with torch.no_grad(), warnings.catch_warnings():
            # the tracers' notes (merged axis names, tensors read as Python values in checks): the graph is
            # checked against torch's vectors instead (tests/test_runtimes.py)
            warnings.simplefilter("ignore")
            if runtime == "onnxruntime":
                _write_onnx(model, module, example, scratch / graph.path.name)
            else:
                _write_openvino(module, example, scratch / graph.path.name)
        files = {path.name: {"size": path.stat().st_size, "sha256": file_sha256(path)} for path in scratch.iterdir()}
        write_json(scratch / RECORD_FILE, {"key": key, "files": files})
        _move_into_place(scratch, graph.path.parent, key)
    finally:
        for log, level in zip(exporter_logs, levels):
            log.setLevel(level)
        model.train(training)
        shutil.rmtree(scratch, ignore_errors=True)


def _move_into_place(scratch: Path, folder: Path, key: dict) -> None:
    """``scratch`` becomes ``folder``, unless another process (a torchrun rank) put a sound export with this key
    there meanwhile: then that one stays, as it may be in use. A damaged one is replaced; a link or a file in its
    place is removed (not what it leads to)."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        if export_problem(folder, key) is None:
            return
        shutil.rmtree(folder, ignore_errors=True)
    try:
        os.replace(scratch, folder)
    except OSError:  # another process moved its export in between
        if export_problem(folder, key) is not None:
            raise


def _write_onnx(model, module: torch.nn.Module, example: dict[str, torch.Tensor], path: Path) -> None:
    """``torch.onnx.export(..., dynamo=True)`` with a dynamic batch size and length, in eager attention: the ONNX
    optimizer rewrites the SDPA graph of transformers' BERT wrongly (CLS vectors off by 3 on all-MiniLM-L6-v2)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in (None, "eager"):
        model.set_attn_implementation("eager")
    try:
        torch.onnx.export(module, (), str(path), kwargs=example, dynamo=True, input_names=list(example),
                          dynamic_shapes={name: {0: "batch", 1: "length"} for name in example},
                          output_names=[module.output], verbose=False)
    finally:
        if attention not in (None, "eager"):
            model.set_attn_implementation(attention)


def _write_openvino(module: torch.nn.Module, example: dict[str, torch.Tensor], path: Path) -> None:
    """``openvino.convert_model`` of the torch module (its PyTorch front end traces it; every input dimension stays
    dynamic), saved as OpenVINO IR with float32 weights."""
    import openvino

    converted = openvino.convert_model(module, example_input=example)
    for port, name in zip(converted.inputs, example):
        port.get_tensor().set_names({name})
    converted.outputs[0].get_tensor().set_names({module.output})  # optimum-intel finds the output by its name
    openvino.save_model(converted, str(path), compress_to_fp16=False)


def openvino_compiled(model, threads: int):
    """An OpenVINO model (an IR file's path, or an ``openvino.Model``) compiled for the CPU as every OpenVINO run here
    is: in float32 (``INFERENCE_PRECISION_HINT``: it would otherwise pick bfloat16 on CPUs that have it), for
    latency, on ``threads`` threads."""
    import openvino

    core = openvino.Core()
    model = core.read_model(str(model)) if isinstance(model, (str, Path)) else model
    return core.compile_model(model, "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads})


def onnxruntime_session(model, threads: int):
    """An ONNX Runtime session on the CPU of an ONNX file (its path) or model (its serialized bytes), as every ONNX
    Runtime run here opens one: ``threads`` intra-op threads, warnings off."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model) if isinstance(model, Path) else model, options,
                                        providers=["CPUExecutionProvider"])


class RuntimeForward:
    """The transformer's ``forward`` through an exported graph: takes the tensors sentence-transformers passes,
    gives the one output field the pipeline reads (``{name: tensor}``)."""

    def __init__(self, graph: ExportedGraph, runtime: str):
        self.graph, self.runtime = graph, runtime
        threads = torch.get_num_threads()
        if runtime == "openvino":
            request = openvino_compiled(graph.path, threads).create_infer_request()
            self._run = lambda feed: request.infer(feed)[0]
        else:
            session = onnxruntime_session(graph.path, threads)
            self._run = lambda feed: session.run(None, feed)[0]

    def __call__(self, *, return_dict: bool = True, output_hidden_states=None, output_attentions=None, **features):
        if output_hidden_states or output_attentions:
            raise ValueError(f"--runtime {self.runtime} gives the last layer's output only, not hidden states or "
                             "attentions: use --runtime torch")
        unexpected = sorted(name for name, value in features.items()
                            if isinstance(value, torch.Tensor) and name not in self.graph.inputs)
        if unexpected:
            raise ValueError(f"--runtime {self.runtime}: the exported graph takes {list(self.graph.inputs)}, not "
                             f"{unexpected}; use --runtime torch")
        feed = {}
        for name in self.graph.inputs:
            value = features.get(name)
            if value is None:
                raise ValueError(f"--runtime {self.runtime}: the exported graph needs {name}, which the batch lacks")
            feed[name] = value.detach().cpu().numpy().astype(np.int64, copy=False)
        empty = np.flatnonzero(~feed["attention_mask"].any(axis=1))
        if len(empty):
            raise ValueError(f"rows {empty.tolist()} of the batch have no tokens (an all-zero attention_mask): "
                             f"--runtime {self.runtime} gives no defined vector for them; drop them first")
        return {self.graph.output: torch.from_numpy(np.ascontiguousarray(self._run(feed)))}


# ------------------------------------------------------------------------------------------
# auto: the fastest runtime installed, measured once per machine and model shape
# ------------------------------------------------------------------------------------------

CHOICES_FOLDER = "choices"
# how a choice is kept (the measured seconds per runtime and the fastest); a record of another layout is measured again
CHOICE_LAYOUT = 1
# the batches every runtime runs when they are measured: token counts of document-like and query-like rows (each
# batch's rows run from its count down to a quarter of it, as in a batch of texts sorted by length), at most the
# workload's max length; rounds alternate the runtimes and each runtime's best round counts
MEASURED_LENGTHS = (128, 32)
MEASURED_ROUNDS = 3


@dataclass(frozen=True)
class RuntimeChoice:
    """What ``--runtime auto`` runs (``name``), why (``reason``, one line), and the seconds each runtime took on the
    measured batches (``seconds``; None when nothing was measured)."""

    name: str
    reason: str
    seconds: dict[str, float] | None = None

    def record(self) -> dict:
        """The choice as recorded with the vectors (beside the runtime's name and version)."""
        return {"chosen_by": AUTO_RUNTIME, "reason": self.reason,
                **({"measured_seconds": self.seconds} if self.seconds else {})}


def choose_runtime(model, fingerprint: str, *, workload: int, batch_size: int, max_length: int,
                   devices: list[str] | None = None) -> RuntimeChoice:
    """What ``--runtime auto`` runs the SentenceTransformer ``model`` in, for ``workload`` texts in batches of
    ``batch_size`` up to ``max_length`` tokens.

    torch on a GPU, for a multi-device pool, when no other runtime is installed, or when the model is not one the
    exports serve. Otherwise the fastest runtime installed, as measured on this machine for this model shape (its
    config, pipeline, batch size, max length, thread count and the runtimes' versions; :func:`_choice_key`): the
    same batches through each runtime's forward, rounds alternated (:func:`measure_runtimes`). A measurement is made
    when there is none and ``workload`` reaches :data:`~dense_encoders.vectors.AUTO_MEASURE_TEXTS`, and kept in the
    cache beside the exports; a smaller workload runs the measured fastest only when this model's export is
    cached already (an export takes seconds to a minute), else torch."""
    if devices or model.device.type != "cpu":
        where = f"--devices {' '.join(devices)}" if devices else f"the {model.device.type} device"
        return RuntimeChoice("torch", f"torch: on {where}, the other runtimes run on the CPU only")
    candidates = installed_runtimes()
    if len(candidates) == 1:
        return RuntimeChoice("torch", "torch: no other runtime is installed (pip install 'dense-encoders[openvino]')")
    try:
        transformer = transformer_module(model)
    except ValueError as error:
        return RuntimeChoice("torch", f"torch: the other runtimes do not serve this pipeline ({error})")
    key = _choice_key(model, candidates, batch_size, max_length)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    path = cache_root() / CHOICES_FOLDER / f"{digest}.json"
    seconds = _recorded_seconds(path, key)
    if seconds is None:
        if workload < AUTO_MEASURE_TEXTS:
            return RuntimeChoice("torch", f"torch: {workload:,} texts, fewer than the {AUTO_MEASURE_TEXTS:,} auto "
                                          "measures the runtimes for (--runtime chooses one)")
        logger.info("measuring %s on this machine for this model shape (once; kept in %s)", ", ".join(candidates),
                    path)
        seconds = measure_runtimes(model, transformer, fingerprint, candidates, batch_size, max_length)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"key": key, "seconds": seconds})
    fastest = min(seconds, key=seconds.get)
    measured = ", ".join(f"{name} {value:.3g} s" for name, value in seconds.items())
    if (fastest != "torch" and workload < AUTO_MEASURE_TEXTS
            and not export_is_cached(model, transformer, fingerprint, fastest)):
        return RuntimeChoice("torch", f"torch: {fastest} is the fastest here ({measured}), but this model is not "
                                      f"exported yet and {workload:,} texts are too few to repay it", seconds)
    return RuntimeChoice(fastest, f"{fastest}: the fastest installed on this machine for this model shape "
                                  f"({measured} on the same batches)", seconds)


def _choice_key(model, candidates: list[str], batch_size: int, max_length: int) -> dict:
    """What decides which runtime is fastest: the machine (CPU, thread count), the model's shape (its config
    without names and paths, its pipeline's modules), the batches, and the runtimes' versions."""
    config = transformer_module(model).model.config.to_dict()
    for name in ("_name_or_path", "transformers_version", "architectures", "auto_map", "name_or_path"):
        config.pop(name, None)
    return {"layout": CHOICE_LAYOUT, "cpu": _cpu_name(), "machine": platform.machine(),
            "threads": torch.get_num_threads(), "config": json.dumps(config, sort_keys=True, default=str),
            "modules": [type(module).__name__ for module in model], "batch_size": batch_size,
            "max_length": max_length, "transformers": transformers.__version__,
            "versions": {runtime: runtime_version(runtime) for runtime in candidates}}


def _cpu_name() -> str:
    """The CPU's model name (``model name`` of /proc/cpuinfo on Linux, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _recorded_seconds(path: Path, key: dict) -> dict[str, float] | None:
    """The seconds a measurement kept at ``path`` records for ``key``; None when there is none, or it is of
    another key or cannot be read (it is then measured again)."""
    try:
        record = read_json(path)
        seconds = record["seconds"]
        if record.get("key") != key or set(seconds) != set(key["versions"]):
            return None
        return {name: float(seconds[name]) for name in key["versions"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def measure_runtimes(model, transformer, fingerprint: str, runtimes: list[str], batch_size: int,
                     max_length: int) -> dict[str, float]:
    """Seconds each of ``runtimes`` takes for the transformer's forward (the sentence-transformers module's, as
    ``encode`` calls it) on the same batches: :data:`MEASURED_LENGTHS` tokens, ``batch_size`` rows each, rows
    padded to their batch's longest as in length-sorted batches. Each runtime runs once untimed (a graph compiles
    on its first call), then :data:`MEASURED_ROUNDS` rounds alternate the runtimes; a runtime's time is its best
    round (wall time). The runtimes' exports are made (and cached) here."""
    batches = [_measured_batch(model, batch_size, min(length, max_length)) for length in MEASURED_LENGTHS]
    torch_forward = transformer.model.forward
    forwards = {runtime: torch_forward if runtime == "torch"
                else RuntimeForward(exported_graph(model, transformer, fingerprint, runtime), runtime)
                for runtime in runtimes}
    best = dict.fromkeys(runtimes, float("inf"))
    try:
        with torch.inference_mode():
            for round_ in range(MEASURED_ROUNDS + 1):
                for runtime in runtimes[round_ % len(runtimes):] + runtimes[: round_ % len(runtimes)]:
                    transformer.model.forward = forwards[runtime]
                    start = time.perf_counter()
                    for batch in batches:
                        transformer(dict(batch))
                    if round_:  # the first round is the untimed one
                        best[runtime] = min(best[runtime], time.perf_counter() - start)
    finally:
        transformer.model.forward = torch_forward
    return best


def _measured_batch(model, rows: int, length: int) -> dict[str, torch.Tensor]:
    """A batch of ``rows`` texts of one repeated word as ``model`` tokenizes them, the first ``length`` tokens long
    and each later row shorter, down to about a quarter of it."""
    counts = [max(1, length - (3 * length * row) // (4 * max(rows, 1))) for row in range(rows)]
    features = model.preprocess([" ".join(["retrieval"] * count) for count in counts])
    return {name: value[:, :length] if value.dim() == 2 else value for name, value in features.items()
            if isinstance(value, torch.Tensor)}


__all__ = ["NO_EXPORT", "RUNTIME_PACKAGES", "ExportedGraph", "RuntimeChoice", "RuntimeForward", "cache_root",
           "check_runtime", "choose_runtime", "export_is_cached", "export_problem", "exported_graph",
           "installed_runtimes", "measure_runtimes", "onnxruntime_session", "openvino_compiled", "remove_stale_scratch",
           "runtime_version", "transformer_module", "use_runtime"]
