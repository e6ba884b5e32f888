"""What each entry point of the package takes, as dataclasses whose fields are the command line's flags.

One module per entry point: :mod:`.pretraining` (``dense-encoders pretrain``), :mod:`.distillation` (``distill``)
with :mod:`.losses` (the options the distillation losses take), :mod:`.infusion` (``infuse``), :mod:`.evaluation`
(``evaluate``), :mod:`.quickstart` and :mod:`.benchmarking` (``bench``'s sizes and choices); :mod:`.training` holds
the fields every trainer's ``TrainingArguments`` adds. The library modules that run these settings (``trainer/``,
``evaluation/``, ``quickstart``, ``benchmarking/``) import them from here, and re-export them.

These modules import no torch, no transformers and no model code at import time (only ``dataclasses``,
:mod:`dense_encoders.recipes`, :mod:`dense_encoders.vectors` and the models' preset tables), so that the command
line builds every ``--help`` from them in a fraction of a second; what checking a value needs is imported when a
setting is checked (``__post_init__``). ``tests/test_cli_help.py`` checks this.
"""
