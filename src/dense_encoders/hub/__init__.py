"""Publishing checkpoint folders on the Hugging Face Hub.

* :mod:`.card_data`: what a model card says, filled from a folder's records; :mod:`.cards` renders it
  (:mod:`.condenser_card`: the Condenser / coCondenser paragraphs);
* :mod:`.push`: one-commit uploads (``dense-encoders push``); :mod:`.trainer_push`: the Trainer mixin
  that makes ``--push_to_hub`` use it.

What a folder holds and whether it is complete is :mod:`dense_encoders.checkpoints.folder`'s, which this
package imports; ``trainer/`` and the command line import this package.
"""

from .cards import model_card
from .push import PushError, PushResult, push_to_hub, upload_files

__all__ = ["PushError", "PushResult", "model_card", "push_to_hub", "upload_files"]
