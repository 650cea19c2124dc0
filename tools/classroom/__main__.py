"""``python -m tools.classroom ...``: the same as ``python -m tools classroom ...``."""

import sys

from .cli import main

sys.exit(main())
