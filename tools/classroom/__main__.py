"""``python -m tools.classroom ...``: the same as ``python -m tools classroom ...``."""

import sys

from . import main

sys.exit(main())
