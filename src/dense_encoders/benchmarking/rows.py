"""The rows of the efficiency report: the encoders measured, built with random weights (fixed seed;
speed does not depend on the values).

    BERT-base (BertModel, sdpa)   transformers' ``BertModel`` (12 x 768, 12 heads, FFN 3072, no pooler,
                                  [CLS] vector), always ``attn_implementation="sdpa"``: the baseline
                                  every ratio refers to
    BERT-base (..., sorted)       the same model fed the same texts sorted by length, longest first,
                                  batched consecutively and padded per batch, as sentence-transformers'
                                  ``encode`` does: the second baseline ("vs BERT sorted"). Every other
                                  row gets the random-order batches (TITE unpads; order does not matter)
    Condenser (CondenserModel)    the Condenser retrieval encoder at BERT-base dimensions (a BertModel
                                  without pooler weights; its vector is the last-layer [CLS])
    tite-2-late ...               every preset of ``TITE_PRESETS`` that reaches one vector at 512 tokens
                                  (the 7 Table 3 variants and tite-no-pooling; ``minilm-l6-3-all`` stops
                                  at 256 tokens and is left out), packed / unpadded, ``pooler_output``
    DE-2 source (12-layer BERT-base cross-encoder)
                                  the encoder (``.bert``, pooler dropped) of a 12-layer BERT-base
                                  ``BertForSequenceClassification``: what DE-2 is built from, mean pooled
                                  like DE-2. Same shape as the BERT row, measured separately so that
                                  "DE-2 vs its source" is a same-pooling, same-round comparison
    DE-2 (from a 12-layer BERT-base cross-encoder)
                                  ``InfusedDualEncoderModel.from_cross_encoder(that cross-encoder,
                                  num_copied_layers=1, num_new_layers=1)``: 2 layers, mean pooling
    ... (torch.compile)           with ``compile``: the Condenser, every TITE and the DE-2 row once more as
                                  ``torch.compile(model)`` (inductor, default dynamic shapes; TITE takes its
                                  traceable padded path when compiled), the same weights: compiled vs eager

Every row but the baseline uses ``attn`` (``sdpa``, ``eager``, or ``flash_attention_2`` on CUDA
with flash-attn installed); with flash attention the Condenser row is "BERT with flash attention".
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.utils import is_flash_attn_2_available

from ..models.condenser import CondenserConfig, CondenserModel
from ..models.infused import InfusedDualEncoderModel, mean_pool
from ..models.tite.configuration_tite import TiteConfig
from ..models.tite.modeling_tite import TiteModel
from ..models.tite.presets import TINY_PRESETS, TITE_PRESETS, tite_preset
from ..settings.benchmarking import ATTENTION_CHOICES, MAX_LENGTH, default_presets  # noqa: F401 (re-exported)
from .flops import bert_macs, infused_macs, tite_macs
from .workloads import VOCAB_SIZE

BERT_BASE_SHAPE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)


def tiny_bert_config() -> BertConfig:
    """The BERT shape of ``--quick``: 4 layers of width 32 (4 heads, FFN 64), 16 positions."""
    return BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=16)


def bert_base_config(max_length: int = MAX_LENGTH) -> BertConfig:
    return BertConfig(vocab_size=VOCAB_SIZE, max_position_embeddings=max_length, **BERT_BASE_SHAPE)


@dataclass
class Row:
    name: str
    kind: str  # baseline | condenser | tite | source | infused | compiled
    model: torch.nn.Module
    macs: Callable[[int], int]  # length -> multiply-adds of one text
    encode: Callable[[torch.nn.Module, dict], torch.Tensor]  # one vector per text
    length_sorted: bool = False  # fed the length-sorted batches (the sorted BERT baseline) instead of random order
    compiled_of: str | None = None  # a compiled row: the name of the eager row of the same model
    # computes on the real tokens only (eager TITE: packed rows), so its work is ``macs`` at the real lengths; the
    # other rows (BertModel-shaped, compiled TITE's padded path) compute on every padded position of a batch
    unpadded: bool = False

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def attention(self) -> str:
        return self.model.config._attn_implementation


def _cls(model, batch):
    return model(**batch).last_hidden_state[:, 0]


def _pooler(model, batch):
    return model(**batch).pooler_output


def _mean(model, batch):
    return mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])


def shape_name(config: BertConfig) -> str:
    base = all(getattr(config, key) == value for key, value in BERT_BASE_SHAPE.items())
    return "BERT-base" if base else f"BERT {config.num_hidden_layers}x{config.hidden_size}"


def _checked(model: torch.nn.Module, name: str, attn: str) -> torch.nn.Module:
    got = model.config._attn_implementation
    if got != attn:
        raise RuntimeError(f"{name} came up with attention {got!r}, not {attn!r}")
    return model


def tite_preset_configs(presets, max_length: int) -> dict:
    if isinstance(presets, Mapping):
        configs = dict(presets)
    else:
        known = {**TITE_PRESETS, **TINY_PRESETS}
        configs = {}
        for name in dict.fromkeys(presets):  # drop repeats, keep order
            if name not in known:
                raise ValueError(f"unknown TITE preset {name!r}; choose from {', '.join(sorted(known))}")
            configs[name] = tite_preset(name, vocab_size=VOCAB_SIZE)
    for name, config in configs.items():
        if not isinstance(config, TiteConfig):
            raise TypeError(f"preset {name!r}: expected a TiteConfig, got {type(config).__name__}")
        pools = any(kernel is not None for kernel in config.kernel_sizes)
        if pools and config.max_position_embeddings < max_length:
            raise ValueError(
                f"TITE preset {name}: it reaches one vector only up to {config.max_position_embeddings} tokens, but "
                f"documents go up to {max_length}; leave it out."
            )
    return configs


def build_rows(bert_config: BertConfig, tite_configs: dict, attn: str, seed: int, compile: bool = False
               ) -> list[Row]:
    shape = shape_name(bert_config)
    layers = bert_config.num_hidden_layers
    settings = {key: getattr(bert_config, key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")}
    settings["vocab_size"] = VOCAB_SIZE

    def bert_cost(length):
        return bert_macs(bert_config, length)

    torch.manual_seed(seed)
    bert = BertModel._from_config(BertConfig(**settings), attn_implementation="sdpa", add_pooling_layer=False)
    rows = [Row(f"{shape} (BertModel, sdpa)", "baseline", _checked(bert, "BertModel", "sdpa"), bert_cost, _cls),
            # the same model, fed length-sorted batches as sentence-transformers' encode does
            Row(f"{shape} (BertModel, sdpa, sorted)", "baseline_sorted", bert, bert_cost, _cls, length_sorted=True)]

    torch.manual_seed(seed)
    condenser_config = CondenserConfig(**settings, skip_from=max(1, layers // 2), n_head_layers=2)
    condenser = CondenserModel._from_config(condenser_config, attn_implementation=attn)
    rows.append(Row("Condenser (CondenserModel)", "condenser", _checked(condenser, "CondenserModel", attn),
                     bert_cost, _pooler))

    for name, config in tite_configs.items():
        config = copy.deepcopy(config)  # the attention choice stays ours
        config._attn_implementation = attn
        torch.manual_seed(seed)
        rows.append(Row(name, "tite", _checked(TiteModel(config), name, attn),
                         lambda length, config=config: tite_macs(config, length), _pooler, unpadded=True))

    torch.manual_seed(seed)
    cross_encoder = BertForSequenceClassification._from_config(BertConfig(**settings, num_labels=1),
                                                                attn_implementation=attn)
    de2 = InfusedDualEncoderModel.from_cross_encoder(cross_encoder, num_copied_layers=1, num_new_layers=1)
    source = cross_encoder.bert
    source.pooler = None  # the classification head's pooler is not part of encoding
    rows.append(Row(f"DE-2 source ({layers}-layer {shape} cross-encoder)", "source",
                     _checked(source, "the cross-encoder", attn), bert_cost, _mean))
    rows.append(Row(f"DE-2 (from a {layers}-layer {shape} cross-encoder)", "infused",
                     _checked(de2, "DE-2", attn), lambda length: infused_macs(de2.config, length), _pooler))
    return rows + compiled_rows(rows) if compile else rows


def compiled_rows(rows: list[Row]) -> list[Row]:
    """Every Condenser, TITE and DE-2 row of ``rows`` once more as ``torch.compile(model)`` (what a user calls:
    inductor, default dynamic shapes), named ``"<name> (torch.compile)"``; TITE rows replaying CUDA graphs are left
    out (a compiled TITE runs its padded path, without them). A compiled row is warmed up on every batch shape
    (``timing.warm_up``); its report entries carry ``ratio_to_eager`` (its texts/s / the eager row's, the same
    rounds) and ``paired_ratio_to_eager``. A compiled row computes on every padded position (``Row.unpadded`` is
    False: a compiled TITE runs its padded path)."""
    return [Row(f"{row.name} (torch.compile)", "compiled", torch.compile(row.model), row.macs, row.encode,
                compiled_of=row.name)
            for row in rows if row.kind in ("condenser", "tite", "infused")
            and not getattr(row.model.config, "cuda_graphs", False)]


def check_attention(attn: str, device: torch.device, dtype: str) -> None:
    if attn not in ATTENTION_CHOICES:
        raise ValueError(f"attn={attn!r}: choose one of {', '.join(ATTENTION_CHOICES)}")
    if attn != "flash_attention_2":
        return
    if device.type != "cuda":
        raise ValueError("attn='flash_attention_2' runs on CUDA only; use --device cuda, or --attn sdpa on CPU")
    if importlib.util.find_spec("flash_attn") is None:
        raise ValueError(
            "attn='flash_attention_2' needs the flash-attn package, which is not importable here "
            "(pip install 'dense-encoders[flash]', built for this torch and GPU); or use --attn sdpa"
        )
    if not is_flash_attn_2_available():
        raise ValueError(
            "flash-attn is installed but transformers cannot use it here (is_flash_attn_2_available() is False: "
            "wrong version, or this GPU is not supported); use --attn sdpa"
        )
    if dtype != "bf16":
        raise ValueError("attn='flash_attention_2' computes in bf16/fp16 only; use --weights-dtype bf16 (the CUDA "
                         "default) or --autocast")
