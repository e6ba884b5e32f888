"""What ``dense-encoders bench`` (:func:`dense_encoders.benchmarking.efficiency_report`) takes: its choices, the
workload sizes of a full and of a ``--quick`` run, and the TITE presets it runs by default."""

from __future__ import annotations

from collections.abc import Mapping

from ..models.tite.presets import TITE_PRESETS

ATTENTION_CHOICES = ("sdpa", "eager", "flash_attention_2")
DTYPE_CHOICES = ("fp32", "bf16")
MAX_LENGTH = 512  # the longest document of the length mixture (benchmarking.workloads), in tokens

# `dense-encoders bench --quick`: tiny random models (the tiny-* TITE presets, a 4 x 32 BERT) at 16 tokens
QUICK_SETTINGS = dict(num_queries=8, query_batch=8, num_docs=8, doc_batch=4, rounds=1, warmup=1,
                      max_length=16, query_length=8)
DEFAULT_SIZES = dict(num_queries=128, query_batch=64, num_docs=64, doc_batch=16, rounds=3)


def default_presets(max_length: int = MAX_LENGTH) -> list[str]:
    """Every preset of ``TITE_PRESETS`` whose pooling schedule reaches one vector at ``max_length``."""
    return [name for name, settings in TITE_PRESETS.items() if _reaches(settings, max_length)]


def _reaches(settings: Mapping, max_length: int) -> bool:
    pools = any(kernel is not None for kernel in (settings.get("kernel_sizes") or []))
    return not pools or settings.get("max_position_embeddings", 512) >= max_length


__all__ = ["ATTENTION_CHOICES", "DEFAULT_SIZES", "DTYPE_CHOICES", "MAX_LENGTH", "QUICK_SETTINGS", "default_presets"]
