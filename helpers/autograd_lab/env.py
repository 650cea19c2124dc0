"""The environment check shown in 00_start_here: is this laptop ready for the course?

Also the one home of what lays the graphs out: the layout engine found here (:func:`find_engine`) and the
install hints that the graph drawing, the readiness check and ``python -m tools graphviz`` show.

The course lays its graphs out with graphviz-pure, a port of Graphviz that pip installs with the course's
package (a program of its own, ``graphviz-pure``, with ``dot``'s flags; it never installs a ``dot``). It writes
the same bytes on every platform, so stored pictures can be compared. The setting ``AUTOGRAD_LAB_DOT``
selects another program instead: ``AUTOGRAD_LAB_DOT=dot`` the system's Graphviz ``dot`` on PATH, or the path
of any ``dot``. On a platform for which pip has no graphviz-pure (see ``PURE_WHEELS``) a system ``dot`` is
used, and the readiness check says so.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import torch

from . import processes

__all__ = ["Engine", "choose_device", "environment_report", "find_engine", "graphviz_check", "graphviz_install_hint",
           "pure_engine"]

DOT_CHECK_TIMEOUT_S = 10.0  # how long the check waits for the engine to answer (a healthy one answers at once)

ENGINE_SETTING = "AUTOGRAD_LAB_DOT"  # unset: graphviz-pure; "dot" (or a path): that program instead
PURE = "graphviz-pure"
# (sys.platform, machine) pairs for which PyPI has a wheel of graphviz-pure (it has no source package);
# pyproject.toml's environment marker says the same (tests/instruments/test_engines.py keeps them in step).
PURE_WHEELS = {("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "x86_64"), ("darwin", "arm64"),
               ("win32", "amd64"), ("win32", "arm64")}
PURE_PLATFORMS = "Linux x86-64 and aarch64, macOS x86-64 and arm64, Windows x86-64 and arm64"
PURE_INSTALL = "pip install graphviz-pure   (in the course folder: make setup)"

# (system, install command) of a system Graphviz; graphviz_install_hint() puts this machine's system first
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
    """How to install a system Graphviz ``dot``: one indented line per system, this machine's first.

    Callers put their own sentence above it (what failed, and "then restart the kernel").
    """
    first = _this_system()
    order = ([first] if first else []) + [key for key in GRAPHVIZ_INSTALL if key != first]
    return "\n".join(f"  {GRAPHVIZ_INSTALL[key][0]:<17} {GRAPHVIZ_INSTALL[key][1]}" for key in order)


@dataclass(frozen=True)
class Engine:
    """The program that lays the course's graphs out."""

    program: str  # its path
    name: str  # "graphviz-pure", or the program the setting named ("dot")
    pure: bool  # graphviz-pure, found as the course installs it: the same bytes on every platform
    note: str = ""  # why it is not the engine asked for (a fallback), else ""


def pure_has_wheel(system: str | None = None, machine: str | None = None) -> bool:
    """Whether pip has a graphviz-pure wheel for this platform (or the one given)."""
    system = system or sys.platform
    machine = (machine or platform.machine()).lower()
    return (system, machine) in PURE_WHEELS


@cache
def _installed_pure() -> str | None:
    """The graphviz-pure program that pip installed beside this Python's packages (a venv, --user, conda)."""
    try:
        files = distribution(PURE).files or []
    except PackageNotFoundError:
        return None
    for file in files:
        if file.name in (PURE, PURE + ".exe"):
            path = Path(file.locate()).resolve()
            if path.is_file():
                return str(path)
    return None


def _pure_missing() -> str:
    """Why graphviz-pure is not here, in one sentence without its full stop."""
    if not pure_has_wheel():
        return (f"graphviz-pure, the course's layout engine, has no wheel for {platform.system()} "
                f"{platform.machine()} (pip has one for {PURE_PLATFORMS})")
    return "graphviz-pure, the course's layout engine, is not installed in this Python"


def pure_engine() -> Engine | None:
    """graphviz-pure as pip installed it for this Python (else a ``graphviz-pure`` on PATH), whatever the setting."""
    program = _installed_pure() or shutil.which(PURE)
    return Engine(program, PURE, pure=True) if program is not None else None


def find_engine() -> tuple[Engine | None, str | None]:
    """``(engine, None)``: the program that lays graphs out here; or ``(None, problem)``, a sentence.

    graphviz-pure unless ``AUTOGRAD_LAB_DOT`` names another program; without graphviz-pure, a system ``dot``
    on PATH (the engine's ``note`` says why).
    """
    wanted = os.environ.get(ENGINE_SETTING, "").strip() or PURE
    if wanted != PURE:
        program = shutil.which(wanted)
        if program is None:
            return None, (f"{ENGINE_SETTING}={wanted} selects a program that was not found (on PATH, or at that "
                          f"path). Unset {ENGINE_SETTING} to draw with graphviz-pure, installed with the course.")
        return Engine(program, Path(wanted).stem, pure=False), None
    engine = pure_engine()
    if engine is not None:
        return engine, None
    dot = shutil.which("dot")
    if dot is not None:
        return Engine(dot, "dot", pure=False, note=f"{_pure_missing()}: the system's Graphviz draws instead"), None
    return None, f"{_pure_missing()}, and no Graphviz `dot` program is on PATH either."


def engine_repair() -> str:
    """What to install when no engine lays graphs out: graphviz-pure where pip has it, else a system Graphviz."""
    system = "Or install Graphviz's `dot`" if pure_has_wheel() else "Install Graphviz's `dot`"
    pure = f"Install graphviz-pure:\n  {PURE_INSTALL}\n" if pure_has_wheel() else ""
    return f"{pure}{system}, then restart the kernel:\n{graphviz_install_hint()}"


def _run_dot(args: list, stdin: str = "") -> tuple[int, str]:
    """(exit code, output) of the engine with ``args``; code -1 when it cannot start or answer in time."""
    try:
        code, out, err = processes.run(args, stdin.encode(), DOT_CHECK_TIMEOUT_S)
    except OSError as err:
        return -1, str(err)
    except subprocess.TimeoutExpired:
        return -1, f"no answer within {DOT_CHECK_TIMEOUT_S:g} s"
    return code, (err + out).decode("utf-8", "replace").strip()


def graphviz_check(engine: Engine | None = None) -> tuple[str | None, str | None]:
    """``(found, problem)``: the engine that draws and its version (e.g. "graphviz-pure 0.2.2") and None,
    or None and a sentence saying what is wrong (missing, or installed but failing to run or draw).
    ``engine``: check that one instead of the one :func:`find_engine` picks.
    """
    if engine is None:
        engine, problem = find_engine()
        if engine is None:
            return None, problem
    code, text = _run_dot([engine.program, "-V"])
    words = text.split()
    if code != 0 or "version" not in words:
        last = text.splitlines()[-1] if text else "no output"
        return None, f"{engine.name} ({engine.program}) is installed but broken: `-V` exited with {code} ({last})."
    found = f"{engine.name} {words[words.index('version') + 1]}"
    code, text = _run_dot([engine.program, "-Tsvg"], stdin="digraph { a -> b }")
    if code != 0 or "<svg" not in text:
        last = text.splitlines()[-1] if text else "no output"
        return None, f"{found} is installed but cannot draw an SVG ({last})."
    return found, None


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
