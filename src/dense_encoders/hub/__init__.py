"""Everything between a checkpoint folder and the Hugging Face Hub.

* :mod:`.checkpoint_folder`: the one module that knows our model types, their native
  sentence-transformers pipelines, the files a complete folder holds, and strict weight loading;
* :mod:`.cards`, :mod:`.condenser_card`: model cards generated from what a folder records;
* :mod:`.push`: one-commit uploads (``dense-encoders push``); :mod:`.trainer_push`: the Trainer mixin
  that makes ``--push_to_hub`` use it;
* :mod:`.remote_code`: checking a downloaded checkpoint's remote code against the installed package.
* :mod:`.cross_encoder`: the one validated cross-encoder loader, shared by training and evaluation.
* :mod:`.cross_encoder`: the one validated way to open a cross-encoder checkpoint, shared by
  training (teacher scores, infusion) and evaluation (re-ranking, layer-wise analysis).

This package imports ``models/`` and ``data/`` only; ``trainer/``, ``evaluation/`` and the command
line import it.
"""

from .cards import model_card
from .push import PushError, push_to_hub, upload_files
from .remote_code import check_remote_code

__all__ = ["PushError", "check_remote_code", "model_card", "push_to_hub", "upload_files"]
