"""What every layer (trainer, evaluation, command line) accepts of how texts become vectors and two vectors a
score: the similarity names, the search backends' names, the runtimes, the pooling a TITE encoder refuses, and that
no vector holding NaN or an infinity is ever written. Imports nothing, so the command line reads it without loading
torch.

Mean pooling itself lives in the infused dual encoder's remote code,
:func:`dense_encoders.models.infused.modeling_infused.mean_pool`: a model folder can import nothing of the
package, while the package may import from a model folder, so the trainer and the evaluation import it
from there.
"""

from __future__ import annotations

# "cosine": the dot product of L2-normalised vectors; "dot": the plain dot product
SIMILARITIES = ("cosine", "dot")

# the search backends (dense_encoders.evaluation.backends registers one class under each name)
SEARCH_BACKEND_NAMES = ("exact", "faiss")

# what runs an encoder's transformer (dense_encoders.evaluation.runtimes): torch, or an exported graph in
# OpenVINO or ONNX Runtime on the CPU
RUNTIMES = ("torch", "openvino", "onnxruntime")
# what --runtime takes: one of RUNTIMES, or AUTO_RUNTIME, the fastest of them measured on this machine for the model's
# shape (dense_encoders.evaluation.runtimes.choose_runtime); the commands' default
AUTO_RUNTIME = "auto"
# auto measures the runtimes for a workload of at least this many texts: the exports and the timing take seconds to
# a minute once per machine and model shape, more than a smaller workload wins back
AUTO_MEASURE_TEXTS = 1000
RUNTIME_CHOICES = (AUTO_RUNTIME, *RUNTIMES)
# sentence-transformers' backends (``SentenceTransformer(..., backend=...)``) -> the runtime whose export they load
# (`dense-encoders export` writes it in their layout)
BACKEND_RUNTIMES = {"onnx": "onnxruntime", "openvino": "openvino"}

# how token states become one vector: the first token's state or the mean over the real tokens
POOLING_MODES = ("cls", "mean")


def refuse_non_finite_vectors(vectors, name_of_row, where: str) -> None:
    """A one-line ``ValueError`` where a row of ``vectors`` (``(texts, dimension)``, NumPy) holds NaN or an infinity,
    naming the first such text (``name_of_row(row)``) and how many there are: no command writes such a vector to a
    shard, a cache, a results file or a run, where it would be read as a number. ``where``: what was being made."""
    import numpy as np  # here, not at the top: the command line reads this module without NumPy's import time

    finite = np.isfinite(vectors).all(axis=-1)
    if bool(finite.all()):
        return
    bad = np.flatnonzero(~finite)
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    raise ValueError(f"{where}: the vector of {name_of_row(int(bad[0]))}{more} holds NaN or infinite values, so "
                     "nothing was written; the model gives no number for it: check its weights (a damaged checkpoint "
                     "or export, a diverged training) or that text")


def refuse_mean_pooling_of_tite(model_type: str | None, pooling: str | None, instead: str) -> None:
    """A ``ValueError`` for mean pooling of a TITE encoder, which pools its token states into one vector per
    text inside the model (*TITE: Token-Independent Text Encoder for Information Retrieval*, Schlatt et al.,
    SIGIR 2025), so no state per token is left to average; ``instead`` names the pooling to use."""
    if model_type == "tite" and pooling == "mean":
        raise ValueError(f"TITE returns one vector per text (pooler_output), no state per token to mean-pool: "
                         f"use {instead}")


__all__ = ["AUTO_MEASURE_TEXTS", "AUTO_RUNTIME", "BACKEND_RUNTIMES", "POOLING_MODES", "RUNTIMES", "RUNTIME_CHOICES",
           "SEARCH_BACKEND_NAMES", "SIMILARITIES", "refuse_mean_pooling_of_tite"]
