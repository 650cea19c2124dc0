"""Stop with one clear line when the Python running the set-up cannot run the course.

Runs before anything is installed, so it uses the standard library only and old syntax.
"""

import sys

OLDEST = (3, 10)  # keep in step with requires-python in pyproject.toml

if sys.version_info < OLDEST:
    sys.exit(
        "Autograd Lab needs Python %d.%d or newer; `%s` is Python %s. Run `make lab PYTHON=python3.11` (or any "
        "3.10+ interpreter), or install one from python.org." % (OLDEST + (sys.executable, sys.version.split()[0]))
    )
try:
    import ensurepip  # noqa: F401
    import venv  # noqa: F401  (Debian and Ubuntu ship it separately)
except ImportError:
    sys.exit(
        "Python %s has no `venv`/`ensurepip` module. On Debian/Ubuntu: sudo apt-get install python3-venv"
        % sys.version.split()[0]
    )
