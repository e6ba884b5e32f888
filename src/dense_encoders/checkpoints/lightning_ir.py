"""Lightning IR bi-encoders with a TITE backbone (github.com/webis-de/lightning-ir), as the TITE authors
fine-tuned them on MS MARCO.

What a Lightning IR DPR folder is (read from Lightning IR's source; facts, not code):

* ``config.json`` (every key, ``PretrainedConfig.to_dict``): ``model_type`` ``"lir-dpr"`` (``"bi-encoder"`` in
  older releases) with ``backbone_model_type: "tite"``; the backbone's own keys (the TITE authors') sit at the
  top level beside the bi-encoder's: ``query_length``, ``doc_length``, ``similarity_function`` (``dot`` /
  ``cosine``), ``normalize``, ``query_pooling_strategy`` / ``doc_pooling_strategy``, ``add_marker_tokens``,
  ``embedding_dim``, ``projection`` (``linear``, ``linear_no_bias`` or null), ``sparsification``; from 0.0.6 on
  also ``pooling_strategy``, ``sparsification_strategy``, ``normalization_strategy`` and ``use_adapter``. Which
  of these the DPR model reads depends on the release (:func:`read_keys`).
* Weights: the model is a subclass of the backbone, so the TITE tensors keep the authors' names with no
  prefix; ``projection.weight`` ``(embedding_dim, hidden)`` (+ ``projection.bias`` for ``linear``).
* Encoding: backbone -> pooling (``first`` takes position 0: for a TITE, its one vector) -> projection ->
  L2 normalisation when asked; scores are dot products (or cosine similarity). A text without tokens gets the
  backbone's zeros (the TITE authors' code), so ``first`` gives the projection's bias and ``mean`` NaN.
* Training output: the trainer writes the model to ``lightning_logs/version_N/huggingface_checkpoint/``
  (:func:`trainer_output_hint` names it for the other paths of a run).
* Tokenizer: the backbone's (TITE's adds no [CLS]/[SEP] to a single text); with ``add_marker_tokens`` the
  special tokens ``[QUE]`` / ``[DOC]`` are added to the vocabulary and put in front of every query /
  document (``[QUE] text``), inside the length limit (``query_length`` counts the marker); the model's
  vocabulary is then resized to a multiple of 8. Texts are truncated to ``query_length`` / ``doc_length``
  (a length of null: at the tokenizer's ``model_max_length``, :func:`_lengths`).

Our folder: a :class:`~dense_encoders.models.tite.TiteModel` whose ``projection`` is Lightning IR's and whose
``output_pooling`` is its pooling, so ``AutoModel``'s ``pooler_output`` is the bi-encoder's vector (with
``empty_texts="zeros"`` under first pooling: an empty text's vector is Lightning IR's); sentence-transformers
files that encode as Lightning IR does: the markers as the ``query`` / ``document`` prompts
(``encode_query`` / ``encode_document``), the two lengths as ``query_length`` / ``document_length``, CLS
pooling of the one vector (mean pooling of a TITE without pooling layers where Lightning IR averages),
``Normalize`` and the similarity; and the tokenizer as a plain fast tokenizer (Lightning IR's ``BiEncoderTokenizer``
class needs Lightning IR installed). Refused by name: sparsification, query / document expansion, adapters, ``l2``
similarity, ``sum`` pooling and, for a TITE without pooling, pooling other than first / mean or differing
between queries and documents (a TITE with pooling has one vector, which every strategy gives).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer

from ..data.files import read_json
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


TRAINER_FOLDER = "huggingface_checkpoint"


def trainer_output_hint(path: str | Path) -> str | None:
    """For a path into what Lightning IR's trainer writes, the sentence naming the folder to convert; else None.

    The trainer (``LightningIRModule.on_save_checkpoint``) saves the model with ``save_pretrained`` into
    ``trainer.log_dir / "huggingface_checkpoint"``, i.e. ``lightning_logs/version_N/huggingface_checkpoint/``,
    beside Lightning's own ``checkpoints/*.ckpt`` (a pickled training state, never read here). ``path`` may be
    ``version_N/``, its ``checkpoints/`` folder, a ``.ckpt`` file in it, or ``lightning_logs/``.
    """
    path = Path(path)
    if path.is_dir():
        nearby = [path / TRAINER_FOLDER, path.parent / TRAINER_FOLDER]
        nearby += sorted(path.glob(f"version_*/{TRAINER_FOLDER}"))
        found = [folder for folder in nearby if (folder / "config.json").is_file()]
        if found:
            named = " or ".join(str(folder) for folder in found[-3:])
            return (f"{path} is Lightning IR's training output; the model is in {named} (Lightning IR's trainer "
                    f"writes it to lightning_logs/version_N/{TRAINER_FOLDER}/): convert that folder.")
        return None
    if path.suffix == ".ckpt":
        folder = path.parent.parent / TRAINER_FOLDER
        where = f"{folder}" + ("" if (folder / "config.json").is_file() else " (not found next to this file)")
        return (f"{path} is a Lightning checkpoint (a pickled training state, never loaded here); "
                f"Lightning IR's trainer writes the model to lightning_logs/version_N/{TRAINER_FOLDER}/, "
                f"here {where}: convert that folder.")
    return None


def detect(folder: Path) -> bool:
    if not (folder / "config.json").is_file():
        return False
    config = read_config(folder)
    return "backbone_model_type" in config or str(config.get("model_type", "")).startswith("lir-")


def read_keys(config: dict) -> dict[str, str]:
    """The keys whose values the DPR model of the Lightning IR release that saved ``config`` reads.

    Every release writes the whole config. Releases up to 0.0.5 write ``sparsification`` and per-side
    ``query_pooling_strategy`` / ``doc_pooling_strategy`` and their model reads those. From 0.0.6 on the
    single-vector config also writes ``pooling_strategy`` (default ``mean``) and ``sparsification_strategy``,
    and the DPR model reads only those two, while ``DprConfig`` still stores the older keys it was given
    (``sparsification: "relu"``, ``query_pooling_strategy: "first"``), which then change nothing. Both read
    ``normalize`` (a config without it: ``normalization_strategy``)."""
    newer = "pooling_strategy" in config or "sparsification_strategy" in config
    return {"sparsification": "sparsification_strategy" if newer else "sparsification",
            "pooling": "pooling_strategy" if newer else "query_pooling_strategy / doc_pooling_strategy",
            "normalize": "normalize" if "normalize" in config else "normalization_strategy",
            "release": "0.0.6 or later" if newer else "0.0.5 or earlier"}


def _strategies(config: dict, where: str) -> dict[str, str]:
    """The bi-encoder's pooling strategy (first, mean or max) per side, ``{"query": ..., "document": ...}``, as
    the saving release reads it (0.0.6 on: one ``pooling_strategy`` for both sides)."""
    if "pooling_strategy" in config or "sparsification_strategy" in config:
        strategies = {"query": config.get("pooling_strategy", "mean")}  # the 0.0.6 single-vector default
        strategies["document"] = strategies["query"]
    else:
        default = "mean" if config.get("model_type") == "bi-encoder" else "first"
        strategies = {"query": config.get("query_pooling_strategy", default),
                      "document": config.get("doc_pooling_strategy", default)}
    for side, strategy in strategies.items():
        if strategy not in ("first", "mean", "max"):
            raise ConversionError(f"{where}: {side} pooling strategy {strategy!r} is not supported (first, mean "
                                  "or max convert; for a TITE with pooling all three are its one vector).")
    return strategies


def _pooling(strategies: dict[str, str], pools: bool, where: str) -> str:
    """Our sentence-transformers pooling (and ``output_pooling``) for the bi-encoder's pooling strategies.

    A TITE that pools to one vector gives every strategy that vector, so the sides may differ; over token
    states they must agree (one pooling serves both sides), and max is refused."""
    if pools:  # one vector per text: first = mean = max
        return "cls"
    if strategies["query"] != strategies["document"]:
        raise ConversionError(f"{where}: pooling {strategies} differs between queries and documents over token "
                              "states; one strategy for both sides converts.")
    if strategies["query"] == "max":
        raise ConversionError(f"{where}: max pooling over token states is not supported (first or mean convert).")
    return {"first": "cls", "mean": "mean"}[strategies["query"]]


def _strategy_named(strategies: dict[str, str]) -> str:
    """How ``conversion.json`` names the strategies: one name, or each side's."""
    if strategies["query"] == strategies["document"]:
        return strategies["query"]
    return f"{strategies['query']} (queries), {strategies['document']} (documents)"


def _unread(config: dict, keys: dict[str, str]) -> dict:
    """Keys the saving release's DPR model does not read, with a value that would otherwise mean something."""
    candidates = ("sparsification", "sparsification_strategy", "query_pooling_strategy", "doc_pooling_strategy",
                  "normalization_strategy")
    read = {name.strip() for value in keys.values() for name in value.split("/")}
    return {key: config[key] for key in candidates if key in config and key not in read and config[key] is not None}


LENGTHS = {"query_length": ("query_length", 32), "document_length": ("doc_length", 512)}  # ours: (theirs, default)


def _lengths(config: dict, source: Path, max_positions: int) -> tuple[dict[str, int], dict[str, str]]:
    """(``query_length`` / ``document_length``: where Lightning IR cuts each side's texts, the notes that
    ``conversion.json`` records for a side without a length).

    A length of null does not mean "no limit": Lightning IR's tokenizer then truncates at its
    ``model_max_length`` (``truncation=True`` without ``max_length``), and the backbone takes at most
    ``max_position_embeddings`` tokens (a TITE that pools to one vector reaches it only up to there), so the
    side is cut at the smaller of the two, as ``encode_query`` / ``encode_document`` and the card's code then
    do too."""
    tokenizer_limit = (read_json(source / "tokenizer_config.json") or {}).get("model_max_length")
    usable = isinstance(tokenizer_limit, int) and not isinstance(tokenizer_limit, bool) and 0 < tokenizer_limit
    limit = min(max_positions, tokenizer_limit) if usable else max_positions
    lengths, notes = {}, {}
    for ours, (theirs, default) in LENGTHS.items():
        value = config.get(theirs, default)
        if value is None:
            value = limit
            notes[theirs] = (f"null: cut at {limit} tokens, the model's max_position_embeddings={max_positions}"
                             + (f" and the tokenizer's model_max_length={tokenizer_limit}" if usable else ""))
        lengths[ours] = value
    return lengths, notes


def _refuse_unsupported(config: dict, where: str) -> None:
    if config.get("model_type") not in BI_ENCODER_MODEL_TYPES:
        raise ConversionError(f"{where}: model_type={config.get('model_type')!r} is not a single-vector Lightning IR "
                              f"bi-encoder ({', '.join(BI_ENCODER_MODEL_TYPES)} convert).")
    if config.get("backbone_model_type") != "tite":
        raise ConversionError(f"{where}: backbone_model_type={config.get('backbone_model_type')!r}: only TITE "
                              "backbones convert.")
    for key in (read_keys(config)["sparsification"], "query_expansion", "doc_expansion", "use_adapter"):
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
    strategies = _strategies(config, where)
    pooling = _pooling(strategies, tite_config.pools_to_one_vector, where)
    # pooler_output is the bi-encoder's vector: the mean where Lightning IR averages token states; an empty text
    # gets what Lightning IR gives it where that is a vector on both sides (first pooling: the backbone's zeros,
    # projected; mean and max over no tokens give NaN and -inf)
    first = set(strategies.values()) == {"first"}
    tite_config.output_pooling = "mean" if pooling == "mean" else "first"
    tite_config.empty_texts = "zeros" if first else "error"
    ours, dropped = tite_state_dict_from_authors(state, tite_config, interleaved, str(source))
    ours.update(projection)
    build_encoder(tite_config, ours, str(source)).save_pretrained(output)
    markers = bool(config.get("add_marker_tokens", False))
    prompts, tokenizer_files = _write_tokenizer(source, output, markers)
    keys = read_keys(config)
    normalize = bool(config["normalize"]) if "normalize" in config else config.get("normalization_strategy") == "l2"
    # unit vectors make dot product and cosine similarity the same score:
    # sentence-transformers pairs Normalize with cosine
    similarity = "cosine" if normalize else config.get("similarity_function", "dot")
    lengths, unset_lengths = _lengths(config, source, tite_config.max_position_embeddings)
    write_sentence_transformers_files(output, pooling=pooling, similarity=similarity, prompts=prompts,
                                      normalize=normalize, lengths=lengths)
    return {
        "lightning_ir_model_type": config.get("model_type"),
        "projection": config.get("projection", "linear") if projection else None,
        "pooling": pooling,
        "lightning_ir_pooling_strategy": _strategy_named(strategies),
        "empty_texts": "the projection's bias (Lightning IR's vector)" if first else
        f"refused (Lightning IR's {_strategy_named(strategies)} over no tokens gives NaN or -inf)",
        "keys_read": f"{keys['pooling']}, {keys['sparsification']}, {keys['normalize']} "
                     f"(Lightning IR {keys['release']})",
        "keys_not_read": _unread(config, keys) or None,
        "similarity": similarity,
        "normalize": normalize,
        "markers": prompts or None,
        "lengths": lengths,
        **({"lengths_not_set": unset_lengths} if unset_lengths else {}),
        **encoder_facts(tite_config, ours, interleaved, dropped, tokenizer_files),
    }


LIGHTNING_IR = SourceFormat(
    name="lightning-ir",
    description="Lightning IR (github.com/webis-de/lightning-ir): a lir-dpr bi-encoder with a TITE backbone",
    detect=detect,
    convert=convert,
)
