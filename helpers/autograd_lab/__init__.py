"""Autograd Lab's instruments: draw, measure, drive with widgets, check a learner's own loop.

The ideas the course teaches are written out in the notebooks; this package only holds the instruments
the notebooks use to look at them. ``__all__`` is exactly what a user is taught to call: what the notebooks
import from here and what README.md and docs/teaching.md show (tests/instruments/test_public_api.py keeps it
so); the answer checks are a package of their own, ``autograd_lab.exercises``.

Each name is imported from its module on first use, so that a tool or a guard process that needs one
small module (``autograd_lab.processes``) starts without importing torch; the ``TYPE_CHECKING`` block below
names the same homes as plain imports, for editors and type checkers to follow.

Imported in a notebook, the package also has the notebook show the ``graphviz`` package's graphs
(``torchviz.make_dot``'s) through the course's layout engine (:func:`autograd_lab.graph.graphviz_bundle`):
``graphviz`` itself runs a system ``dot`` by name. Its own drawings (``AutogradGraph``) show themselves.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names and homes as _HOMES (a test keeps them in step)
    from .accumulation import check_accumulation
    from .distributed import AllReduceLog, DistributedRunError, torchrun
    from .drawing import line_chart
    from .errors import shows_error
    from .graph import chain, draw_graph, graph_nodes
    from .measure import PeakMemory, SavedTensors, allocator_peak, count_nodes, held_bytes, time_call
    from .modules import record_modules
    from .readiness import choose_device, environment_report
    from .stepper import describe_step, draw_step
    from .timeline import draw_timeline, timeline_text
    from .widgets import live

# name -> the module that holds it
_HOMES = {
    "AllReduceLog": "distributed",
    "DistributedRunError": "distributed",
    "PeakMemory": "measure",
    "SavedTensors": "measure",
    "allocator_peak": "measure",
    "chain": "graph",
    "check_accumulation": "accumulation",
    "choose_device": "readiness",
    "count_nodes": "measure",
    "describe_step": "stepper",
    "draw_graph": "graph",
    "draw_step": "stepper",
    "draw_timeline": "timeline",
    "environment_report": "readiness",
    "graph_nodes": "graph",
    "held_bytes": "measure",
    "shows_error": "errors",
    "line_chart": "drawing",
    "live": "widgets",
    "record_modules": "modules",
    "time_call": "measure",
    "timeline_text": "timeline",
    "torchrun": "distributed",
}

__all__ = [
    "AllReduceLog", "DistributedRunError", "PeakMemory", "SavedTensors", "allocator_peak", "chain",
    "check_accumulation", "choose_device", "count_nodes", "describe_step", "draw_graph", "draw_step",
    "draw_timeline", "environment_report", "graph_nodes", "held_bytes", "line_chart", "live", "record_modules",
    "shows_error", "time_call", "timeline_text", "torchrun",
]  # the keys of _HOMES, written out for editors
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
# them imports neither graphviz nor torch.
GRAPHVIZ_CLASSES = (("graphviz.graphs", "Graph"), ("graphviz.graphs", "Digraph"), ("graphviz.sources", "Source"))
# The course's own drawing, a Digraph too: IPython looks a printer up along the class's MRO before it asks the
# object for _repr_mimebundle_, so graphviz's printer would be found for it; registered by its own name, it is
# found first, and shows itself.
OWN_GRAPH = ("autograd_lab.graph", "AutogradGraph")


def _show_graphviz(graph) -> dict:
    from .graph import graphviz_bundle

    return graphviz_bundle(graph)


def _show_itself(graph) -> dict:
    return graph._repr_mimebundle_()


def _register_graphviz_display() -> None:
    """In IPython (a notebook's kernel), graphviz's graphs are shown by :func:`_show_graphviz`; the course's
    own drawings by their ``_repr_mimebundle_``."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:  # a plain Python process: nothing is displayed
        return
    formatter = shell.display_formatter.mimebundle_formatter
    for module, name in GRAPHVIZ_CLASSES:
        formatter.for_type_by_name(module, name, _show_graphviz)
    formatter.for_type_by_name(*OWN_GRAPH, _show_itself)


_register_graphviz_display()
