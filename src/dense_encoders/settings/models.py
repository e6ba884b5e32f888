"""The setting every entry point that loads a model shares: ``--trust-remote-code``, the consent to run code that a
model folder or Hub repository carries or names (:mod:`dense_encoders.checkpoints.trust`)."""

from __future__ import annotations

from dataclasses import field

TRUST_REMOTE_CODE_HELP = (
    "Run code that a model folder or Hub repository carries or names (auto_map in its config.json, custom "
    "sentence-transformers modules): only for checkpoints you trust. Without it such a model is refused. Our own "
    "families (Condenser, TITE, infused) need no flag.")


def trust_remote_code_field():
    """The ``trust_remote_code`` field (``--trust-remote-code``) of an entry point's dataclass: off."""
    return field(default=False, metadata={"help": TRUST_REMOTE_CODE_HELP})


__all__ = ["TRUST_REMOTE_CODE_HELP", "trust_remote_code_field"]
