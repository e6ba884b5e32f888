"""Encoding queries and documents with any encoder, through sentence-transformers, with a disk cache.

Every model is run as a :class:`~sentence_transformers.SentenceTransformer`:

* a folder or Hub id with ``modules.json`` (any sentence-transformers model, and every folder our
  pre-training writes) is loaded as its own configuration prescribes (pooling, normalisation,
  max length, prompts, similarity);
* our models without sentence-transformers files use their native
  pipeline (:func:`dense_encoders.checkpoints.folder.native_pipeline`: the vector of ``pooler_output``);
* any other ``AutoModel`` checkpoint needs an explicit ``pooling="cls"`` or ``"mean"``: guessing is
  how users of CLS-trained encoders silently got mean pooling.

sentence-transformers' ``encode`` sorts texts by length before batching, so batches carry little
padding (and TITE unpads anyway). Embeddings are cached as safetensors files keyed by the model's
weights and pipeline, the side, prompt, max length and the exact texts, so a rerun does not re-encode.
Entries are written atomically; one that cannot be read (truncated, corrupt) or does not match (rows,
dimension, side, model fingerprint) is logged with its path, deleted and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from ..checkpoints.folder import clamp_to_positions
from ..checkpoints.loading import load_sentence_transformer, model_fingerprint
from ..data.files import atomic_write
from ..vectors import AUTO_RUNTIME, refuse_non_finite_vectors
from .runtimes import check_runtime, choose_runtime, runtime_version, use_runtime

logger = logging.getLogger(__name__)


@dataclass
class EncodedTexts:
    """Embeddings of one side plus how they were obtained."""

    embeddings: np.ndarray
    seconds: float  # encoding time; 0.0 when read from the cache
    cached: bool
    cache_path: str | None

    @property
    def texts_per_second(self) -> float | None:
        return len(self.embeddings) / self.seconds if self.seconds > 0 else None


class RetrievalEncoder:
    """Queries and documents through one SentenceTransformer, with per-side prompts and max lengths.

    ``query_prompt`` / ``document_prompt`` default to the model's own ``"query"`` / ``"document"``
    prompts (``config_sentence_transformers.json``); pass ``""`` for none. A model folder or Hub id that runs code
    of its own is refused unless ``trust_remote_code=True``
    (:func:`~dense_encoders.checkpoints.loading.load_sentence_transformer`). ``query_max_length`` /
    ``document_max_length`` default to the model's ``max_seq_length``; either is brought down to the model's
    positions (:func:`~dense_encoders.checkpoints.folder.clamp_to_positions`, with a warning line). ``runtime``
    ``"openvino"`` or ``"onnxruntime"`` runs the transformer's forward there, on the CPU
    (:mod:`~dense_encoders.evaluation.runtimes`); ``"auto"`` (the default) the fastest runtime installed, chosen for
    the workload (:meth:`settle_runtime`, which the first encoding calls with its number of texts when the caller
    has not: a caller that encodes both sides gives their total first).
    """

    def __init__(
        self,
        model,
        *,
        pooling: str | None = None,
        device: str | None = None,
        trust_remote_code: bool = False,
        batch_size: int = 32,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        query_max_length: int | None = None,
        document_max_length: int | None = None,
        normalize: bool = False,
        cache_dir: str | Path | None = None,
        show_progress_bar: bool = True,
        name: str | None = None,
        allow_missing_weights: bool = False,
        runtime: str = AUTO_RUNTIME,
    ):
        check_runtime(runtime, device)
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be at least 1")
        for option, value in (("query_max_length", query_max_length), ("document_max_length", document_max_length)):
            if value is not None and value < 1:
                raise ValueError(f"{option}={value}: must be at least 1")
        self.name = name or (str(model) if isinstance(model, (str, os.PathLike)) else type(model).__name__)
        self.model = load_sentence_transformer(
            model, pooling=pooling, device=device, trust_remote_code=trust_remote_code,
            allow_missing_weights=allow_missing_weights,
        )
        self.batch_size = batch_size
        self.prompts = {
            "query": query_prompt if query_prompt is not None else self.model.prompts.get("query", ""),
            "document": document_prompt if document_prompt is not None else self.model.prompts.get("document", ""),
        }
        # never past the model's positions (a longer input fails inside the embeddings): brought down, with a line
        config = getattr(self.model.transformers_model, "config", None)
        self.max_lengths = {
            side: clamp_to_positions(length or self.model.max_seq_length, config, f"the {side} length")
            for side, length in (("query", query_max_length), ("document", document_max_length))
        }
        self.normalize = normalize
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.show_progress_bar = show_progress_bar
        self._fingerprint: str | None = None
        # the runtime that runs the transformer (None until auto has chosen one: settle_runtime), and its record
        # ({"name", "version"}, with the choice's for auto; None: torch; evaluation.runtimes)
        self.runtime: str | None = None
        self.runtime_record: dict | None = None
        self.runtime_choice = None
        if runtime != AUTO_RUNTIME:
            self.runtime = runtime
            self.runtime_record = use_runtime(self.model, runtime, self.fingerprint) if runtime != "torch" else None

    def settle_runtime(self, workload: int, *, runtime: str | None = None) -> str:
        """The runtime that runs the transformer from now on: for ``--runtime auto``, chosen here once for
        ``workload`` texts (:func:`~dense_encoders.evaluation.runtimes.choose_runtime`), or ``runtime`` when given
        (a run continued in the runtime it began in, or rank 0's choice on every rank). A runtime given when the
        encoder was made stays; later calls return the first answer."""
        if self.runtime is None:
            if runtime is None:
                self.runtime_choice = choose_runtime(self.model, self.fingerprint, workload=workload,
                                                     batch_size=self.batch_size,
                                                     max_length=max(self.max_lengths.values()))
                runtime = self.runtime_choice.name
                logger.info("--runtime auto: %s", self.runtime_choice.reason)
            check_runtime(runtime)
            self.runtime_record = use_runtime(self.model, runtime, self.fingerprint) if runtime != "torch" else None
            self.runtime = runtime
        return self.runtime

    @property
    def similarity(self) -> str:
        """The similarity the model declares (``similarity_fn_name``), defaulting to cosine."""
        return self.model.similarity_fn_name or "cosine"

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        return self._fingerprint

    def settings(self) -> dict:
        self.settle_runtime(0)
        return {
            "batch_size": self.batch_size,
            "prompts": dict(self.prompts),
            "max_lengths": dict(self.max_lengths),
            "normalize": self.normalize,
            "similarity": self.similarity,
            "modules": [type(module).__name__ for module in self.model],
            "runtime": {**(self.runtime_record or {"name": "torch", "version": runtime_version("torch")}),
                        **(self.runtime_choice.record() if self.runtime_choice else {})},
        }

    def encode_queries(self, texts: list[str]) -> EncodedTexts:
        return self._encode(texts, "query")

    def encode_documents(self, texts: list[str]) -> EncodedTexts:
        return self._encode(texts, "document")

    def cache_key(self, texts: list[str], side: str) -> str:
        text_digest = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()
        key = {
            "model": self.fingerprint,
            "side": side,
            "prompt": self.prompts[side],
            "max_length": self.max_lengths[side],
            "normalize": self.normalize,
            "texts": text_digest,
            "count": len(texts),
        }
        self.settle_runtime(len(texts))
        if self.runtime != "torch":  # its vectors differ from torch's in the last bits: not the same entry
            key["runtime"] = self.runtime
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]

    def _encode(self, texts: list[str], side: str) -> EncodedTexts:
        if not texts:
            raise ValueError(f"no {side} texts to encode")
        self.settle_runtime(len(texts))
        cache_path = None
        if self.cache_dir is not None:
            cache_path = self.cache_dir / f"{side}-{self.cache_key(texts, side)}.safetensors"
            if cache_path.is_file():
                embeddings = self._read_cache(cache_path, len(texts), side)
                if embeddings is not None:
                    logger.info("%s embeddings read from the cache %s", side, cache_path)
                    return EncodedTexts(embeddings, 0.0, True, str(cache_path))
        encode = self.model.encode_query if side == "query" else self.model.encode_document
        previous_max_length = self.model.max_seq_length
        self.model.max_seq_length = self.max_lengths[side]
        try:
            start = time.perf_counter()
            embeddings = encode(
                texts,
                prompt=self.prompts[side],
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress_bar,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
            )
            seconds = time.perf_counter() - start
        finally:
            self.model.max_seq_length = previous_max_length
        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        refuse_non_finite_vectors(embeddings, lambda row: f"{side} {row} ({texts[row][:60]!r})",
                                  f"encoding {len(texts)} {side} texts with {self.name}")
        if cache_path is not None:
            metadata = {"side": side, "count": str(len(texts)), "model": self.name, "fingerprint": self.fingerprint}
            _save_atomically(embeddings, cache_path, metadata)
        return EncodedTexts(embeddings, seconds, False, str(cache_path) if cache_path else None)

    def _embedding_dimension(self) -> int | None:
        for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            method = getattr(self.model, name, None)
            if method is not None:
                try:
                    dimension = method()
                except Exception:  # a module stack that cannot tell: the dimension is then not checked
                    return None
                return dimension if isinstance(dimension, int) and dimension > 0 else None
        return None

    def _read_cache(self, path: Path, count: int, side: str) -> np.ndarray | None:
        """The cached embeddings at ``path``, or ``None`` when there are none to use. An entry that cannot be
        read (truncated, corrupt) or does not match (rows, dimension, side, model fingerprint) is logged with
        its path and the reason, deleted (if it is still the same file) and recomputed by the caller."""
        try:
            before = path.stat()
        except FileNotFoundError:  # removed by another process since is_file(): encode
            return None
        try:
            with safe_open(str(path), framework="np") as handle:
                metadata = handle.metadata() or {}
                embeddings = handle.get_tensor("embeddings") if "embeddings" in handle.keys() else None
        except FileNotFoundError:  # removed by another process since is_file(): encode
            return None
        except Exception as error:  # SafetensorError, OSError, ...: all mean "unreadable"
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            self._discard_cache_entry(path, before, f"cannot be read ({reason})")
            return None
        dimension = self._embedding_dimension()
        problem = None
        if embeddings is None:
            problem = "has no 'embeddings' tensor"
        elif embeddings.ndim != 2 or len(embeddings) != count:
            problem = f"has shape {tuple(embeddings.shape)}, expected {count} rows"
        elif dimension is not None and embeddings.shape[1] != dimension:
            problem = f"has dimension {embeddings.shape[1]}, the model gives {dimension}"
        elif metadata.get("side", side) != side or metadata.get("count", str(count)) != str(count):
            recorded = f"side={metadata.get('side')!r}, count={metadata.get('count')!r}"
            problem = f"records {recorded}, expected side={side!r}, count={str(count)!r}"
        elif "fingerprint" in metadata and metadata["fingerprint"] != self.fingerprint:
            problem = "was written by a different model (fingerprint mismatch)"
        if problem is not None:
            self._discard_cache_entry(path, before, problem)
            return None
        return np.ascontiguousarray(embeddings, dtype=np.float32)

    @staticmethod
    def _discard_cache_entry(path: Path, before: os.stat_result, reason: str) -> None:
        logger.warning("embedding cache entry %s %s: discarding it and encoding again", path, reason)
        try:
            now = path.stat()
            if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) != (
                before.st_ino, before.st_dev, before.st_size, before.st_mtime_ns
            ):
                return  # another process replaced it meanwhile: that entry is not ours to judge
            os.remove(path)
        except FileNotFoundError:
            pass


def _save_atomically(embeddings: np.ndarray, path: Path, metadata: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda scratch: save_file({"embeddings": embeddings}, scratch, metadata=metadata))


__all__ = ["EncodedTexts", "RetrievalEncoder", "model_fingerprint"]
