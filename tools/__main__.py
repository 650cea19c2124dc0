"""``python -m tools COMMAND [ARGS]``: every tool of the course behind one command line."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {  # command: (module, what it does)
    "notebooks": ("execute_notebooks", "re-execute notebooks in a fresh kernel and save them (make notebooks)"),
    "bench": ("bench", "notebook cost, widget latency and the course's figures at scale (make bench)"),
    "soak": ("soak", "every notebook by nbconvert and papermill, many runs on a busy machine (make soak)"),
    "minutes": ("minutes", "how long each notebook takes to work through, by the course's counting rule"),
    "classroom": ("classroom", "slides metadata, student release, handouts, nbgrader (make student, make handouts)"),
    "lock": ("lock", "print the lock for every supported Python (make lock)"),
    "graphviz": ("ensure_graphviz", "is there a layout engine for the graphs? --system: a system dot (root on Debian)"),
    "chromium": ("ensure_chromium", "make sure the browser tests have a Chromium, the same way"),
    "install": ("install", "the packages after torch, by uv where it can and by pip where it cannot (make setup)"),
    "lab-settings": ("lab_settings", "install the course's JupyterLab defaults into a virtual environment"),
    "test": ("run_tests", "the unit tests and nbval, with the browser tests beside them (make test)"),
    "pythons": ("other_pythons", "the non-browser suite on other supported Pythons (make test-pythons)"),
    "test-cuda": ("run_cuda_tests", "the claim tests' CUDA cases and nbval with the kernels on a GPU (make test-cuda)"),
    "gpu-wheels": ("gpu.wheels", "the wheels a GPU machine without network lacks, into .whl/ (make gpu-wheels)"),
}


def usage() -> str:
    lines = ["usage: python -m tools COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<13} {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"tools.{COMMANDS[argv[0]][0]}")
    sys.argv = [f"python -m tools {argv[0]}", *argv[1:]]
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
