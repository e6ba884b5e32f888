"""What each entry point of the package takes, as dataclasses whose fields are the command line's flags.

One module per entry point: :mod:`.pretraining` (``dense-encoders pretrain``), :mod:`.distillation` (``distill``)
with :mod:`.losses` (the options the distillation losses take), :mod:`.infusion` (``infuse``), :mod:`.evaluation`
(``evaluate``), :mod:`.layerwise`, :mod:`.teacher` (``score-teacher``), :mod:`.corpus` (``encode``, ``index``,
``search``), :mod:`.conversion` (``convert``), :mod:`.hub` (``push``), :mod:`.quickstart`, :mod:`.benchmarking`
(``bench``'s sizes, choices and flags) and :mod:`.recipes`; :mod:`.training` holds the fields every trainer's
``TrainingArguments`` adds, :mod:`.datasets` and :mod:`.models` the fields several entry points share, and
:mod:`.values` the checks of single values their ``__post_init__`` share (the command line parses these dataclasses
with transformers' ``HfArgumentParser`` and checks nothing twice). The library modules that run these settings
(``trainer/``, ``evaluation/``, ``quickstart``, ``benchmarking/``) import them from here, and re-export them.

These modules import no torch, no transformers and no model code at import time (only ``dataclasses``,
:mod:`dense_encoders.recipes`, :mod:`dense_encoders.vectors` and the models' preset tables), so that the command
line builds every ``--help`` from them in a fraction of a second; what checking a value needs is imported when a
setting is checked (``__post_init__``). ``tests/test_cli_help.py`` checks this.
"""
