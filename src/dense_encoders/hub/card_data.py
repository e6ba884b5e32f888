"""What a model card says, as one typed object: :class:`DenseEncoderCardData`, filled from a checkpoint folder by
one reader (:meth:`DenseEncoderCardData.from_folder`) and rendered by :func:`dense_encoders.hub.cards.model_card`
(as sentence-transformers' ``SentenceTransformerModelCardData`` carries what its card says).

The folder's ``config.json`` says what the architecture is; its run records
(:func:`dense_encoders.data.run_records.read_run_records`) say how the model was made and how well it does; its
sentence-transformers files (or, for one of our models without them, those a push adds) say how it embeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoints.folder import (
    BACKEND_FILES,
    missing_sentence_transformers_files,
    pooling_mode,
    sentence_transformers_settings,
)
from ..data.files import read_json
from ..data.run_records import RunRecords, read_run_records


@dataclass
class DenseEncoderCardData:
    """The facts of one model card.

    ``model_name``: the repository id, or the folder's name; ``config``: the model's ``config.json``;
    ``records``: the run's records; ``pooling`` / ``similarity`` / ``normalized``: the sentence-transformers
    pipeline (None / False when it declares none); ``prompts`` / ``lengths``: the ``query`` / ``document`` prompts
    and token limits that ``encode_query`` / ``encode_document`` apply; ``license`` and ``base_model`` as given
    (the base model otherwise comes from the records); ``backends``: the sentence-transformers backends whose files
    the folder holds (``"onnx"``, ``"openvino"``: ``dense-encoders export``)."""

    model_name: str
    config: dict
    records: RunRecords = field(default_factory=RunRecords)
    pooling: str | None = None
    similarity: str | None = None
    normalized: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    license: str | None = None
    base_model: str | None = None
    backends: list[str] = field(default_factory=list)

    @classmethod
    def from_folder(cls, folder: str | Path, repo_id: str | None = None, *, results: list | None = None,
                    license: str | None = None, base_model: str | None = None) -> DenseEncoderCardData:
        """The card data of the checkpoint folder ``folder`` (``results``: evaluation results to report besides
        the folder's own, paths or mappings); a ``FileNotFoundError`` when it has no ``config.json``."""
        folder = Path(folder)
        config = read_json(folder / "config.json")
        if config is None:
            raise FileNotFoundError(f"{folder} has no config.json: save the model with save_pretrained first")
        declared = sentence_transformers_settings(folder) or _files_a_push_adds(folder)
        prompts, lengths = _sides(declared)
        return cls(model_name=repo_id or folder.name, config=config, records=read_run_records(folder, results),
                   pooling=declared.get("pooling"), similarity=declared.get("similarity"),
                   normalized=declared.get("normalize", False), prompts=prompts, lengths=lengths, license=license,
                   base_model=base_model, backends=[backend for backend, path in BACKEND_FILES.items()
                                                    if (folder / path).is_file()])


def _files_a_push_adds(folder: Path) -> dict:
    """For one of our models without sentence-transformers files: the pooling, normalisation and similarity
    that the files a push adds (``missing_sentence_transformers_files``) declare, read from their texts."""
    missing = missing_sentence_transformers_files(folder)
    if not missing:
        return {}
    declared = {"pooling": None, "normalize": False}
    for module in json.loads(missing["modules.json"]):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            pooling_file = (Path(module.get("path", "")) / "config.json").as_posix()
            declared["pooling"] = pooling_mode(json.loads(missing.get(pooling_file, "{}")))
        elif kind == "Normalize":
            declared["normalize"] = True
    settings = json.loads(missing.get("config_sentence_transformers.json", "{}"))
    declared["similarity"] = settings.get("similarity_fn_name")
    return declared


def _sides(declared: dict) -> tuple[dict[str, str], dict[str, int]]:
    """(prompts, lengths) that ``encode_query`` / ``encode_document`` apply: the non-empty ``query`` / ``document``
    prompts and the ``query_length`` / ``document_length`` token limits that the sentence-transformers files
    declare (``declared``: :func:`sentence_transformers_settings`)."""
    prompts = {side: text for side, text in (declared.get("prompts") or {}).items()
               if side in ("query", "document") and text}
    limits = declared.get("lengths") or {}
    lengths = {side: int(limits[f"{side}_length"]) for side in ("query", "document") if f"{side}_length" in limits}
    return prompts, lengths


__all__ = ["DenseEncoderCardData"]
