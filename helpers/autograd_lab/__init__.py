"""Autograd Lab's instruments: draw, measure, drive with widgets, check a learner's own loop.

The ideas the course teaches are written out in the notebooks; this package only holds the instruments
the notebooks use to look at them. ``__all__`` is exactly what the notebooks import from here
(tests/instruments/test_public_api.py keeps it so); the answer checks are a package of their own,
``autograd_lab.exercises``.

Each name is imported from its module on first use, so that a tool or a guard process that needs one
small module (``autograd_lab.processes``) starts without importing torch.
"""

from __future__ import annotations

import importlib

# name -> the module that holds it
_HOMES = {
    "DistributedRunError": "distributed",
    "PeakMemory": "measure",
    "SavedTensors": "measure",
    "chain": "graph",
    "check_accumulation": "accumulation",
    "choose_device": "env",
    "count_nodes": "measure",
    "describe_step": "stepper",
    "draw_graph": "graph",
    "draw_step": "stepper",
    "draw_timeline": "timeline",
    "draw_update_timeline": "timeline",
    "environment_report": "env",
    "graph_nodes": "graph",
    "held_bytes": "measure",
    "line_chart": "svg",
    "live": "widgets",
    "run_button": "widgets",
    "stable_ids": "graph",
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
