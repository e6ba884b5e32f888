"""The settings entry points that load a model share: ``--trust-remote-code``, the consent to run code that a model
folder or Hub repository carries or names (:mod:`dense_encoders.checkpoints.trust`), and ``--runtime``, what runs
a bi-encoder's transformer (:mod:`dense_encoders.evaluation.runtimes`)."""

from __future__ import annotations

from dataclasses import field

from ..vectors import AUTO_MEASURE_TEXTS, AUTO_RUNTIME, RUNTIME_CHOICES

TRUST_REMOTE_CODE_HELP = (
    "Run code that a model folder or Hub repository carries or names (auto_map in its config.json, custom "
    "sentence-transformers modules): only for checkpoints you trust. Without it such a model is refused. Our own "
    "families (Condenser, TITE, infused) need no flag.")


def trust_remote_code_field():
    """The ``trust_remote_code`` field (``--trust-remote-code``) of an entry point's dataclass: off."""
    return field(default=False, metadata={"help": TRUST_REMOTE_CODE_HELP})


RUNTIME_HELP = (
    "What runs the encoder's transformer: torch, or OpenVINO or ONNX Runtime on the CPU (the model is exported once "
    "and cached; OpenVINO comes with the package, ONNX Runtime with pip install 'dense-encoders[onnxruntime]'), or "
    f"auto: on the CPU the fastest of those installed, measured once per machine and model shape (for a workload of "
    f"{AUTO_MEASURE_TEXTS:,} texts or more; below that, torch unless a measurement and the model's export are there "
    "already) and recorded with the vectors. Same texts, batches and pooling; vectors equal torch's to about 1e-6 "
    "(default: %(default)s).")


def runtime_field():
    """The ``runtime`` field (``--runtime``) of an entry point that encodes texts with a bi-encoder: auto."""
    return field(default=AUTO_RUNTIME, metadata={"choices": list(RUNTIME_CHOICES), "help": RUNTIME_HELP})


__all__ = ["RUNTIME_HELP", "TRUST_REMOTE_CODE_HELP", "runtime_field", "trust_remote_code_field"]
