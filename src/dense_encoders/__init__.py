"""dense-encoders: efficient dense retrieval encoders as Hugging Face Transformers models.

Importing the package registers every model family with the Auto classes, so
``AutoModel.from_pretrained(folder)`` works without ``trust_remote_code`` once
``dense_encoders`` is imported; folders saved by our models also load with
``trust_remote_code=True`` where the package is not installed.

One process defers the registration: the ``dense-encoders`` command (:func:`_is_the_command`), which registers
before it runs a subcommand that loads a model (``dense_encoders.cli``); its help (``dense-encoders [SUBCOMMAND]
--help``, :func:`_prints_only_help`) and ``search`` / ``index`` over embedding shards load none, and registering
imports transformers' models, seconds of CPU that they do not need. There the model classes below are imported,
and the Auto classes registered, on first access.
"""

import sys
from pathlib import Path

__version__ = "0.1.0"

_MODEL_CLASSES = (
    "CondenserConfig",
    "CondenserModel",
    "CondenserForPreTraining",
    "CoCondenserForPreTraining",
    "TiteConfig",
    "TiteModel",
    "TiteForPreTraining",
    "InfusedDualEncoderConfig",
    "InfusedDualEncoderModel",
)


def _register_auto_classes() -> None:
    """Register every model family with transformers' Auto classes (and bind the model classes here)."""
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModel, AutoModelForPreTraining

    from .models import CoCondenserForPreTraining, CondenserConfig, CondenserForPreTraining, CondenserModel
    from .models.infused import InfusedDualEncoderConfig, InfusedDualEncoderModel
    from .models.tite import TiteConfig, TiteForPreTraining, TiteModel
    from .models.unconverted import UNCONVERTED_CONFIGS

    AutoConfig.register(CondenserConfig.model_type, CondenserConfig, exist_ok=True)
    AutoModel.register(CondenserConfig, CondenserModel, exist_ok=True)
    AutoModelForPreTraining.register(CondenserConfig, CondenserForPreTraining, exist_ok=True)
    AutoConfig.register(TiteConfig.model_type, TiteConfig, exist_ok=True)
    AutoModel.register(TiteConfig, TiteModel, exist_ok=True)
    AutoModelForPreTraining.register(TiteConfig, TiteForPreTraining, exist_ok=True)
    AutoConfig.register(InfusedDualEncoderConfig.model_type, InfusedDualEncoderConfig, exist_ok=True)
    AutoModel.register(InfusedDualEncoderConfig, InfusedDualEncoderModel, exist_ok=True)
    # folders that load only once converted (Lightning IR's model types): one line naming `dense-encoders convert`;
    # a class already registered for the type (Lightning IR's own, where it is installed) is left in place
    for config in UNCONVERTED_CONFIGS:
        if config.model_type not in CONFIG_MAPPING:
            AutoConfig.register(config.model_type, config)
    classes = (CondenserConfig, CondenserModel, CondenserForPreTraining, CoCondenserForPreTraining, TiteConfig,
               TiteModel, TiteForPreTraining, InfusedDualEncoderConfig, InfusedDualEncoderModel)
    globals().update({cls.__name__: cls for cls in classes})


def _is_the_command(argv: list[str], orig_argv: list[str]) -> bool:
    """Whether this process is the ``dense-encoders`` command: its console script, or ``python -m
    dense_encoders.cli``. ``argv`` / ``orig_argv`` are ``sys.argv`` / ``sys.orig_argv`` while this package is
    imported: under ``-m``, ``argv[0]`` is ``"-m"`` then, and the module's name precedes the arguments in
    ``orig_argv``."""
    if not argv:
        return False
    arguments = argv[1:]
    if argv[0] == "-m":
        module = orig_argv[-len(arguments) - 1] if len(orig_argv) > len(arguments) else ""
        return module.removeprefix("-m") == "dense_encoders.cli"
    return Path(argv[0]).stem == "dense-encoders"


def _prints_only_help(argv: list[str], orig_argv: list[str]) -> bool:
    """Whether this process is the ``dense-encoders`` command (:func:`_is_the_command`) asked only for help: no
    arguments, or ``-h`` / ``--help`` before any ``--`` (argparse then prints help and exits, whatever else is
    given)."""
    if not _is_the_command(argv, orig_argv):
        return False
    arguments = argv[1:]
    arguments = arguments[: arguments.index("--")] if "--" in arguments else arguments
    return not arguments or "-h" in arguments or "--help" in arguments


def __getattr__(name: str):
    if name in _MODEL_CLASSES:  # only reached where help was all that was asked for
        _register_auto_classes()
        return globals()[name]
    if name == "from_backbone":  # the warm start of every family (checkpoints/backbones.py), imported on first use
        from .checkpoints.backbones import from_backbone

        return from_backbone
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not _is_the_command(sys.argv, getattr(sys, "orig_argv", [])):
    _register_auto_classes()

__all__ = ["__version__", "from_backbone", *_MODEL_CLASSES]
