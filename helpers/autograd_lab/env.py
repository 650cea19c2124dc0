"""The environment check shown in 00_start_here: is this laptop ready for the course?"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import torch

__all__ = ["choose_device", "environment_report", "graphviz_version"]


def choose_device() -> torch.device:
    """The device every notebook uses: the first CUDA GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def graphviz_version() -> str | None:
    """The version of Graphviz's ``dot`` on PATH (e.g. "2.43.0"), or None when it is missing."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    done = subprocess.run([dot, "-V"], capture_output=True, text=True, timeout=20)
    words = (done.stderr or done.stdout).split()
    return words[words.index("version") + 1] if "version" in words else (done.stderr or done.stdout).strip()


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def environment_report() -> dict:
    """What this kernel runs on: Python, the course's packages, the device and Graphviz.

    ``ready`` is True when everything the notebooks need is present.
    """
    device = choose_device()
    dot = graphviz_version()
    report = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__.split("+")[0],
        "device": str(device) + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""),
        "graphviz (dot)": dot or "MISSING",
    }
    for dist in ("torchviz", "graphviz", "ipywidgets", "jupyterlab", "matplotlib"):
        report[dist if dist != "graphviz" else "graphviz (python)"] = _version(dist)
    if sys.version_info >= (3, 12):
        report["setuptools (distutils for torchviz)"] = _version("setuptools")
    report["ready"] = dot is not None and all(v != "not installed" for v in report.values())
    return report
