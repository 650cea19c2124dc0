"""Folding: a graph too big to lay out in time, made smaller by drawing its repeated structure once.

Before any layout (:mod:`autograd_lab.layout` says what fits):

1. a graph small enough, with no node used by too many others, is drawn as it is;
2. otherwise repeated structure is folded: inputs of one node that are the same
   chain of operations down to the same shared nodes are drawn once, their edge
   labelled with the count ("x 200"), and a chain of identical links (a loss summed
   one sample at a time) is drawn as one link with a loop that counts them;
3. if the folded graph is still too big, the learner gets a text summary (node
   counts by kind, the widest fan-in) and a sentence saying why.

All of it is data handed back to the renderer (:mod:`autograd_lab.graph`): the graph to draw, its
marks by node index, and the note that says what was done; nothing here draws.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from .graphmodel import Graph, title
from .layout import MAX_BENDS, MAX_NODES, fits, layout_cost

__all__ = ["Drawable", "fold", "summary", "within_limits"]


@dataclass(frozen=True)
class Drawable:
    """What the renderer draws: ``model`` (as walked, or folded) with ``marks`` by its node indices
    (``highlight``, ``done``, ``edge_labels``) and a ``note`` saying what was folded; or, when not even the
    folded graph can be laid out in time, no model and the ``summary`` a learner reads instead."""

    model: Graph | None
    marks: dict = field(default_factory=dict)
    note: str = ""
    summary: str = ""


def _signatures(model: Graph) -> list:
    """A number per node, equal for nodes that root identical branches (same operations, same shared nodes)."""
    fan = model.fan_in()
    _, order = model.ranks()
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


def _chain_run(model: Graph, fan: list, sig: list, i: int) -> tuple[int, int, int | None]:
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
    links, last, p = _chain_run(model, fan, sig, i)
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


def within_limits(model: Graph, marks: dict, show_saved: bool = False) -> Drawable:
    """``model`` as it is when Graphviz can lay it out quickly; else folded; else a summary.

    ``marks`` holds ``highlight`` and ``done`` (sets of node indices) and ``edge_labels`` ({(node, input):
    text}); the folded graph's marks follow its new indices, and its edges carry the counts of what folded.
    """
    if fits(model, show_saved):
        return Drawable(model, marks)
    folded, counts, new_index = fold(model)
    if not fits(folded, show_saved):
        return Drawable(None, summary=summary(model, show_saved))
    moved = _remap(marks, new_index)
    labels = {key: f"x {n}" for key, n in counts.items()}
    labels.update(moved.pop("edge_labels"))
    note = (
        f"folded: Graphviz would take too long to lay out all {len(model.nodes)} nodes, so repeated "
        "structure is drawn once; 'x N' on an edge counts its copies, on a loop the links of a chain"
    )
    return Drawable(folded, {**moved, "edge_labels": labels}, note=note)
