"""dense-encoders: efficient dense retrieval encoders as Hugging Face Transformers models.

Importing the package registers every model family with the Auto classes, so
``AutoModel.from_pretrained(folder)`` works without ``trust_remote_code`` once
``dense_encoders`` is imported; folders saved by our models also load with
``trust_remote_code=True`` where the package is not installed.
"""

from transformers import CONFIG_MAPPING, AutoConfig, AutoModel, AutoModelForPreTraining

from .models import CoCondenserForPreTraining, CondenserConfig, CondenserForPreTraining, CondenserModel
from .models.infused import InfusedDualEncoderConfig, InfusedDualEncoderModel
from .models.tite import TiteConfig, TiteForPreTraining, TiteModel
from .models.unconverted import UNCONVERTED_CONFIGS

__version__ = "0.1.0"

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
for _config in UNCONVERTED_CONFIGS:
    if _config.model_type not in CONFIG_MAPPING:
        AutoConfig.register(_config.model_type, _config)

__all__ = [
    "__version__",
    "CondenserConfig",
    "CondenserModel",
    "CondenserForPreTraining",
    "CoCondenserForPreTraining",
    "TiteConfig",
    "TiteModel",
    "TiteForPreTraining",
    "InfusedDualEncoderConfig",
    "InfusedDualEncoderModel",
]
