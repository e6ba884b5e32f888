"""Named Condenser configurations (package-side; not part of the remote code)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .configuration_condenser import CondenserConfig

# Paper recipe: BERT-base, 6 early + 6 late layers (skip_from=6), 2 head layers, late MLM on.
CONDENSER_PRESETS: dict[str, dict] = {
    "bert-base": dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=512, skip_from=6, n_head_layers=2,
    ),
    "small": dict(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
        max_position_embeddings=512, skip_from=2, n_head_layers=2,
    ),
    # for tests and the offline quickstart: seconds per step on 2 CPU cores
    "tiny": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=256, skip_from=2, n_head_layers=2,
    ),
}


def condenser_preset(name: str, **overrides) -> CondenserConfig:
    """A :class:`CondenserConfig` from a named preset (``bert-base``, ``small``, ``tiny``) plus overrides."""
    if name not in CONDENSER_PRESETS:
        raise ValueError(f"Unknown Condenser preset {name!r}; choose one of {sorted(CONDENSER_PRESETS)}.")
    from .configuration_condenser import CondenserConfig  # imports transformers and torch: the table does not

    return CondenserConfig(**{**CONDENSER_PRESETS[name], **overrides})
