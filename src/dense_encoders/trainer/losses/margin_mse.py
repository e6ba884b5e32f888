"""Margin-MSE over all pairs of a query's documents.

"Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation" (Hofstätter,
Althammer, Schröder, Sertkan, Hanbury; 2020); Eq. 3 of "In Defense of Dual-Encoders for Neural Ranking"
(Menon et al., ICML 2022); over all pairs as in Sec. 3.4 of "TITE: Token-Independent Text Encoder for
Information Retrieval" (Schlatt, Hagen, Potthast, Hagen; SIGIR 2025).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import DistillationLoss, validate


def margin_mse_loss(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Margin-MSE (Menon et al. 2022, Eq. 3; Hofstätter et al. 2020) over ALL pairs i < j of real documents.

    ``mean_{i<j} ((t_i - t_j) - (s_i - s_j))^2`` (the TITE Sec. 3.4 form; for two documents exactly
    Eq. 3). Needs at least 2 real documents per query.
    """
    s, t, mask = validate("margin_mse", student, teacher, mask, min_docs=MarginMSELoss.min_documents)
    d = s - t  # ((t_i - t_j) - (s_i - s_j)) == d_j - d_i
    diff = d.unsqueeze(2) - d.unsqueeze(1)  # [Q, K, K]
    k = mask.shape[1]
    upper = torch.ones(k, k, dtype=torch.bool, device=mask.device).triu(diagonal=1)
    pairs = mask.unsqueeze(2) & mask.unsqueeze(1) & upper
    total = torch.where(pairs, diff**2, 0.0).sum(dim=(1, 2))
    return total / pairs.sum(dim=(1, 2)).to(total.dtype)


class MarginMSELoss(DistillationLoss):
    """:func:`margin_mse_loss` as a loss of a :class:`DistillationObjective`."""

    function = staticmethod(margin_mse_loss)
    name = "margin_mse"
    display_name = "Margin-MSE"
    citation = ("Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation "
                "(Hofstätter et al., 2020); In Defense of Dual-Encoders for Neural Ranking (Menon et al., ICML 2022), "
                "Eq. 3; TITE (Schlatt et al., SIGIR 2025), Sec. 3.4")
    equation = "mean_{i<j} ((t_i - t_j) - (s_i - s_j))^2"
    min_documents = 2
