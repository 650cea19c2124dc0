"""Autograd Lab's instruments: draw, measure, drive with widgets, check a learner's own loop.

The ideas the course teaches are written out in the notebooks; this package only holds the instruments
the notebooks use to look at them. ``__all__`` is exactly what the notebooks import from here
(tests/instruments/test_public_api.py keeps it so); the answer checks are a package of their own,
``autograd_lab.exercises``.

Each name is imported from its module on first use, so that a tool or a guard process that needs one
small module (``autograd_lab.processes``) starts without importing torch.

Imported in a notebook, the package also has the notebook show the ``graphviz`` package's graphs
(``torchviz.make_dot``'s) through the course's layout engine, as it shows its own drawings
(:func:`autograd_lab.graph.graphviz_bundle`): ``graphviz`` itself runs a system ``dot`` by name.
"""

from __future__ import annotations

import importlib
import sys

# name -> the module that holds it
_HOMES = {
    "AllReduceLog": "distributed",
    "DistributedRunError": "distributed",
    "PeakMemory": "measure",
    "SavedTensors": "measure",
    "allocator_peak": "measure",
    "chain": "graph",
    "check_accumulation": "accumulation",
    "choose_device": "env",
    "count_nodes": "measure",
    "describe_step": "stepper",
    "draw_graph": "graph",
    "draw_step": "stepper",
    "draw_timeline": "timeline",
    "environment_report": "env",
    "graph_nodes": "graph",
    "held_bytes": "measure",
    "shows_error": "errors",
    "live": "widgets",
    "time_call": "measure",
    "timeline_text": "timeline",
    "torchrun": "distributed",
}

__all__ = sorted(_HOMES)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


# graphviz's classes that a notebook shows (torchviz.make_dot returns a Digraph), named so that registering
# them imports neither graphviz nor torch; a subclass (the course's AutogradGraph) is shown by the same function.
GRAPHVIZ_CLASSES = (("graphviz.graphs", "Graph"), ("graphviz.graphs", "Digraph"), ("graphviz.sources", "Source"))


def _show_graphviz(graph) -> dict:
    from .graph import graphviz_bundle

    return graphviz_bundle(graph)


def _register_graphviz_display() -> None:
    """In IPython (a notebook's kernel), graphviz's graphs are shown by :func:`_show_graphviz`."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:  # a plain Python process: nothing is displayed
        return
    formatter = shell.display_formatter.mimebundle_formatter
    for module, name in GRAPHVIZ_CLASSES:
        formatter.for_type_by_name(module, name, _show_graphviz)


_register_graphviz_display()
