"""The environment check shown in 00_start_here: is this laptop ready for the course?

Also the one home of the Graphviz install hint, which the graph drawing, the
readiness check and ``python -m tools graphviz`` all show.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from . import processes

__all__ = ["choose_device", "environment_report", "graphviz_check", "graphviz_install_hint"]

DOT_CHECK_TIMEOUT_S = 10.0  # how long the check waits for `dot` to answer (a healthy one answers at once)

# (system, install command); graphviz_install_hint() puts this machine's system first
GRAPHVIZ_INSTALL = {
    "debian": ("Debian/Ubuntu", "sudo apt-get install graphviz"),
    "fedora": ("Fedora", "sudo dnf install graphviz"),
    "macos": ("macOS (Homebrew)", "brew install graphviz"),
    "windows": ("Windows", "winget install graphviz   (or: choco install graphviz), then reopen the terminal"),
    "conda": ("conda", "conda install -c conda-forge graphviz"),
}


def choose_device() -> torch.device:
    """The device every notebook uses: the first CUDA GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _linux_family() -> str | None:
    """'debian' or 'fedora' from /etc/os-release (ID and ID_LIKE), or None for other distributions."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return None
    words = set()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            words |= set(value.strip().strip('"').lower().split())
    if words & {"debian", "ubuntu"}:
        return "debian"
    if words & {"fedora", "rhel", "centos"}:
        return "fedora"
    return None


def _this_system() -> str | None:
    """The key of GRAPHVIZ_INSTALL that fits this machine best (a conda environment wins)."""
    if os.environ.get("CONDA_PREFIX"):
        return "conda"
    if sys.platform == "darwin":
        return "macos"
    if sys.platform == "win32":
        return "windows"
    if sys.platform.startswith("linux"):
        return _linux_family()
    return None


def graphviz_install_hint() -> str:
    """How to install Graphviz's ``dot``: one indented line per system, this machine's first.

    Callers put their own sentence above it (what failed, and "then restart the kernel").
    """
    first = _this_system()
    order = ([first] if first else []) + [key for key in GRAPHVIZ_INSTALL if key != first]
    return "\n".join(f"  {GRAPHVIZ_INSTALL[key][0]:<17} {GRAPHVIZ_INSTALL[key][1]}" for key in order)


def _run_dot(args: list, stdin: str = "") -> tuple[int, str]:
    """(exit code, output) of ``dot`` with ``args``; code -1 when it cannot start or answer in time."""
    try:
        code, out, err = processes.run(args, stdin.encode(), DOT_CHECK_TIMEOUT_S)
    except OSError as err:
        return -1, str(err)
    except subprocess.TimeoutExpired:
        return -1, f"no answer within {DOT_CHECK_TIMEOUT_S:g} s"
    return code, (err + out).decode("utf-8", "replace").strip()


def graphviz_check() -> tuple[str | None, str | None]:
    """``(version, problem)``: the version of a working ``dot`` (e.g. "2.43.0") and None,
    or None and a sentence saying what is wrong (missing, or installed but failing to run or draw).
    """
    dot = shutil.which("dot")
    if dot is None:
        return None, "Graphviz's `dot` program is not on PATH."
    code, text = _run_dot([dot, "-V"])
    words = text.split()
    if code != 0 or "version" not in words:
        last = text.splitlines()[-1] if text else "no output"
        return None, f"Graphviz's `dot` is installed but broken: `dot -V` exited with {code} ({last})."
    found = words[words.index("version") + 1]
    code, text = _run_dot([dot, "-Tsvg"], stdin="digraph { a -> b }")
    if code != 0 or "<svg" not in text:
        last = text.splitlines()[-1] if text else "no output"
        return None, f"Graphviz's `dot` {found} is installed but cannot draw an SVG ({last})."
    return found, None


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def environment_report() -> dict:
    """What this kernel runs on: Python, the course's packages, the device and Graphviz.

    ``ready`` is True when everything the notebooks need is present and working;
    when it is not, ``repair`` says what to do.
    """
    device = choose_device()
    dot, problem = graphviz_check()
    report = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__.split("+")[0],
        "device": str(device) + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""),
        "graphviz (dot)": dot or ("MISSING" if shutil.which("dot") is None else "BROKEN"),
    }
    for dist in ("torchviz", "graphviz", "ipywidgets", "jupyterlab", "matplotlib"):
        report[dist if dist != "graphviz" else "graphviz (python)"] = _version(dist)
    if sys.version_info >= (3, 12):
        report["setuptools (distutils for torchviz)"] = _version("setuptools")
    missing = [name for name, value in report.items() if value == "not installed"]
    report["ready"] = problem is None and not missing
    repairs = []
    if problem:
        repairs.append(f"{problem} Install or repair Graphviz, then restart the kernel:\n{graphviz_install_hint()}")
    if missing:
        repairs.append(f"Not installed: {', '.join(missing)}. Run `make setup` in the course folder "
                       "(or pip install them), then restart the kernel.")
    if repairs:
        report["repair"] = "\n".join(repairs)
    return report
