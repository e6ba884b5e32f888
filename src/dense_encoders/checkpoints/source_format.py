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
    folders that do not are refused by the command line with the conversion command. ``incomplete(folder)``, for a
    folder ``detect`` does not claim: the one line saying which file that keeps a folder of this format from
    being recognised is missing and what writes it, when the rest is this format's; otherwise ``None``.
    """

    name: str
    description: str
    detect: Callable[[Path], bool]
    convert: Callable[..., dict]
    loads_as_is: bool = False
    incomplete: Callable[[Path], str | None] | None = None


def check_integer_keys(config: dict, where: str, keys, per_layer=(), none_allowed=()) -> None:
    """Refuse a ``config.json`` whose architecture numbers are not integers (``"num_attention_heads": "four"``):
    each of ``keys`` (when present) is an integer; each of ``per_layer`` an integer or a list of integers,
    where the keys of ``none_allowed`` may also be null (a layer without pooling)."""

    def whole(value, key) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool)) or (value is None and key in none_allowed)

    for key in (*keys, *per_layer):
        if key not in config:
            continue
        value = config[key]
        values = value if key in per_layer and isinstance(value, list) else [value]
        if not all(whole(item, key) for item in values):
            kind = "an integer or a list of integers, one per layer" if key in per_layer else "an integer"
            raise ConversionError(f"{where}: {key}={value!r} is not {kind}: write the number the model was saved "
                                  "with (as the code that trained it wrote it, e.g. 4), then convert again.")


def check_config_matches_weights(config: dict, from_weights: dict, where: str, weights: str) -> None:
    """Refuse a ``config.json`` whose architecture numbers differ from what the weights' shapes say.

    ``from_weights`` maps a config key to ``(value, evidence)``: the value the tensors imply (a list for
    per-layer keys, compared with a single config value by repeating it) and the tensor whose shape shows it.
    The message names ``config.json``, the key and both values: which of the two files is the odd one out
    cannot be told from the files, so both fixes are named.
    """
    for key, (implied, evidence) in from_weights.items():
        if key not in config:
            continue
        stated = config[key]
        single = isinstance(implied, list) and not isinstance(stated, list)
        if ([stated] * len(implied) if single else stated) != implied:
            fix = implied[0] if single and len(set(implied)) == 1 else implied
            raise ConversionError(
                f"{where} says {key}={stated!r} but the weights ({weights}) have {key}={implied!r} ({evidence}): "
                f"config.json and the weights were not saved together. Put back the config.json saved with these "
                f"weights (or set {key} to {fix!r}), or the weights saved with it."
            )
