"""Checkpoints that other implementations wrote, converted into our checkpoint folders.

:func:`convert_checkpoint` detects the source format (:data:`SOURCE_FORMATS`, one module each) and
writes one of our folders: safetensors weights, our remote code, the source's tokenizer, the
sentence-transformers files that reproduce the source's vectors, ``conversion.json`` and a model card
that names the source. ``dense-encoders convert SRC OUT`` is the command line for it.
"""

from .convert import SOURCE_FORMATS, convert_checkpoint, detect_format, find_format
from .source_format import ConversionError, SourceFormat

__all__ = ["SOURCE_FORMATS", "ConversionError", "SourceFormat", "convert_checkpoint", "detect_format", "find_format"]
