"""Autograd Lab's instruments: draw, measure, drive with widgets, check answers.

The ideas the course teaches are written out in the notebooks; this package
only holds the instruments the notebooks use to look at them.
"""

from .accumulation import AccumulationReport, check_accumulation
from .env import choose_device, environment_report
from .graph import AutogradGraph, GraphTooSlow, GraphvizMissing, chain, draw_graph, graph_nodes, stable_ids
from .graphmodel import node_name
from .measure import SavedTensors, count_nodes, time_call
from .svg import line_chart
from .widgets import live

__all__ = [
    "AccumulationReport",
    "check_accumulation",
    "AutogradGraph",
    "GraphTooSlow",
    "GraphvizMissing",
    "SavedTensors",
    "chain",
    "choose_device",
    "count_nodes",
    "draw_graph",
    "environment_report",
    "graph_nodes",
    "line_chart",
    "live",
    "node_name",
    "stable_ids",
    "time_call",
]
__version__ = "0.1.0"
