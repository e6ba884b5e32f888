"""Detect the format of a checkpoint folder written by another implementation, and convert it.

Each source format is one module of this package exposing a :class:`~.source_format.SourceFormat`;
adding a format means writing that module and listing it in :data:`SOURCE_FORMATS`. A format's ``detect`` looks at the folder
only (``config.json`` keys, file names, tensor names in file headers); its ``convert`` writes our folder
and returns the facts recorded in ``conversion.json`` (which the model card reports).
"""

from __future__ import annotations

import inspect
import json
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from huggingface_hub import snapshot_download

from .condenser_reference import CONDENSER_REFERENCE
from .lightning_ir import LIGHTNING_IR, trainer_output_hint
from .source_format import ConversionError, SourceFormat
from .tite_authors import TITE_AUTHORS

# Lightning IR first: its folders hold a TITE backbone too
SOURCE_FORMATS: tuple[SourceFormat, ...] = (LIGHTNING_IR, TITE_AUTHORS, CONDENSER_REFERENCE)


def find_format(folder: str | Path) -> SourceFormat | None:
    """The :class:`SourceFormat` of a folder another implementation wrote; ``None`` for any other folder."""
    folder = Path(folder)
    return next((f for f in SOURCE_FORMATS if folder.is_dir() and f.detect(folder)), None)


def detect_format(source: str | Path) -> SourceFormat:
    """The :class:`SourceFormat` of ``source``, or a :class:`ConversionError` naming what was looked for."""
    if not Path(source).is_dir():
        raise ConversionError(f"{source} is not a folder: give the checkpoint folder to convert.")
    found = find_format(source)
    if found is not None:
        return found
    if hint := trainer_output_hint(source):
        raise ConversionError(hint)
    known = "; ".join(f"{f.name} ({f.description})" for f in SOURCE_FORMATS)
    raise ConversionError(f"{source} is in none of the formats `dense-encoders convert` reads: {known}.")


def resolve_source(source: str | Path) -> tuple[Path, str]:
    """(local folder, how the card names it) of a folder or a Hub id (downloaded with huggingface_hub, or
    found in its cache when offline). A folder inside the Hub cache is named by its repository and revision."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        if hint := trainer_output_hint(folder):
            raise ConversionError(hint)
        if folder.exists() or str(source).count("/") != 1:
            raise ConversionError(f"{source} is not a folder: give the checkpoint folder (or a Hub id org/name).")
        try:
            folder = Path(snapshot_download(str(source)))
        except Exception as error:  # offline and not cached, no such repository, no network: one line
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ConversionError(f"{source}: no such folder, and the Hub repository could not be fetched ({reason}); "
                                  "download it first (hf download ORG/NAME) and convert the folder.") from None
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return folder, f"{parts[-3][len('models--'):].replace('--', '/')} (Hub revision {parts[-1]})"
    return folder, str(folder.resolve())


def convert_checkpoint(source: str | Path, output: str | Path, *, overwrite: bool = False, **options) -> Path:
    """Convert ``source`` (any format of :data:`SOURCE_FORMATS`; a folder or a Hub id) into our checkpoint
    folder ``output``.

    The folder is written next to ``output`` and renamed into place when complete, so an interrupted or
    failed conversion leaves nothing half-written; an existing non-empty ``output`` is refused unless
    ``overwrite``. ``options`` are the format's own (``skip_from`` for Condenser folders); ``None`` means
    the format's default, and an option the format does not take is refused. Returns ``output``.
    """
    # imported here: hub's cards build on this package's folder contract (.folder), and importing hub
    # at the top would make the two packages' __init__ modules import each other
    from ..hub.cards import model_card  # import cycle: hub.cards imports checkpoints

    source, named = resolve_source(source)
    source_format = detect_format(source)
    options = {name: value for name, value in options.items() if value is not None}
    accepted = inspect.signature(source_format.convert).parameters
    for name in options:
        if name not in accepted:
            raise ConversionError(f"--{name.replace('_', '-')} does not apply to {source} ({source_format.name}); "
                                  "leave it out.")
    output = Path(output)
    inside = output.resolve() == source.resolve() or source.resolve() in output.resolve().parents or \
        output.resolve() in source.resolve().parents
    if inside:
        raise ConversionError(f"{output} overlaps the source {source}: write the conversion to a separate folder, "
                              "so the original stays as it is.")
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not overwrite:
        raise ConversionError(f"{output} exists and is not empty: choose a new folder or pass --overwrite.")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.converting-", dir=output.parent))
    try:
        facts = source_format.convert(source, staging, **options)
        record = {
            "source_format": source_format.name,
            "source_description": source_format.description,
            "source": named,
            "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **facts,
        }
        (staging / "conversion.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        model_card(staging, output.name).save(staging / "README.md")
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output
