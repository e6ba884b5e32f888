"""Distillation and contrastive losses for fine-tuning dual-encoders (re-rankers' scores as teacher).

One loss per file, each a :class:`~.base.DistillationLoss` subclass with its functional form on score
tensors (see :mod:`.base` for the shapes every loss reads and returns):

* ``mse`` (:mod:`.mse`): logit matching, Sec. 2 of "In Defense of Dual-Encoders for Neural Ranking"
  (Menon, Jayasumana, Rawat, Kim, Reddi, Kumar; ICML 2022);
* ``margin_mse`` (:mod:`.margin_mse`): Margin-MSE, Eq. 3 of Menon et al. and "Improving Efficient Neural
  Ranking Models with Cross-Architecture Knowledge Distillation" (Hofstätter et al., 2020), over all pairs;
* ``m3se`` (:mod:`.m3se`): multi-margin MSE, Eq. 4 of Menon et al.;
* ``sce`` (:mod:`.softmax_cross_entropy`): softmax cross-entropy with temperature, Eq. 1 of Menon et al.
  (Proposition 3: it approaches Margin-MSE at high temperature);
* ``kl`` (:mod:`.kl_divergence`): KL divergence, Sec. 3.4 of "TITE: Token-Independent Text Encoder for
  Information Retrieval" (Schlatt, Hagen, Potthast, Hagen; SIGIR 2025);
* ``rankdistil_b`` (:mod:`.rankdistil_b`): binary RankDistil, Sec. 4.3 of Menon et al.;
* ``infonce`` (:mod:`.infonce`): InfoNCE with in-batch and in-sample negatives (at least ``theta`` below
  the positive's teacher score), TITE Sec. 3.4.

:class:`DistillationObjective` sums the weighted losses of a spec such as ``"margin_mse+kl+infonce"``
(:func:`parse_loss_spec`); :mod:`.registry` lists the losses a spec may name.
"""

from .base import DistillationLoss, LossSetting, ScoreBatch
from .infonce import InfoNCELoss, infonce_loss
from .kl_divergence import KLDivergenceLoss, kl_divergence_loss
from .m3se import M3SELoss, m3se_loss
from .margin_mse import MarginMSELoss, margin_mse_loss
from .mse import MSELoss, mse_loss
from .objective import DistillationObjective, parse_loss_spec
from .rankdistil_b import RankDistilBLoss, rankdistil_b_loss
from .registry import LOSS_CLASSES, LOSSES, LossSettings, positive_set_loss_names
from .softmax_cross_entropy import SoftmaxCrossEntropyLoss, softmax_cross_entropy_loss

__all__ = [
    "LOSSES",
    "LOSS_CLASSES",
    "DistillationLoss",
    "DistillationObjective",
    "InfoNCELoss",
    "KLDivergenceLoss",
    "LossSetting",
    "LossSettings",
    "M3SELoss",
    "MSELoss",
    "MarginMSELoss",
    "RankDistilBLoss",
    "ScoreBatch",
    "SoftmaxCrossEntropyLoss",
    "infonce_loss",
    "kl_divergence_loss",
    "m3se_loss",
    "margin_mse_loss",
    "mse_loss",
    "parse_loss_spec",
    "positive_set_loss_names",
    "rankdistil_b_loss",
    "softmax_cross_entropy_loss",
]
