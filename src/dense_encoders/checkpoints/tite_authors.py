"""TITE checkpoints saved by the TITE authors' code (github.com/webis-de/tite): encoder and pre-training folders.

Their ``config.json`` says ``model_type: "tite"``, as ours does, with other keys; their weights have other
names. The conversion is exact: every tensor maps to one of ours, and what has no exact counterpart is
refused by name.

Config (theirs -> ours):

* ``hidden_sizes``, ``num_attention_heads``, ``intermediate_sizes``, ``kernel_sizes``, ``strides``,
  ``num_hidden_layers``, ``vocab_size``, ``max_position_embeddings``, ``pooling_location``,
  ``hidden_act`` (``gelu_pytorch_tanh``), ``layer_norm_eps``, ``initializer_range``, ``pad_token_id``: same;
* ``dropout_prob`` -> ``hidden_dropout_prob``; attention-probability dropout is 0 in both;
* ``absolute_positional_embedding_type: "learned"`` with ``relative_positional_embedding_type: "rotary"``
  (or the older single key ``positional_embedding_type``) -> ``position_embedding_type`` ``"absolute"``,
  ``"rotary"`` or ``"absolute+rotary"``;
* ``norm_location: "post"`` and ``norm_type: "layer"``: post-LayerNorm, our only layout;
* ``rotary_interleaved``: handled in the weights (below); ``pooling_implementation`` and
  ``rope_implementation`` choose kernels, not numbers.

Weights (theirs -> ours; ``tite.`` prefix in pre-training folders):

* ``embeddings.word_embeddings`` -> ``embeddings.word_embeddings`` (final width, as ours);
* ``embeddings.downscale`` -> ``embeddings.embedding_projection``;
* ``embeddings.position_embeddings`` (FINAL width, projected by ``downscale`` like the word table) ->
  ``embeddings.position_embeddings`` at the first layer's width: the table times ``downscale``'s matrix,
  which is exact because the projection is linear and bias-free. Pre-training folders store this table
  only as ``heads.enhanced_masked_auto_encoding.position_embeddings.weight``: it is read from there;
* ``embeddings.norm`` -> ``embeddings.LayerNorm``;
* ``encoder.layers.N.attention.{query,key,value,dense,norm}`` -> ``layers.N.attention.{query,key,value,
  dense,LayerNorm}``; ``encoder.layers.N.mlp.{intermediate_dense,out_dense,norm}`` -> ``layers.N.
  {intermediate,output,LayerNorm}``;
* with ``rotary_interleaved`` the authors rotate pairs ``(2m, 2m+1)`` of each head's features, ours
  pairs ``(m, m + d/2)`` at the same frequency ``theta^(-2m/d)``: each head's query and key rows (weights
  and biases) are permuted so that feature ``2m`` becomes ``m`` and ``2m+1`` becomes ``m + d/2``. Queries
  and keys are permuted alike, so every dot product, and so the model's output, is unchanged.
* the pre-training heads (``heads.*``) are not carried over: our pre-training decoder is built
  differently; ``conversion.json`` lists what was dropped.

Refused, naming the key and value: pre- or qkv-norm, RMSNorm, ALiBi, SwiGLU, and, with rotary positions,
pooled queries where kernel size != stride (the authors place pooled queries at ``i*k + (k-1)/2``, ours at
the window centre ``i*s + (k-1)/2``; the two agree only for k = s, as in every released model).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..data.files import write_json
from ..models.tite import TiteConfig, TiteModel
from ..models.tite.configuration_tite import AUTHORS_CONFIG_KEYS
from .source_format import ConversionError, SourceFormat, check_config_matches_weights, check_integer_keys
from .weights import checkpoint_tensor_names

# the authors' configuration keys whose value decides the numbers: a folder must state them
_REQUIRED_KEYS = ("hidden_sizes", "num_attention_heads", "intermediate_sizes", "kernel_sizes", "strides",
                  "norm_location", "norm_type", "hidden_act", "pooling_location")
_SAME_KEYS = ("vocab_size", "num_hidden_layers", "hidden_sizes", "num_attention_heads", "intermediate_sizes",
              "kernel_sizes", "strides", "max_position_embeddings", "pooling_location", "hidden_act",
              "layer_norm_eps", "initializer_range", "pad_token_id")
_INTEGER_KEYS = ("vocab_size", "num_hidden_layers", "max_position_embeddings")
_PER_LAYER_INTEGER_KEYS = ("hidden_sizes", "num_attention_heads", "intermediate_sizes", "kernel_sizes", "strides")
_PRETRAINING_POSITIONS = "heads.enhanced_masked_auto_encoding.position_embeddings.weight"
_LAYER_RENAMES = {
    "attention.query": "attention.query",
    "attention.key": "attention.key",
    "attention.value": "attention.value",
    "attention.dense": "attention.dense",
    "attention.norm": "attention.LayerNorm",
    "mlp.intermediate_dense": "intermediate",
    "mlp.out_dense": "output",
    "mlp.norm": "LayerNorm",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                   "added_tokens.json")
# tokenizer_config.json keys of the authors' TiteTokenizer and Lightning IR's BiEncoderTokenizer
_TOKENIZER_CLASS_ONLY_KEYS = ("tokenizer_class", "backbone_tokenizer_class", "query_length", "doc_length",
                              "add_marker_tokens", "query_token", "doc_token", "auto_map")


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConversionError(f"{path} cannot be read as JSON ({error}).") from None


def is_authors_config(config: dict) -> bool:
    """A TITE ``config.json`` written by the authors' code (not by ours)."""
    return config.get("model_type") == "tite" and any(key in config for key in AUTHORS_CONFIG_KEYS)


def detect(folder: Path) -> bool:
    return (folder / "config.json").is_file() and is_authors_config(read_config(folder))


def _position_types(config: dict, where: str) -> tuple[bool, str | None]:
    """(learned absolute table, relative type) from either generation of the authors' keys."""
    if "absolute_positional_embedding_type" in config or "relative_positional_embedding_type" in config:
        absolute = config.get("absolute_positional_embedding_type")
        if absolute not in (None, "learned"):
            raise ConversionError(f"{where}: absolute_positional_embedding_type={absolute!r} is not supported "
                                  "(only 'learned' or null).")
        return absolute == "learned", config.get("relative_positional_embedding_type")
    single = config.get("positional_embedding_type", "rotary")
    return single == "absolute", (single if single != "absolute" else None)


def tite_config_from_authors(config: dict, where: str = "config.json") -> tuple[TiteConfig, bool]:
    """Our :class:`TiteConfig` for the authors' ``config``, and whether rotary pairs are interleaved.

    Raises :class:`ConversionError` naming the key and value of anything without an exact counterpart.
    """
    missing = [key for key in _REQUIRED_KEYS if key not in config]
    if missing:
        raise ConversionError(f"{where} lacks {', '.join(missing)}: the authors' defaults changed between "
                              "versions, so the architecture is not determined; add the keys their code saved.")
    check_integer_keys(config, where, _INTEGER_KEYS, _PER_LAYER_INTEGER_KEYS, none_allowed=("kernel_sizes", "strides"))
    unsupported = {
        "norm_location": (config["norm_location"], "post", "pre- and qkv-norm layers are not supported yet"),
        "norm_type": (config["norm_type"], "layer", "RMSNorm is not supported yet"),
    }
    for key, (value, wanted, reason) in unsupported.items():
        if value != wanted:
            raise ConversionError(f"{where}: {key}={value!r}: {reason} (only {key}={wanted!r} converts).")
    if config["hidden_act"] == "swiglu":
        raise ConversionError(f"{where}: hidden_act='swiglu': SwiGLU feed-forward layers are not supported yet.")
    absolute, relative = _position_types(config, where)
    if relative not in (None, "rotary"):
        key = "relative_positional_embedding_type" if "relative_positional_embedding_type" in config else \
            "positional_embedding_type"
        raise ConversionError(f"{where}: {key}={relative!r}: ALiBi and other relative positions are not supported "
                              "yet (rotary or none convert).")
    rotary = relative == "rotary"
    layers = config["num_hidden_layers"]
    kernels = config["kernel_sizes"] if isinstance(config["kernel_sizes"], list) else [config["kernel_sizes"]] * layers
    strides = config["strides"] if isinstance(config["strides"], list) else [config["strides"]] * layers
    if rotary and config["pooling_location"] in ("pre", "intra"):
        for index, (kernel, stride) in enumerate(zip(kernels, strides)):
            if kernel is not None and kernel != stride:
                raise ConversionError(
                    f"{where}: kernel_sizes[{index}]={kernel} != strides[{index}]={stride} with rotary positions: the "
                    "authors' pooled queries sit at i*k + (k-1)/2, ours at the window centre i*s + (k-1)/2; only "
                    "kernel size = stride converts exactly."
                )
    position_type = "+".join(name for name, on in (("absolute", absolute), ("rotary", rotary)) if on)
    if not position_type:
        raise ConversionError(f"{where}: a TITE without any position information is not supported.")
    ours = {key: config[key] for key in _SAME_KEYS if key in config}
    ours.update(kernel_sizes=kernels, strides=strides, position_embedding_type=position_type,
                hidden_dropout_prob=config.get("dropout_prob", 0.1), attention_probs_dropout_prob=0.0,
                type_vocab_size=0, pooling_implementation="auto")
    if "rope_theta" in config:
        ours["rope_theta"] = config["rope_theta"]
    try:
        return TiteConfig(**ours), rotary and bool(config.get("rotary_interleaved", False))
    except ValueError as error:
        raise ConversionError(f"{where}: {error}") from None


def check_dimensions(config: dict, state: dict[str, torch.Tensor], where: str, weights: str) -> None:
    """Refuse the authors' ``config`` (at ``where``) when its sizes differ from those of the encoder tensors
    in ``state`` (their names, ``tite.`` prefix or none): ``vocab_size``, ``num_hidden_layers``,
    ``hidden_sizes``, ``intermediate_sizes`` and ``max_position_embeddings``; numbers that are not integers
    first (:func:`check_integer_keys`)."""
    check_integer_keys(config, where, _INTEGER_KEYS, _PER_LAYER_INTEGER_KEYS, none_allowed=("kernel_sizes", "strides"))
    prefix = "tite." if any(name.startswith("tite.") for name in state) else ""
    shapes = {name[len(prefix):]: tuple(tensor.shape) for name, tensor in state.items() if name.startswith(prefix)}
    if _PRETRAINING_POSITIONS in state and "embeddings.position_embeddings.weight" not in shapes:
        shapes["embeddings.position_embeddings.weight"] = tuple(state[_PRETRAINING_POSITIONS].shape)
    implied = {}
    for name, key in (("embeddings.word_embeddings.weight", "vocab_size"),
                      ("embeddings.position_embeddings.weight", "max_position_embeddings")):
        if name in shapes:
            implied[key] = (shapes[name][0], f"{prefix}{name} has shape {shapes[name]}")
    layers = sorted({int(name.split(".")[2]) for name in shapes if name.startswith("encoder.layers.")})
    if layers:
        implied["num_hidden_layers"] = (layers[-1] + 1, f"{prefix}encoder.layers.0-{layers[-1]}")
        for key, module in (("hidden_sizes", "attention.query"), ("intermediate_sizes", "mlp.intermediate_dense")):
            names = [f"encoder.layers.{index}.{module}.weight" for index in range(layers[-1] + 1)]
            if all(name in shapes for name in names):
                implied[key] = ([shapes[name][0] for name in names],
                                f"the rows of {prefix}encoder.layers.N.{module}.weight")
    check_config_matches_weights(config, implied, where, weights)


def interleaved_to_half_rows(head_dim: int) -> torch.Tensor:
    """Row order that turns each head's interleaved rotary pairs (2m, 2m+1) into pairs (m, m + d/2)."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _permute_heads(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    head_dim = tensor.shape[0] // heads
    order = interleaved_to_half_rows(head_dim)
    return tensor.reshape(heads, head_dim, *tensor.shape[1:])[:, order].reshape(tensor.shape)


def tite_state_dict_from_authors(state: dict[str, torch.Tensor], config: TiteConfig,
                                 interleaved: bool, where: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Our :class:`TiteModel` state dict from the authors' encoder tensors (prefix ``tite.`` removed), and the
    names of the source tensors that are not part of the encoder (pre-training heads)."""
    prefix = "tite." if any(name.startswith("tite.") for name in state) else ""
    encoder = {name[len(prefix):]: tensor for name, tensor in state.items() if name.startswith(prefix)}
    dropped = sorted(name for name in state if not name.startswith(prefix))
    if config.absolute_positions and "embeddings.position_embeddings.weight" not in encoder:
        if _PRETRAINING_POSITIONS in state:  # the pre-training folder keeps the table only in the MAE head
            encoder["embeddings.position_embeddings.weight"] = state[_PRETRAINING_POSITIONS]
    ours: dict[str, torch.Tensor] = {}
    unknown = []
    downscale = encoder.pop("embeddings.downscale.weight", None)
    for name, tensor in encoder.items():
        if name == "embeddings.word_embeddings.weight":
            ours[name] = tensor
        elif name == "embeddings.position_embeddings.weight":
            ours[name] = tensor if downscale is None else tensor.double() @ downscale.double().T
        elif name.startswith("embeddings.norm."):
            ours["embeddings.LayerNorm." + name.rsplit(".", 1)[1]] = tensor
        elif name.startswith("encoder.layers."):
            index, module, parameter = _split_layer_name(name)
            if module not in _LAYER_RENAMES:
                unknown.append(prefix + name)
                continue
            if interleaved and module in ("attention.query", "attention.key"):
                tensor = _permute_heads(tensor, config.num_attention_heads[index])
            ours[f"layers.{index}.{_LAYER_RENAMES[module]}.{parameter}"] = tensor
        else:
            unknown.append(prefix + name)
    if downscale is not None:
        ours["embeddings.embedding_projection.weight"] = downscale
    if unknown:
        raise ConversionError(f"{where} holds tensors with no counterpart in our TITE: {', '.join(unknown[:5])}"
                              f"{' ...' if len(unknown) > 5 else ''}; the conversion would lose them.")
    dtype = ours["embeddings.word_embeddings.weight"].dtype if "embeddings.word_embeddings.weight" in ours else None
    return {name: (tensor if dtype is None else tensor.to(dtype)).contiguous()
            for name, tensor in ours.items()}, dropped


def _split_layer_name(name: str) -> tuple[int, str, str]:
    """``encoder.layers.3.attention.query.weight`` -> (3, "attention.query", "weight")."""
    index, _, rest = name[len("encoder.layers."):].partition(".")
    module, _, parameter = rest.rpartition(".")
    return int(index), module, parameter


def weights_file_names(folder: Path) -> str:
    """The names of the folder's weight files, for messages."""
    found = checkpoint_tensor_names(folder)
    return ", ".join(Path(path).name for path in found[0]) if found else "none"


def load_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's weights (safetensors, or a PyTorch file read with ``weights_only``)."""
    found = checkpoint_tensor_names(folder)
    if found is None:
        raise ConversionError(f"{folder} has no model.safetensors or pytorch_model.bin.")
    state: dict[str, torch.Tensor] = {}
    for path in found[0]:
        if path.endswith(".safetensors"):
            state.update(load_file(path))
        else:
            try:
                loaded = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as error:  # UnpicklingError for anything but plain tensors
                raise ConversionError(f"{path} is not a plain file of tensors ({error}).".splitlines()[0]) from None
            state.update(loaded)
    return state


def build_encoder(config: TiteConfig, state: dict[str, torch.Tensor], where: str) -> TiteModel:
    """Our :class:`TiteModel` holding exactly ``state``: every parameter filled, none left over."""
    model = TiteModel(config).to(state["embeddings.word_embeddings.weight"].dtype)
    expected = model.state_dict()
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise ConversionError(f"{where} does not fill our TITE: missing {missing[:5]}, left over {extra[:5]}.")
    wrong = [f"{name} is {tuple(state[name].shape)}, config.json makes it {tuple(tensor.shape)}"
             for name, tensor in expected.items() if state[name].shape != tensor.shape]
    if wrong:  # tensors check_dimensions does not cover
        raise ConversionError(f"{where}: config.json and the weights disagree ({'; '.join(wrong[:2])}): put back "
                              "the config.json saved with these weights.")
    model.load_state_dict(state, strict=True)
    return model


def copy_tokenizer(source: Path, output: Path) -> list[str]:
    """Copy the source's tokenizer, loadable by transformers alone; returns what was written.

    The authors' ``TiteTokenizer`` and Lightning IR's ``BiEncoderTokenizer`` need their packages; both are
    fully described by ``tokenizer.json`` (vocabulary, normalizer, the template that adds no [CLS]/[SEP],
    added marker tokens), so ``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` over that file and
    drops the keys only those classes take.
    """
    copied = []
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, output / name)
            copied.append(name)
    if (source / "tokenizer.json").is_file() and (source / "tokenizer_config.json").is_file():
        settings = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
        settings = {key: value for key, value in settings.items() if key not in _TOKENIZER_CLASS_ONLY_KEYS}
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        write_json(output / "tokenizer_config.json", settings)
        copied[copied.index("tokenizer_config.json")] += " (tokenizer_class: PreTrainedTokenizerFast)"
    return copied


def convert(source: Path, output: Path) -> dict:
    """Write our TITE encoder folder for the authors' encoder or pre-training folder ``source``."""
    raw = read_config(source)
    where = str(source / "config.json")
    weights = load_weights(source)
    check_dimensions(raw, weights, where, weights_file_names(source))
    config, interleaved = tite_config_from_authors(raw, where)
    state, dropped = tite_state_dict_from_authors(weights, config, interleaved, str(source))
    build_encoder(config, state, str(source)).save_pretrained(output)
    return {"source_architectures": raw.get("architectures"),
            **encoder_facts(config, state, interleaved, dropped, copy_tokenizer(source, output))}


def encoder_facts(config: TiteConfig, state: dict, interleaved: bool, dropped: list[str], tokenizer: list[str]) -> dict:
    """What ``conversion.json`` records about a converted TITE encoder (both formats that hold one)."""
    folded = "embeddings.embedding_projection.weight" in state
    return {
        "architecture": "TiteModel",
        "rotary_pairs": "interleaved, permuted to rotate-half" if interleaved else "rotate-half (unchanged)",
        "position_table": ("folded through embeddings.downscale" if folded else "unchanged")
        if config.absolute_positions else None,
        "dropped_tensors": dropped,
        "tokenizer_files": tokenizer,
    }


TITE_AUTHORS = SourceFormat(
    name="tite-authors",
    description="the TITE authors' code (github.com/webis-de/tite): a TiteModel or TiteForPreTraining folder",
    detect=detect,
    convert=convert,
)
