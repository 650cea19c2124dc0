"""The layout engine under a time limit: Graphviz's ``dot``, and what a layout costs before it runs.

``run_dot`` runs ``dot`` as a program of its own process group with a timeout (:mod:`autograd_lab.processes`):
a timeout or an interrupted kernel never leaves ``dot`` running. ``layout_cost`` and ``fits`` tell in
advance whether ``dot`` will finish in time, from the two things its time grows with: the boxes to place,
and the ranks that long edges cross. The second explodes where hundreds of paths of different lengths
meet at one shared node (a looped loss, every sample's path ending at the weight ``w``): each crossing
is a bend that the crossing minimisation must place.
"""

from __future__ import annotations

import shutil
import subprocess

from . import processes
from .env import graphviz_install_hint
from .graphmodel import Graph

DOT_TIMEOUT_S = 6.0  # the longest a drawing may hold the kernel
# Budgets that keep a layout far inside DOT_TIMEOUT_S, also on a slow core:
MAX_NODES = 500  # boxes drawn (backward nodes and saved tensors)
MAX_BENDS = 1200  # rank crossings of long edges, the cost that explodes at a shared leaf

__all__ = ["DOT_TIMEOUT_S", "GraphTooSlow", "GraphvizMissing", "fits", "install_hint", "layout_cost", "run_dot"]


class GraphvizMissing(RuntimeError):
    """Raised when a graph must be rendered and Graphviz's ``dot`` is absent or does not run."""


class GraphTooSlow(RuntimeError):
    """Raised when Graphviz cannot lay a graph out within the time limit."""


def install_hint(broken: str | None = None) -> str:
    """What to do when ``dot`` is missing, or (``broken``: what it said) installed but failing."""
    lines = graphviz_install_hint()
    if broken is not None:
        said = broken.strip().splitlines()[0] if broken.strip() else "(no message)"
        return (
            f"Graphviz's `dot` program is installed but does not run, so this graph cannot be drawn.\n"
            f"It said: {said}\n"
            "Reinstall (repair) it, then restart the kernel:\n" + lines
        )
    return (
        "Graphviz's `dot` program was not found on PATH, so this graph cannot be drawn.\n"
        "Install it, then restart the kernel:\n" + lines
    )


def run_dot(source: str, timeout: float = DOT_TIMEOUT_S) -> str:
    """SVG laid out by ``dot`` from DOT ``source``, in at most ``timeout`` seconds.

    ``GraphvizMissing`` when ``dot`` is absent or broken (with the install or repair commands),
    ``GraphTooSlow`` when it runs out of time. ``dot`` never outlives this call.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing(install_hint())
    try:
        code, out, err = processes.run([exe, "-Kdot", "-Tsvg"], source.encode("utf-8"), timeout)
    except OSError as err:  # on PATH but not executable, wrong architecture, ...
        raise GraphvizMissing(install_hint(broken=str(err))) from None
    except subprocess.TimeoutExpired:
        raise GraphTooSlow(f"Graphviz did not lay this graph out within {timeout:g} s, so it was stopped.") from None
    if code != 0:
        raise GraphvizMissing(install_hint(broken=err.decode("utf-8", "replace")))
    return out.decode("utf-8")


def layout_cost(model: Graph, show_saved: bool = False) -> tuple[int, int]:
    """(boxes, bends): what Graphviz must place, known before it runs."""
    rank, _ = model.ranks()
    bends = sum(rank[child] - rank[parent] - 1 for child, parent in model.edges())
    boxes = len(model.nodes) + (sum(len(n.saved) for n in model.nodes) if show_saved else 0)
    return boxes, bends


def fits(model: Graph, show_saved: bool = False) -> bool:
    """Whether ``dot`` lays ``model`` out well within the time limit."""
    boxes, bends = layout_cost(model, show_saved)
    return boxes <= MAX_NODES and bends <= MAX_BENDS
