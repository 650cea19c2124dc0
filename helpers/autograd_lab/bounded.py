"""Drawing that never holds the kernel: Graphviz's ``dot`` under a time limit, big graphs folded first.

Graphviz lays out a long chain or a wide fan of a few thousand nodes in about a
second, but a graph where hundreds of paths meet at one shared leaf (the looped
loss of notebook 03, every sample's path ending at the weight ``w``) makes its
crossing minimisation explode: minutes for 200 samples. So before any layout:

1. a graph small enough, with no node used by too many others, is drawn as it is;
2. otherwise repeated structure is folded: inputs of one node that are the same
   chain of operations down to the same shared nodes are drawn once, their edge
   labelled with the count ("x 200"), and a chain of identical links (a loss summed
   one sample at a time) is drawn as one link with a loop that counts them;
3. if the folded graph is still too big, the learner gets a text summary (node
   counts by kind, the widest fan-in) and a sentence saying why.

``run_dot`` runs ``dot`` in its own process group with a timeout and kills it in
a ``finally``: a timeout or an interrupted kernel never leaves ``dot`` running.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections import Counter

from .env import graphviz_install_hint, run_in_own_group
from .graphmodel import Graph, title

DOT_TIMEOUT_S = 6.0  # the longest a drawing may hold the kernel
# Measured with Graphviz 2.43 on one core: a 2,000-node chain lays out in 0.6 s, a 5,000-node fan in 13 s;
# a loop that adds 80 samples' losses one by one (480 nodes, each sample's path reaching down to the
# shared w across ever more ranks) in 13 s, where its long edges need about 3,000 bends ("virtual nodes").
MAX_NODES = 500  # boxes drawn (backward nodes and saved tensors): well under a second
MAX_BENDS = 1200  # rank crossings of long edges, the cost that explodes at a shared leaf (about 0.5 s here)
SIZE = re.compile(r"\d+(\.\d+)?(,\d+(\.\d+)?)?!?")  # Graphviz's size attribute: "8", "8,5", "8,5!"

__all__ = [
    "DOT_TIMEOUT_S",
    "GraphTooSlow",
    "GraphvizMissing",
    "draw_within_limits",
    "fold",
    "install_hint",
    "layout_cost",
    "run_dot",
    "summary",
]


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
        code, out, err = run_in_own_group([exe, "-Kdot", "-Tsvg"], source.encode("utf-8"), timeout)
    except OSError as err:  # on PATH but not executable, wrong architecture, ...
        raise GraphvizMissing(install_hint(broken=str(err))) from None
    except subprocess.TimeoutExpired:
        raise GraphTooSlow(f"Graphviz did not lay this graph out within {timeout:g} s, so it was stopped.") from None
    if code != 0:
        raise GraphvizMissing(install_hint(broken=err.decode("utf-8", "replace")))
    return out.decode("utf-8")


def _ranks(model: Graph) -> tuple[list, list]:
    """Each node's longest distance from the output (dot's rank), and the nodes in that order, parents first."""
    left = model.fan_in()
    rank = [0] * len(model.nodes)
    ready = [i for i, n in enumerate(left) if n == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in model.nodes[i].inputs:
            if j is None:
                continue
            rank[j] = max(rank[j], rank[i] + 1)
            left[j] -= 1
            if left[j] == 0:
                ready.append(j)
    return rank, order


def layout_cost(model: Graph, show_saved: bool = False) -> tuple[int, int]:
    """(boxes, bends): what Graphviz must place, known before it runs."""
    rank, _ = _ranks(model)
    bends = sum(rank[child] - rank[parent] - 1 for child, parent in model.edges())
    boxes = len(model.nodes) + (sum(len(n.saved) for n in model.nodes) if show_saved else 0)
    return boxes, bends


def _fits(model: Graph, show_saved: bool) -> bool:
    boxes, bends = layout_cost(model, show_saved)
    return boxes <= MAX_NODES and bends <= MAX_BENDS


def _signatures(model: Graph) -> list:
    """A number per node, equal for nodes that root identical branches (same operations, same shared nodes)."""
    fan = model.fan_in()
    _, order = _ranks(model)
    sig, table = [0] * len(model.nodes), {}
    for i in reversed(order):  # inputs before the nodes that use them
        node = model.nodes[i]
        tokens = tuple(None if j is None else ("shared", j) if fan[j] > 1 else sig[j] for j in node.inputs)
        sig[i] = table.setdefault((node.name, node.param, tokens), len(table))
    return sig


def _spine(model: Graph, fan: list, i: int) -> int | None:
    """The position of node ``i``'s input that repeats its operation (``total = total + ...``), if just one."""
    node = model.nodes[i]
    found = [
        p for p, j in enumerate(node.inputs) if j is not None and fan[j] == 1 and model.nodes[j].name == node.name
    ]
    return found[0] if len(found) == 1 else None


def _link(model: Graph, fan: list, sig: list, i: int, p: int) -> tuple:
    """What a chain link is made of: its operation and its other inputs (the chain's own input left out)."""
    node = model.nodes[i]
    tokens = tuple(
        "chain" if q == p else None if j is None else ("shared", j) if fan[j] > 1 else sig[j]
        for q, j in enumerate(node.inputs)
    )
    return node.name, node.param, tokens


def _run(model: Graph, fan: list, sig: list, i: int) -> tuple[int, int, int | None]:
    """(links, last, position) of the chain of identical links starting at node ``i`` (links = 1: none)."""
    p = _spine(model, fan, i)
    if p is None:
        return 1, i, None
    key, links, last = _link(model, fan, sig, i, p), 1, i
    while True:
        j = model.nodes[last].inputs[p]
        if j is None or fan[j] != 1 or _link(model, fan, sig, j, p) != key:  # the chain's input may differ
            return links, last, p
        links, last = links + 1, j


def _kept_inputs(model: Graph, i: int, fan: list, sig: list, counts: dict) -> list:
    """Node ``i``'s inputs once repeated structure is folded; what was folded is counted in ``counts``."""
    inputs = list(model.nodes[i].inputs)
    links, last, p = _run(model, fan, sig, i)
    if links > 1:  # a chain of identical links: drawn once, with a loop counting them
        counts[(i, i)] = links
        inputs[p] = model.nodes[last].inputs[p]
    first: dict = {}  # signature -> the input drawn for its whole group of identical branches
    kept = []
    for j in inputs:
        if j is not None and fan[j] == 1 and sig[j] in first:
            counts[(i, first[sig[j]])] = counts.get((i, first[sig[j]]), 1) + 1
            continue
        if j is not None and fan[j] == 1:
            first[sig[j]] = j
        kept.append(j)
    return kept


def fold(model: Graph) -> tuple[Graph, dict, dict]:
    """Repeated structure drawn once: (folded graph, {(node, input): copies}, old -> new index).

    Identical branches into one node become one branch, counted on its edge; a chain of identical
    links (a loss summed one sample at a time) becomes one link, counted on a loop (key (node, node)).
    Nodes used by several others (a weight) are never folded away.
    """
    fan, sig = model.fan_in(), _signatures(model)
    kept_inputs, counts = {}, {}
    stack = [i for i in model.output_nodes if i is not None]
    while stack:
        i = stack.pop()
        if i not in kept_inputs:
            kept_inputs[i] = _kept_inputs(model, i, fan, sig, counts)
            stack.extend(j for j in kept_inputs[i] if j is not None)
    new = {old: k for k, old in enumerate(sorted(kept_inputs))}
    nodes = tuple(
        dataclasses.replace(model.nodes[old], inputs=tuple(None if j is None else new[j] for j in kept_inputs[old]))
        for old in sorted(kept_inputs)
    )
    outputs = tuple(None if i is None else new[i] for i in model.output_nodes)
    folded = dataclasses.replace(model, nodes=nodes, output_nodes=outputs)
    return folded, {(new[i], new[j]): n for (i, j), n in counts.items()}, new


def _remap(marks: dict, new: dict) -> dict:
    return dict(
        highlight={new[i] for i in marks["highlight"] if i in new},
        done={new[i] for i in marks["done"] if i in new},
        edge_labels={(new[a], new[b]): v for (a, b), v in marks["edge_labels"].items() if a in new and b in new},
    )


def summary(model: Graph, show_saved: bool = False) -> str:
    """The text a learner gets instead of a picture Graphviz could not lay out quickly: why, and what is in it."""
    boxes, bends = layout_cost(model, show_saved)
    fan = model.fan_in()
    busiest = max(range(len(fan)), key=fan.__getitem__)
    kinds = Counter(node.name for node in model.nodes).most_common()
    why = (
        f"{boxes} boxes to place (more than {MAX_NODES})"
        if boxes > MAX_NODES
        else f"its long edges would cross {bends} ranks (more than {MAX_BENDS}): paths of different lengths "
        f"meet at {title(model.nodes[busiest])}, used by {fan[busiest]} nodes"
    )
    lines = [
        f"autograd graph of {len(model.nodes)} backward nodes, not drawn: Graphviz would take too long to lay it "
        f"out ({why}), even with repeated structure folded.",
        "  nodes by kind: " + ", ".join(f"{name} x {n}" for name, n in kinds),
        f"  most used node: {title(model.nodes[busiest])}, input of {fan[busiest]} nodes",
        "  chain(tensor) prints the whole graph as text; draw a smaller case (fewer samples) to see its shape.",
    ]
    return "\n".join(lines)


def draw_within_limits(model: Graph, marks: dict, style: dict, *, direction, size, render):
    """``render`` the model as it is when Graphviz can lay it out quickly; else folded; else a summary."""
    if _fits(model, style["show_saved"]):
        return render(model, **style, **marks, direction=direction, size=size)
    folded, counts, new_index = fold(model)
    saved = style["show_saved"]
    if _fits(folded, saved):
        marks = _remap(marks, new_index)
        labels = {key: f"x {n}" for key, n in counts.items()}
        labels.update(marks.pop("edge_labels"))
        note = (
            f"folded: Graphviz would take too long to lay out all {len(model.nodes)} nodes, so repeated "
            "structure is drawn once; 'x N' on an edge counts its copies, on a loop the links of a chain"
        )
        return render(folded, **style, **marks, edge_labels=labels, direction=direction, size=size, note=note)
    graph = render(Graph(nodes=(), outputs=(), output_nodes=()), direction=direction, size=size)
    graph.text = summary(model, saved)
    graph.summary_only = True
    return graph
