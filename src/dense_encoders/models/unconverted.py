"""Config classes for folders that another implementation wrote and that load only once converted.

A Lightning IR bi-encoder folder (``model_type`` ``"lir-dpr"``, ``"bi-encoder"`` in older releases) holds a
backbone and a projection under Lightning IR's own classes, which need Lightning IR. Registered with
``AutoConfig`` by ``import dense_encoders`` (only where no other class claims the model type, e.g. Lightning IR's
own), these classes make ``AutoConfig`` / ``AutoModel`` / ``SentenceTransformer`` on such a folder stop with one
line naming ``dense-encoders convert``, instead of transformers' "does not recognize this architecture".
"""

from __future__ import annotations

from transformers import PretrainedConfig


def refuse_unconverted(config_class: type, kwargs: dict) -> None:
    """The one-line refusal for a folder of ``config_class``'s model type (``kwargs``: what ``from_dict`` passes,
    with ``name_or_path`` the folder)."""
    folder = kwargs.get("name_or_path") or "FOLDER"
    raise ValueError(
        f"{folder} is {config_class.origin} (model_type {config_class.model_type!r}), which transformers and "
        f"sentence-transformers cannot load as it is: convert it once with `dense-encoders convert {folder} OUT` and "
        "load OUT."
    )


# each class defines __init__ itself: transformers turns config subclasses into dataclasses and would otherwise
# generate one that builds the config


class LightningIRDprConfig(PretrainedConfig):
    """A Lightning IR DPR folder: loading it as it is is refused (convert it first)."""

    model_type = "lir-dpr"
    origin = "a Lightning IR bi-encoder"

    def __init__(self, **kwargs):
        refuse_unconverted(type(self), kwargs)


class LightningIRBiEncoderConfig(PretrainedConfig):
    """A bi-encoder folder of Lightning IR's older releases: loading it as it is is refused (convert it first)."""

    model_type = "bi-encoder"
    origin = "a Lightning IR bi-encoder"

    def __init__(self, **kwargs):
        refuse_unconverted(type(self), kwargs)


UNCONVERTED_CONFIGS = (LightningIRDprConfig, LightningIRBiEncoderConfig)

__all__ = ["UNCONVERTED_CONFIGS", "LightningIRBiEncoderConfig", "LightningIRDprConfig", "refuse_unconverted"]
