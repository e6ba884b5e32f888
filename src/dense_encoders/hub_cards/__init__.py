"""Model cards generated from what a checkpoint folder records (config, trainer state), never typed by hand."""

from .condenser import COCONDENSER_BIBTEX, CONDENSER_BIBTEX, condenser_model_card

__all__ = ["condenser_model_card", "CONDENSER_BIBTEX", "COCONDENSER_BIBTEX"]
