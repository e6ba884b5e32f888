"""Lightning IR bi-encoders with a TITE backbone (github.com/webis-de/lightning-ir), as the TITE authors
fine-tuned them on MS MARCO.

What a Lightning IR DPR folder is (read from Lightning IR's source; facts, not code):

* ``config.json``: ``model_type`` ``"lir-dpr"`` (``"bi-encoder"`` in older releases) with
  ``backbone_model_type: "tite"``; the backbone's own keys (the TITE authors') sit at the top level beside
  the bi-encoder's: ``query_length``, ``doc_length``, ``similarity_function`` (``dot`` / ``cosine``),
  ``normalize`` (newer releases: ``normalization_strategy: "l2"``), ``query_pooling_strategy`` /
  ``doc_pooling_strategy`` (newer: one ``pooling_strategy``), ``add_marker_tokens``, ``embedding_dim``,
  ``projection`` (``linear``, ``linear_no_bias`` or null), ``sparsification``.
* Weights: the model is a subclass of the backbone, so the TITE tensors keep the authors' names with no
  prefix; ``projection.weight`` ``(embedding_dim, hidden)`` (+ ``projection.bias`` for ``linear``).
* Encoding: backbone -> pooling (``first`` takes position 0: for a TITE, its one vector) -> projection ->
  L2 normalisation when asked; scores are dot products (or cosine similarity).
* Tokenizer: the backbone's (TITE's adds no [CLS]/[SEP] to a single text); with ``add_marker_tokens`` the
  special tokens ``[QUE]`` / ``[DOC]`` are added to the vocabulary and put in front of every query /
  document (``[QUE] text``), inside the length limit (``query_length`` counts the marker); the model's
  vocabulary is then resized to a multiple of 8. Texts are truncated to ``query_length`` / ``doc_length``.

Our folder: a :class:`~dense_encoders.models.tite.TiteModel` whose ``projection`` is Lightning IR's, so
``AutoModel`` gives the bi-encoder's vectors; sentence-transformers files that encode as Lightning IR
does: the markers as the ``query`` / ``document`` prompts (``encode_query`` / ``encode_document``), the two
lengths as ``query_length`` / ``document_length``, CLS pooling of the one vector, ``Normalize`` and the
similarity; and the tokenizer as a plain fast tokenizer (Lightning IR's ``BiEncoderTokenizer`` class needs
Lightning IR installed). Refused by name: sparsification, query / document expansion, adapters, ``l2``
similarity, ``sum`` pooling and, for a TITE without pooling, pooling other than first / mean.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer

from ..vectors import SIMILARITIES
from .folder import write_sentence_transformers_files
from .source_format import ConversionError, SourceFormat
from .tite_authors import (
    build_encoder,
    check_dimensions,
    copy_tokenizer,
    encoder_facts,
    load_weights,
    read_config,
    tite_config_from_authors,
    tite_state_dict_from_authors,
    weights_file_names,
)

BI_ENCODER_MODEL_TYPES = ("lir-dpr", "bi-encoder")
MARKERS = {"query": "[QUE]", "document": "[DOC]"}


def detect(folder: Path) -> bool:
    if not (folder / "config.json").is_file():
        return False
    config = read_config(folder)
    return "backbone_model_type" in config or str(config.get("model_type", "")).startswith("lir-")


def _pooling(config: dict, pools: bool, where: str) -> str:
    """Our sentence-transformers pooling for the bi-encoder's pooling strategies."""
    default = "mean" if config.get("model_type") == "bi-encoder" else "first"
    if "pooling_strategy" in config:
        strategies = {"query": config["pooling_strategy"], "document": config["pooling_strategy"]}
    else:
        strategies = {"query": config.get("query_pooling_strategy", default),
                      "document": config.get("doc_pooling_strategy", default)}
    for side, strategy in strategies.items():
        if strategy not in ("first", "mean", "max"):
            raise ConversionError(f"{where}: {side} pooling strategy {strategy!r} is not supported (first, mean "
                                  "or max convert; for a TITE with pooling all three are its one vector).")
    if pools:  # one vector per text: first = mean = max
        return "cls"
    if strategies["query"] != strategies["document"] or strategies["query"] == "max":
        raise ConversionError(f"{where}: pooling {strategies} over token states is not supported (one strategy, "
                              "first or mean, for both sides).")
    return {"first": "cls", "mean": "mean"}[strategies["query"]]


def _refuse_unsupported(config: dict, where: str) -> None:
    if config.get("model_type") not in BI_ENCODER_MODEL_TYPES:
        raise ConversionError(f"{where}: model_type={config.get('model_type')!r} is not a single-vector Lightning IR "
                              f"bi-encoder ({', '.join(BI_ENCODER_MODEL_TYPES)} convert).")
    if config.get("backbone_model_type") != "tite":
        raise ConversionError(f"{where}: backbone_model_type={config.get('backbone_model_type')!r}: only TITE "
                              "backbones convert.")
    for key in ("sparsification", "sparsification_strategy", "query_expansion", "doc_expansion", "use_adapter"):
        if config.get(key):
            raise ConversionError(f"{where}: {key}={config[key]!r} is not supported (only null / false convert).")
    if config.get("similarity_function", "dot") not in SIMILARITIES:
        raise ConversionError(f"{where}: similarity_function={config['similarity_function']!r} is not supported "
                              "(dot or cosine convert).")
    if config.get("projection", "linear") not in (None, "linear", "linear_no_bias"):
        raise ConversionError(f"{where}: projection={config['projection']!r} is not supported (linear, "
                              "linear_no_bias or null convert).")


def _split_projection(state: dict[str, torch.Tensor], config: dict, hidden: int, where: str) -> dict:
    projection = {name: state.pop(name) for name in list(state) if name.startswith("projection.")}
    kind = config.get("projection", "linear")
    if kind is None:
        if projection:
            raise ConversionError(f"{where}: projection is null but the weights hold {sorted(projection)}.")
        return {}
    weight = projection.get("projection.weight")
    if weight is None or ("projection.bias" in projection) != (kind == "linear"):
        raise ConversionError(f"{where}: projection={kind!r} but the weights hold {sorted(projection) or 'none'}.")
    if weight.shape[1] != hidden or weight.shape[0] != config.get("embedding_dim", weight.shape[0]):
        raise ConversionError(f"{where}: projection.weight has shape {tuple(weight.shape)}, expected "
                              f"({config.get('embedding_dim')}, {hidden}).")
    return projection


def _write_tokenizer(source: Path, output: Path, markers: bool) -> tuple[dict[str, str], list[str]]:
    """A plain fast tokenizer in ``output``; the ``query`` / ``document`` prompts that put the markers in front."""
    if markers and not (source / "tokenizer.json").is_file():
        raise ConversionError(f"{source} has add_marker_tokens but no tokenizer.json: the marker ids are unknown.")
    copied = copy_tokenizer(source, output)
    if not markers:
        return {}, copied
    prompts = {side: marker + " " for side, marker in MARKERS.items()}
    _check_markers(output, prompts)
    return prompts, copied


def _check_markers(folder: Path, prompts: dict[str, str]) -> None:
    """A prompt must give exactly ``[marker id] + the text's ids`` (no [CLS]/[SEP], one id per marker)."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = "a sample text"
    plain = tokenizer(text)["input_ids"]
    for side, prompt in prompts.items():
        marker = prompt.strip()
        marker_id = tokenizer.convert_tokens_to_ids(marker)
        if marker_id is None or marker_id == tokenizer.unk_token_id:
            raise ConversionError(f"{folder}: the tokenizer has no {marker} token although add_marker_tokens is set.")
        if tokenizer(prompt + text)["input_ids"] != [marker_id, *plain] or tokenizer.num_special_tokens_to_add():
            raise ConversionError(f"{folder}: the tokenizer adds special tokens to a single text, so the {side} "
                                  f"prompt {prompt!r} would not give Lightning IR's '{marker} text'.")


def convert(source: Path, output: Path) -> dict:
    """Write our TITE folder (with projection and sentence-transformers settings) for a Lightning IR bi-encoder."""
    config = read_config(source)
    where = str(source / "config.json")
    _refuse_unsupported(config, where)
    state = load_weights(source)
    check_dimensions(config, state, where, weights_file_names(source))
    tite_config, interleaved = tite_config_from_authors(config, where)
    projection = _split_projection(state, config, tite_config.hidden_size, str(source))
    if projection:
        tite_config.projection_size = int(projection["projection.weight"].shape[0])
        tite_config.projection_bias = "projection.bias" in projection
    ours, dropped = tite_state_dict_from_authors(state, tite_config, interleaved, str(source))
    ours.update(projection)
    pooling = _pooling(config, any(k is not None for k in tite_config.kernel_sizes), where)
    build_encoder(tite_config, ours, str(source)).save_pretrained(output)
    markers = bool(config.get("add_marker_tokens", False))
    prompts, tokenizer_files = _write_tokenizer(source, output, markers)
    normalize = bool(config.get("normalize")) or config.get("normalization_strategy") == "l2"
    # unit vectors make dot product and cosine similarity the same score: sentence-transformers pairs Normalize with cosine
    similarity = "cosine" if normalize else config.get("similarity_function", "dot")
    lengths = {"query_length": config.get("query_length", 32), "document_length": config.get("doc_length", 512)}
    write_sentence_transformers_files(output, pooling=pooling, similarity=similarity, prompts=prompts,
                                      normalize=normalize, lengths=lengths)
    return {
        "lightning_ir_model_type": config.get("model_type"),
        "projection": config.get("projection", "linear") if projection else None,
        "pooling": pooling,
        "similarity": similarity,
        "normalize": normalize,
        "markers": prompts or None,
        "lengths": lengths,
        **encoder_facts(tite_config, ours, interleaved, dropped, tokenizer_files),
    }


LIGHTNING_IR = SourceFormat(
    name="lightning-ir",
    description="Lightning IR (github.com/webis-de/lightning-ir): a lir-dpr bi-encoder with a TITE backbone",
    detect=detect,
    convert=convert,
)
