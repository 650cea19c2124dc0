"""The layout engine under a time limit, and what a layout costs before it runs.

``run_dot`` lays DOT out with the engine :func:`autograd_lab.env.find_engine` picks (graphviz-pure, installed
with the course, unless ``AUTOGRAD_LAB_DOT`` selects a system ``dot``), as a program of its own process group
with a timeout (:mod:`autograd_lab.processes`): a timeout or an interrupted kernel never leaves it running.
``layout_cost`` and ``fits`` tell in advance whether a layout is comfortably quick and readable, from the two
things its time grows with: the boxes to place, and the ranks that long edges cross. The second explodes where
hundreds of paths of different lengths meet at one shared node (a looped loss, every sample's path ending at
the weight ``w``): each crossing is a bend that the crossing minimisation must place. Beyond them a graph is
folded first (:mod:`autograd_lab.fold`), but still laid out: only the time limit, or a graph beyond any
screen (``SCREEN_BOXES``), turns a picture into text.
"""

from __future__ import annotations

import subprocess

from . import processes
from .env import Engine, engine_repair, find_engine
from .graphmodel import Graph

DOT_TIMEOUT_S = 6.0  # the longest a drawing may hold the kernel (draw_graph(..., timeout=) changes it)
MAX_TIMEOUT_S = 600.0  # the most a learner may ask for
# Budgets that keep a layout far inside DOT_TIMEOUT_S, with either engine, also on a slow core
# (`make bench` times both engines on the course's drawings); above them a graph is folded, then laid out:
MAX_NODES = 500  # boxes drawn (backward nodes and saved tensors)
MAX_BENDS = 1200  # rank crossings of long edges, the cost that explodes at a shared leaf
SCREEN_BOXES = 3000  # more boxes than any screen can show legibly: a summary without trying the layout
LAYOUTS = ("dot", "neato", "fdp", "sfdp", "circo", "twopi", "osage", "patchwork")  # Graphviz's -K, both engines

__all__ = ["DOT_TIMEOUT_S", "SCREEN_BOXES", "GraphTooSlow", "GraphvizMissing", "fits", "install_hint", "layout_cost",
           "run_dot"]


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
    ``engine`` (None: the one :func:`~autograd_lab.env.find_engine` picks).

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
