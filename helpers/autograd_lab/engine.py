"""The layout engine: which program lays the course's graphs out, running it under a time limit, and what a
layout costs before it runs.

The course lays its graphs out with graphviz-pure, a port of Graphviz that pip installs with the course's
package (a program of its own, ``graphviz-pure``, with ``dot``'s flags; it never installs a ``dot``). It writes
the same bytes on every platform, so stored pictures can be compared. The setting ``AUTOGRAD_LAB_DOT``
selects another program instead: ``AUTOGRAD_LAB_DOT=dot`` the system's Graphviz ``dot`` on PATH, or the path
of any ``dot``. On a platform for which pip has no graphviz-pure (see ``PURE_WHEELS``) a system ``dot`` is
used, and the readiness check (:mod:`autograd_lab.readiness`) says so. :func:`find_engine` picks the program;
the install hints here are what the graph drawing, the readiness check and ``python -m tools graphviz`` show.

``run_dot`` lays DOT out with that engine as a program of its own process group with a timeout
(:mod:`autograd_lab.processes`): a timeout or an interrupted kernel never leaves it running.
``layout_cost`` and ``fits`` tell in advance whether a layout is comfortably quick and readable, from the two
things its time grows with: the boxes to place, and the ranks that long edges cross. The second explodes where
hundreds of paths of different lengths meet at one shared node (a looped loss, every sample's path ending at
the weight ``w``): each crossing is a bend that the crossing minimisation must place. Beyond them a graph is
folded first (:mod:`autograd_lab.fold`), but still laid out: only the time limit, or a graph beyond any
screen (``SCREEN_BOXES``), turns a picture into text.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import TYPE_CHECKING

from . import processes

if TYPE_CHECKING:
    from .graphmodel import Graph

__all__ = ["DOT_TIMEOUT_S", "SCREEN_BOXES", "Engine", "GraphTooSlow", "GraphvizMissing", "engine_repair",
           "find_engine", "fits", "graphviz_check", "graphviz_install_hint", "install_hint", "layout_cost",
           "pure_engine", "run_dot"]

# --------------------------------------------------------------------------- which program lays graphs out

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


# --------------------------------------------------------------------------- a layout, under a time limit

DOT_TIMEOUT_S = 6.0  # the longest a drawing may hold the kernel (draw_graph(..., timeout=) changes it)
MAX_TIMEOUT_S = 600.0  # the most a learner may ask for
# Budgets that keep a layout far inside DOT_TIMEOUT_S, with either engine, also on a slow core
# (`make bench` times both engines on the course's drawings); above them a graph is folded, then laid out:
MAX_NODES = 500  # boxes drawn (backward nodes and saved tensors)
MAX_BENDS = 1200  # rank crossings of long edges, the cost that explodes at a shared leaf
SCREEN_BOXES = 3000  # more boxes than any screen can show legibly: a summary without trying the layout
LAYOUTS = ("dot", "neato", "fdp", "sfdp", "circo", "twopi", "osage", "patchwork")  # Graphviz's -K, both engines



class GraphvizMissing(RuntimeError):
    """Raised when a graph must be rendered and no layout engine is there, or it does not run."""


class GraphTooSlow(RuntimeError):
    """Raised when the layout engine cannot lay a graph out within the time limit (its message says what to do)."""


TOO_SLOW_ADVICE = ("Draw less of it (draw_graph(..., fold=True), or depth=1 for a recorded model, or one block "
                   "of it), or allow more time: draw_graph(..., timeout=60).")


def install_hint(broken: str | None = None, engine: Engine | None = None, problem: str | None = None) -> str:
    """What to do when no engine is found (``problem``: why), or (``broken``: what it said) one fails."""
    if broken is not None:
        said = broken.strip().splitlines()[0] if broken.strip() else "(no message)"
        who = f"The layout engine, {engine.name} ({engine.program}), is" if engine else "The layout engine is"
        return (f"{who} installed but does not run, so this graph cannot be drawn.\n"
                f"It said: {said}\nReinstall (repair) it. {engine_repair()}")
    why = problem or find_engine()[1]
    return f"No layout engine was found, so this graph cannot be drawn: {why}\n{engine_repair()}"


def run_dot(source: str, timeout: float = DOT_TIMEOUT_S, layout: str = "dot", engine: Engine | None = None) -> str:
    """SVG laid out from DOT ``source`` (with Graphviz's ``layout``, ``-K``), in at most ``timeout`` seconds, by
    ``engine`` (None: the one :func:`find_engine` picks).

    ``GraphvizMissing`` when no engine is there or it is broken (with what to install or repair),
    ``GraphTooSlow`` when it runs out of time. The engine never outlives this call.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)} (Graphviz's layout engines); got {layout!r}.")
    if engine is None:
        engine, problem = find_engine()
        if engine is None:
            raise GraphvizMissing(install_hint(problem=problem))
    try:
        code, out, err = processes.run([engine.program, f"-K{layout}", "-Tsvg"], source.encode("utf-8"), timeout)
    except OSError as err:  # there but not executable, wrong architecture, ...
        raise GraphvizMissing(install_hint(broken=str(err), engine=engine)) from None
    except subprocess.TimeoutExpired:
        raise GraphTooSlow(f"{engine.name} did not lay this graph out within {timeout:g} s, "
                           f"so it was stopped. {TOO_SLOW_ADVICE}") from None
    if code != 0:
        raise GraphvizMissing(install_hint(broken=err.decode("utf-8", "replace"), engine=engine))
    return out.decode("utf-8")


def layout_cost(model: Graph, show_saved: bool = False) -> tuple[int, int]:
    """(boxes, bends): what Graphviz must place, known before it runs."""
    rank, _ = model.ranks()
    bends = sum(rank[child] - rank[parent] - 1 for child, parent in model.edges())
    boxes = len(model.nodes) + (sum(len(n.saved) for n in model.nodes) if show_saved else 0)
    return boxes, bends


def fits(cost: tuple[int, int]) -> bool:
    """Whether a graph of ``cost`` (its :func:`layout_cost`) is laid out well within the time limit and read at
    a glance: drawn without folding."""
    boxes, bends = cost
    return boxes <= MAX_NODES and bends <= MAX_BENDS
