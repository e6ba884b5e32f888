"""The setting every entry point that takes a dataset shares: ``--revision``, the revision of a dataset named by
Hub id (:mod:`dense_encoders.data.hub_datasets`)."""

from __future__ import annotations

from dataclasses import field

DATASET_REVISION_FLAGS = ("--revision", "--dataset-revision")
DATASET_REVISION_HELP = (
    "Revision of a dataset given by Hub id (BeIR/scifact, mteb/scifact): a branch, tag or commit of its repository "
    "(default: main; a BEIR dataset's companion <id>-qrels is read at its main). The commit read is recorded. Not "
    "for local folders, which always win over a Hub id of the same name.")


def dataset_revision_field():
    """The ``dataset_revision`` field (``--revision`` / ``--dataset-revision``) of an entry point's dataclass."""
    return field(default=None, metadata={"aliases": ["--revision"], "metavar": "REV", "help": DATASET_REVISION_HELP})


__all__ = ["DATASET_REVISION_FLAGS", "DATASET_REVISION_HELP", "dataset_revision_field"]
