"""Write constraints.txt: one lock for every supported Python and platform (run by `make lock`).

It resolves pyproject.toml's dependencies with all extras, universally (environment markers pick the
versions per Python and platform), with torch held at the version the committed outputs were made with.
The resolver is uv (`pip install uv`); it asks PyPI, so `make lock` needs the network.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLDEST_PYTHON = "3.10"  # keep in step with requires-python in pyproject.toml
# Held in the lock only (a learner's own environment is never held back by the course's package):
# jsonschema 4.25 added rfc3987-syntax to the extra Jupyter's event system asks for, and importing it builds
# its grammar's parsers in every process that reads a notebook (JupyterLab, nbval, nbclient, nbgrader).
LOCK_ONLY = "jsonschema<4.25\n"

HEADER = """\
# The lock: exact versions for every supported Python (3.10+) and platform, chosen by environment markers.
# The committed notebook outputs were made with the CPython 3.11 / Linux x86-64 lines, torch {torch} (CPU build).
# A constraints file: it pins versions, it installs nothing by itself. Regenerate with: make lock.
"""


def current_torch() -> str:
    """The installed torch's version without a build tag (2.13.0+cpu -> 2.13.0): the same pin for every build."""
    import torch

    return torch.__version__.split("+")[0]


def compile_lock(torch_version: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text(f"torch=={torch_version}\n{LOCK_ONLY}")
        done = subprocess.run(
            [sys.executable, "-m", "uv", "pip", "compile", "pyproject.toml", "--all-extras", "--universal",
             "--python-version", OLDEST_PYTHON, "-c", str(pins), "--no-annotate", "--no-header", "--quiet"],
            cwd=REPO, capture_output=True, text=True,
        )
    if done.returncode != 0:
        sys.exit(f"make lock: uv could not resolve the dependencies:\n{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if not re.match(r"^-e\b|^autograd-lab\b", line)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    torch_version = current_torch()
    sys.stdout.write(HEADER.format(torch=torch_version) + compile_lock(torch_version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
