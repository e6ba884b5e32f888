"""Named TITE configurations: every variant of the paper's Table 3, each also at a tiny size for tests.

Package-side (not shipped as remote code): the saved ``config.json`` holds the resolved values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .configuration_tite import TiteConfig

K2_LATE = [None] * 3 + [2] * 9  # 512 -> 1 in the last nine layers
K2_STAGGERED = [None, 2, 2, 2] * 3  # layers 2-4, 6-8, 10-12 pool
K3_LATE = [None] * 6 + [3] * 6  # 512 -> 171 -> 57 -> 19 -> 7 -> 3 -> 1
K3_STAGGERED = [None, 3] * 6  # every second layer pools

# TITE Sec. 4.1: BERT-base shape; no dropout inside self-attention (it made pre-training unstable)
NO_ATTENTION_DROPOUT = dict(attention_probs_dropout_prob=0.0)
BERT_BASE = dict(num_hidden_layers=12, hidden_sizes=768, num_attention_heads=12, intermediate_sizes=3072,
                 max_position_embeddings=512, **NO_ATTENTION_DROPOUT)
# upscaled model (paper Sec. 3.2, variant 7): widths 768 -> 1536 in steps of a third every three layers
UPSCALE = dict(
    num_hidden_layers=12,
    hidden_sizes=[768] * 3 + [1024] * 3 + [1280] * 3 + [1536] * 3,
    num_attention_heads=[12] * 3 + [16] * 3 + [20] * 3 + [24] * 3,
    intermediate_sizes=[3072] * 3 + [4096] * 3 + [5120] * 3 + [6144] * 3,
    max_position_embeddings=512,
    **NO_ATTENTION_DROPOUT,
)

TITE_PRESETS: dict[str, dict] = {
    # Table 3: (1) default, (2)-(4) severity x arrangement, (5)/(6) pooling location, (7) upscaled
    "tite-2-late": dict(BERT_BASE, kernel_sizes=K2_LATE, pooling_location="intra"),
    "tite-2-staggered": dict(BERT_BASE, kernel_sizes=K2_STAGGERED, pooling_location="intra"),
    "tite-3-late": dict(BERT_BASE, kernel_sizes=K3_LATE, pooling_location="intra"),
    "tite-3-staggered": dict(BERT_BASE, kernel_sizes=K3_STAGGERED, pooling_location="intra"),
    "tite-2-late-pre": dict(BERT_BASE, kernel_sizes=K2_LATE, pooling_location="pre"),
    "tite-2-late-post": dict(BERT_BASE, kernel_sizes=K2_LATE, pooling_location="post"),
    "tite-2-late-upscale": dict(UPSCALE, kernel_sizes=K2_LATE, pooling_location="intra"),
    # TITE without pooling: a BERT-shaped rotary encoder (the paper's "TITE without pooling" baseline)
    "tite-no-pooling": dict(BERT_BASE, kernel_sizes=None),
    # warm start from 6-layer BERT-family encoders (e.g. all-MiniLM-L6-v2) at 256 tokens:
    # k=s=3 in all six layers, 256 -> 86 -> 29 -> 10 -> 4 -> 2 -> 1
    # (absolute positions and token types as in the backbone, so the copied layers see what they were trained on)
    "minilm-l6-3-all": dict(NO_ATTENTION_DROPOUT, num_hidden_layers=6, hidden_sizes=384, num_attention_heads=12,
                            intermediate_sizes=1536,
                            max_position_embeddings=256, kernel_sizes=[3] * 6, pooling_location="intra",
                            position_embedding_type="absolute", type_vocab_size=2),
    # warm starts keep more of the backbone: two unpooled layers, then k = s = 4 (256 -> 64 -> 16 -> 4 -> 1)
    "minilm-l6-4-late": dict(NO_ATTENTION_DROPOUT, num_hidden_layers=6, hidden_sizes=384, num_attention_heads=12,
                             intermediate_sizes=1536,
                             max_position_embeddings=256, kernel_sizes=[None, None, 4, 4, 4, 4],
                             pooling_location="intra", position_embedding_type="absolute", type_vocab_size=2),
}

_TINY_WIDTH = dict(hidden_sizes=32, num_attention_heads=4, intermediate_sizes=64, **NO_ATTENTION_DROPOUT)
TINY_PRESETS: dict[str, dict] = {
    # same arrangements at 16 (k=2) or 27 (k=3) positions, widths 32
    "tiny-tite-2-late": dict(_TINY_WIDTH, num_hidden_layers=5, max_position_embeddings=16,
                             kernel_sizes=[None, 2, 2, 2, 2], pooling_location="intra"),
    "tiny-tite-2-staggered": dict(_TINY_WIDTH, num_hidden_layers=6, max_position_embeddings=16,
                                  kernel_sizes=[None, 2, 2, None, 2, 2], pooling_location="intra"),
    "tiny-tite-3-late": dict(_TINY_WIDTH, num_hidden_layers=4, max_position_embeddings=27,
                             kernel_sizes=[None, 3, 3, 3], pooling_location="intra"),
    "tiny-tite-3-staggered": dict(_TINY_WIDTH, num_hidden_layers=6, max_position_embeddings=27,
                                  kernel_sizes=[None, 3, None, 3, None, 3], pooling_location="intra"),
    "tiny-tite-2-late-pre": dict(_TINY_WIDTH, num_hidden_layers=5, max_position_embeddings=16,
                                 kernel_sizes=[None, 2, 2, 2, 2], pooling_location="pre"),
    "tiny-tite-2-late-post": dict(_TINY_WIDTH, num_hidden_layers=5, max_position_embeddings=16,
                                  kernel_sizes=[None, 2, 2, 2, 2], pooling_location="post"),
    "tiny-tite-2-late-upscale": dict(
        NO_ATTENTION_DROPOUT, num_hidden_layers=6, max_position_embeddings=16, kernel_sizes=[None, None, 2, 2, 2, 2],
        hidden_sizes=[32, 32, 48, 48, 64, 64], num_attention_heads=[4, 4, 6, 6, 8, 8],
        intermediate_sizes=[64, 64, 96, 96, 128, 128], pooling_location="intra",
    ),
    "tiny-tite-no-pooling": dict(_TINY_WIDTH, num_hidden_layers=2, max_position_embeddings=16, kernel_sizes=None),
}


def tite_preset(name: str, **overrides) -> TiteConfig:
    """A :class:`TiteConfig` from a named preset (see ``TITE_PRESETS`` / ``TINY_PRESETS``) plus overrides."""
    presets = {**TITE_PRESETS, **TINY_PRESETS}
    if name not in presets:
        raise ValueError(f"Unknown TITE preset {name!r}; choose one of {sorted(presets)}.")
    from .configuration_tite import TiteConfig  # imports transformers and torch: the tables above do not

    return TiteConfig(**{**presets[name], **overrides})


__all__ = ["TITE_PRESETS", "TINY_PRESETS", "tite_preset"]
