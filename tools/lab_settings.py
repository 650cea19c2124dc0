"""Install the course's JupyterLab defaults into a virtual environment (run by the Makefile's set-up).

JupyterLab reads ``<prefix>/share/jupyter/lab/settings/overrides.json`` as the default of every setting
named there; a user can still change them. The course turns off the "get notified about official Jupyter
news?" pop-up, which would greet every learner and a whole classroom on their first `make lab`.

    python -m tools lab-settings .venv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def install(prefix: Path) -> Path:
    path = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() else {}
    for plugin, values in OVERRIDES.items():
        current.setdefault(plugin, {}).update(values)
    path.write_text(json.dumps(current, indent=2) + "\n")
    return path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m tools lab-settings VENV_DIRECTORY")
    install(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
