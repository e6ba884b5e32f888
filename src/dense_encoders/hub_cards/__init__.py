"""Model cards generated from what a checkpoint folder records (config, trainer state, results), never typed by hand."""

from .cards import CE_EMBEDDINGS_BIBTEX, DISTILLATION_BIBTEX, TITE_BIBTEX, model_card
from .condenser import COCONDENSER_BIBTEX, CONDENSER_BIBTEX, condenser_description, condenser_model_card

__all__ = [
    "CE_EMBEDDINGS_BIBTEX",
    "COCONDENSER_BIBTEX",
    "CONDENSER_BIBTEX",
    "DISTILLATION_BIBTEX",
    "TITE_BIBTEX",
    "condenser_description",
    "condenser_model_card",
    "model_card",
]
