"""``python -m dense_encoders.cli`` (and ``torchrun -m dense_encoders.cli``): the ``dense-encoders`` command."""

import sys

from . import main

sys.exit(main())
