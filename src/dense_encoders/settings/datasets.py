"""The setting every entry point that takes a dataset shares: ``--dataset-revision``, the revision of a dataset named
by Hub id (:mod:`dense_encoders.data.hub_datasets`). Spelt with ``dataset`` because the model arguments of these
commands are Hub ids too, and their revision is not this one."""

from __future__ import annotations

from dataclasses import field

DATASET_REVISION_FLAG = "--dataset-revision"
DATASET_REVISION_HELP = (
    "Revision of a dataset given by Hub id (BeIR/scifact, mteb/scifact): a branch, tag or commit of the dataset's "
    "repository (default: main; BEIR's companion <id>-qrels is read at its main). The commit read is recorded. Not "
    "for local paths, which always win over a Hub id of the same spelling.")


def dataset_revision_field():
    """The ``dataset_revision`` field (``--dataset-revision``) of an entry point's dataclass."""
    return field(default=None, metadata={"metavar": "REV", "help": DATASET_REVISION_HELP})


__all__ = ["DATASET_REVISION_FLAG", "DATASET_REVISION_HELP", "dataset_revision_field"]
