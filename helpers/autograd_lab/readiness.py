"""The readiness check shown in 00_start_here: is this laptop ready for the course? And the device every
notebook uses.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

import torch

from .engine import engine_repair, find_engine, graphviz_check

__all__ = ["choose_device", "environment_report"]


def choose_device() -> torch.device:
    """The device every notebook uses: the first CUDA GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def environment_report() -> dict:
    """What this kernel runs on: Python, the course's packages, the device and the layout engine.

    ``ready`` is True when everything the notebooks need is present and working;
    when it is not, ``repair`` says what to do.
    """
    device = choose_device()
    engine, problem = find_engine()
    found, problem = graphviz_check(engine) if engine else (None, problem)
    drawn_by = "MISSING" if engine is None else found or "BROKEN"
    report = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__.split("+")[0],
        "device": str(device) + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""),
        "graphs drawn by": drawn_by + (f" ({engine.note})" if engine and engine.note else ""),
    }
    for dist in ("torchviz", "graphviz", "ipywidgets", "jupyterlab", "matplotlib"):
        report[dist if dist != "graphviz" else "graphviz (python)"] = _version(dist)
    if sys.version_info >= (3, 12):
        report["setuptools (distutils for torchviz)"] = _version("setuptools")
    missing = [name for name, value in report.items() if value == "not installed"]
    report["ready"] = problem is None and not missing
    repairs = []
    if problem:
        repairs.append(f"{problem}\n{engine_repair()}")
    if missing:
        repairs.append(f"Not installed: {', '.join(missing)}. Run `make setup` in the course folder "
                       "(or pip install them), then restart the kernel.")
    if repairs:
        report["repair"] = "\n".join(repairs)
    return report
