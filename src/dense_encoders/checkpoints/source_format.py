"""What every source format of :mod:`dense_encoders.checkpoints` provides, and its error type."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class ConversionError(ValueError):
    """A source folder that cannot be converted: unknown format, unsupported option, unsafe file."""


@dataclass(frozen=True)
class SourceFormat:
    """One format of another implementation's checkpoint folder.

    ``detect(folder)``: whether ``folder`` is in this format, from its files alone (``config.json`` keys,
    file names, tensor names in file headers). ``convert(folder, output, **options)`` writes our checkpoint
    folder into the empty folder ``output`` (weights, config, remote code, tokenizer, sentence-transformers
    files) and returns the facts that ``conversion.json`` records about the source. ``loads_as_is``: whether
    the folder, loaded as it is, gives the source's vectors (a Condenser output is a plain BERT to ``AutoModel``);
    folders that do not are refused by the command line with the conversion command.
    """

    name: str
    description: str
    detect: Callable[[Path], bool]
    convert: Callable[..., dict]
    loads_as_is: bool = False
