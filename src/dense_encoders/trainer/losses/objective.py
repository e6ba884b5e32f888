"""A loss spec such as ``"margin_mse:1 + kl:0.5 + infonce"`` and the weighted sum it builds."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .base import DistillationLoss, ScoreBatch
from .registry import LOSS_CLASSES

__all__ = ["DistillationObjective", "parse_loss_spec"]

_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$")


def _parse_weight(name: str, weight_text: str | None, spec: str) -> float:
    if weight_text is None:
        return 1.0
    try:
        weight = float(weight_text)
    except ValueError:
        raise ValueError(f"bad weight {weight_text!r} for loss {name!r} in spec {spec!r}") from None
    if not math.isfinite(weight) or weight < 0:
        raise ValueError(f"weight for loss {name!r} must be a finite number > 0, got {weight_text!r}")
    if weight == 0:  # it would train nothing, silently
        raise ValueError(f"weight for loss {name!r} must be a finite number > 0, got {weight_text!r}: a zero weight "
                         f"trains nothing; drop {name!r} from the spec instead")
    return weight


def parse_loss_spec(spec: str) -> dict[str, float]:
    """Parse ``"margin_mse+kl+infonce"`` or ``"margin_mse:1 + kl:0.5 + infonce:2"``.

    Returns ``{name: weight}`` in the spec's order; a missing weight is 1. Raises ValueError on an
    empty spec or term, an unknown or duplicate name, or a weight that is not a finite number
    > 0 (a zero weight would silently train nothing).
    """
    known = ", ".join(LOSS_CLASSES)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty loss spec {spec!r}; known losses: {known}")
    out: dict[str, float] = {}
    for raw in spec.split("+"):
        term = re.sub(r"\s+", "", raw)
        if not term:
            raise ValueError(f"empty term in loss spec {spec!r}")
        match = _TERM.match(term)
        if match is None:
            raise ValueError(f"cannot parse term {raw.strip()!r} of loss spec {spec!r}")
        name = match.group(1).lower()
        if name not in LOSS_CLASSES:
            raise ValueError(f"unknown loss {name!r} in spec {spec!r}; known losses: {known}")
        if name in out:
            raise ValueError(f"loss {name!r} appears twice in spec {spec!r}")
        out[name] = _parse_weight(name, match.group(2), spec)
    return out


def _options(weights: Mapping[str, float], loss_kwargs: Mapping[str, Mapping[str, Any]] | None,
             settings: Any) -> dict[str, dict[str, Any]]:
    """Constructor keywords of each configured loss: its ``LossSetting`` fields of ``settings`` (if given),
    then ``loss_kwargs``; names and keywords are checked."""
    options = {name: {s.option: getattr(settings, s.flag) for s in LOSS_CLASSES[name].settings}
               if settings is not None else {} for name in weights}
    for name, kwargs in dict(loss_kwargs or {}).items():
        if name not in weights:
            raise ValueError(f"loss_kwargs given for {name!r}, which is not in the spec ({', '.join(weights)})")
        allowed = list(LOSS_CLASSES[name].option_defaults())
        for key in kwargs:
            if key not in allowed:
                raise ValueError(f"{name!r} has no option {key!r}; options: {', '.join(allowed) or 'none'}")
        options[name].update(kwargs)
    return options


class DistillationObjective(torch.nn.Module):
    """Weighted sum of losses, built from a spec such as ``"margin_mse+kl:0.5"`` (or ``{name: weight}``).

    ``loss_kwargs`` maps a configured loss name to keyword options of its class, e.g.
    ``{"sce": {"temperature": 4}, "infonce": {"theta": 3}}``; ``settings``, an object with the
    registered losses' setting fields (a ``DistillationSetup``), supplies them first. ``min_documents``
    (the most any configured loss needs) lets a data pipeline drop queries with too few documents.
    """

    def __init__(
        self,
        spec: str | Mapping[str, float],
        loss_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        settings: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(spec, str):
            spec = "+".join(f"{n}:{float(w)!r}" for n, w in dict(spec).items())
        self.weights: dict[str, float] = parse_loss_spec(spec)
        options = _options(self.weights, loss_kwargs, settings)
        self.losses = torch.nn.ModuleDict({name: LOSS_CLASSES[name](**options[name]) for name in self.weights})
        self.min_documents: int = max(loss.min_documents for loss in self.losses.values())

    @property
    def needs_batch_scores(self) -> bool:
        """Whether a configured loss reads the scores against the global batch (``batch_scores``)."""
        return any(loss.needs_batch_scores for loss in self.losses.values())

    @property
    def positive_set_losses(self) -> list[str]:
        """The configured losses that read the judged positive set P."""
        return [name for name, loss in self.losses.items() if loss.uses_positives]

    def describe(self) -> list[dict[str, Any]]:
        """Each configured loss as the model card shows it: name, weight, display name, options, equation, paper."""
        return [{**loss.describe(), "weight": self.weights[name]} for name, loss in self.losses.items()]

    def forward(
        self,
        student: Tensor,
        teacher: Tensor,
        mask: Tensor,
        *,
        batch_scores: Tensor | None = None,
        global_mask: Tensor | None = None,
        query_offset: int = 0,
        positives: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Return ``(total [Q], {name: per-query loss [Q]})``, total = sum of weight * loss.

        ``batch_scores``: ``[Q, G*K]`` scores of the local queries against the global batch (see
        :class:`~dense_encoders.trainer.losses.base.ScoreBatch`), needed by the losses that say so.
        ``positives`` goes to the losses that read a positive set.
        """
        batch = ScoreBatch(student, teacher, mask, batch_scores, global_mask, query_offset, positives)
        components: dict[str, Tensor] = {}
        for name, loss in self.losses.items():
            components[name] = self._component(loss, batch)
        total = None
        for name, value in components.items():
            term = value * self.weights[name]
            total = term if total is None else total + term
        assert total is not None  # parse_loss_spec rejects an empty spec
        return total, components

    @staticmethod
    def _component(loss: DistillationLoss, batch: ScoreBatch) -> Tensor:
        if loss.needs_batch_scores and batch.batch_scores is None:
            raise ValueError(
                f"the {loss.name} loss needs batch_scores [Q, G*K] (the local queries' scores "
                "against every document of the global batch)"
            )
        return loss(batch)

    def extra_repr(self) -> str:
        return " + ".join(f"{w:g}*{n}" for n, w in self.weights.items())
