"""The settings every entry point that takes a dataset shares: ``--dataset-revision``, the revision of a dataset named
by Hub id (:mod:`dense_encoders.data.hub_datasets`; spelt with ``dataset`` because the model arguments of these
commands are Hub ids too, and their revision is not this one), and ``--pair-threshold`` / ``--pair-scale``, how a
graded pairs file (sentence1, sentence2, score) becomes a retrieval task."""

from __future__ import annotations

from dataclasses import field

DATASET_REVISION_HELP = (
    "Revision of a dataset given by Hub id (BeIR/scifact, mteb/scifact): a branch, tag or commit of the dataset's "
    "repository (default: main; BEIR's companion <id>-qrels is read at its main). The commit read is recorded. Not "
    "for local paths, which always win over a Hub id of the same spelling.")


PAIRS_PAPER = "Can Cross Encoders Produce Useful Sentence Embeddings?"
PAIR_THRESHOLD_HELP = (
    "Graded pair files (sentence1, sentence2, score; e.g. STSB): a pair is relevant when its score >= FRACTION x the "
    f"scale, as STSB is searched at 0.5 in {PAIRS_PAPER} (default: 0.5, i.e. 2.5 on a 0-5 scale).")
PAIR_SCALE_HELP = (
    "Largest possible score of a graded pair file: 1 or 5 (STSB) (default: inferred from the scores: 1 when all are "
    "within [0, 1], else 5).")


def dataset_revision_field():
    """The ``dataset_revision`` field (``--dataset-revision``) of an entry point's dataclass."""
    return field(default=None, metadata={"metavar": "REV", "help": DATASET_REVISION_HELP})


def pair_threshold_field():
    """The ``pair_threshold`` field (``--pair-threshold FRACTION``): None (0.5) unless given, so that other data can
    refuse it; checked by :func:`~.values.pair_threshold_problem`."""
    return field(default=None, metadata={"metavar": "FRACTION", "help": PAIR_THRESHOLD_HELP})


def pair_scale_field():
    """The ``pair_scale`` field (``--pair-scale MAX``): None (inferred) unless given; checked by
    :func:`~.values.pair_scale_problem`."""
    return field(default=None, metadata={"metavar": "MAX", "help": PAIR_SCALE_HELP})


def whole_scale(scale: float | None) -> float | int | None:
    """A ``pair_scale`` as the records keep it: 5, not 5.0."""
    return int(scale) if scale is not None and float(scale).is_integer() else scale


__all__ = ["DATASET_REVISION_HELP", "PAIRS_PAPER", "PAIR_SCALE_HELP", "PAIR_THRESHOLD_HELP",
           "dataset_revision_field", "pair_scale_field", "pair_threshold_field", "whole_scale"]
