"""Checkpoint folders: what one holds, whether its weights are complete, opening it, and converting the
checkpoints other implementations wrote into one.

* :mod:`.folder`: the folder contract (our model types, their native sentence-transformers pipelines,
  the files a complete folder holds, what makes it unfit to publish);
* :mod:`.weights`: the weight check (a checkpoint whose weights miss or add tensors of its model is an
  error, or with ``allow_missing_weights`` a warning);
* :mod:`.loading`: the one loader of bi-encoders and cross-encoders, given as a path or a model object,
  every load weight-checked;
* :mod:`.trust`: the code a checkpoint would run (``auto_map``, custom modules), refused unless the caller
  consents (``trust_remote_code=True``); our own families need no consent;
* :func:`convert_checkpoint` detects the source format of another implementation's folder
  (:data:`SOURCE_FORMATS`, one module each) and writes one of our folders: safetensors weights, our remote
  code, the source's tokenizer, the sentence-transformers files that reproduce the source's vectors,
  ``conversion.json`` and a model card that names the source. ``dense-encoders convert SRC OUT`` is the
  command line for it.

This package builds on ``models/``; ``hub/``, ``trainer/``, ``evaluation/`` and the command line import it.
"""

from .convert import SOURCE_FORMATS, convert_checkpoint, detect_format, find_format
from .source_format import ConversionError, SourceFormat
from .trust import UntrustedCodeError
from .weights import CheckpointWeightsError, PickledObjectsError, check_checkpoint_weights

__all__ = [
    "SOURCE_FORMATS",
    "CheckpointWeightsError",
    "ConversionError",
    "PickledObjectsError",
    "SourceFormat",
    "UntrustedCodeError",
    "check_checkpoint_weights",
    "convert_checkpoint",
    "detect_format",
    "find_format",
]
