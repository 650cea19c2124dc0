"""``python -m autograd_lab [FOLDER]``: the same as the ``autograd-lab`` command (autograd_lab.course)."""

import sys

from autograd_lab.course import main

if __name__ == "__main__":
    sys.exit(main())
