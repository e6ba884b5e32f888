"""What ``dense-encoders convert`` (:func:`dense_encoders.checkpoints.convert_checkpoint`) takes besides the source
and output folders (its positional arguments): :class:`ConversionSettings`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .values import check_fields, positive_integer_problem


@dataclass
class ConversionSettings:
    """How a checkpoint folder another implementation wrote is converted."""

    skip_from: int | None = field(default=None, metadata={
        "help": "condenser-reference folders with a head (model.pt): the backbone layer whose token states feed the "
        "head, the output of layer N (hidden_states[N]). Default: half the backbone's depth (6 of BERT-base's 12, as "
        "in the paper); give the run's own value if it trained with another. Refused for a folder without a head."})
    overwrite: bool = field(default=False, metadata={
        "help": "Replace an output folder that an earlier conversion wrote (it holds conversion.json); any other "
        "non-empty folder, the current directory, the home folder and a filesystem root are refused."})

    def __post_init__(self):
        check_fields(self, positive_integer_problem, ("skip_from",))


__all__ = ["ConversionSettings"]
