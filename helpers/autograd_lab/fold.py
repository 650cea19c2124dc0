"""Folding: a graph too big to read (or to lay out in time), made smaller by drawing its repeated structure once.

Before any layout (:mod:`autograd_lab.engine` says what is comfortable):

1. a graph small enough, with no node used by too many others, is drawn as it is;
2. otherwise repeated structure is folded: numbered blocks that follow one another and compute the same
   thing (``h.0`` ... ``h.11`` of a transformer, known from :func:`~autograd_lab.modules.record_modules`)
   become the first block drawn in full and one box for the rest; inputs of one node that are the same
   chain of operations down to the same shared nodes are drawn once, their edge labelled with the count
   ("x 200"), and a chain of identical links (a loss summed one sample at a time) is drawn as one link with
   a loop that counts them; the same step repeated over time (a recurrent net unrolled, :mod:`autograd_lab.roll`)
   is drawn once in a dashed box that counts the steps, an arrow back into it carrying its state to the next
   step. Branches that end in different leaves, and steps that read different weights, are never merged;
3. ``depth`` collapses every module that many levels down into one box;
4. only a graph beyond any screen is refused before the layout; otherwise the layout runs under its time
   limit, and the text summary (node counts by kind, the widest fan-in, what to do) is what a learner reads
   when it runs out.

All of it is data handed back to the renderer (:mod:`autograd_lab.graph`): the graph to draw, its
marks by node index, and the note that says what was done; nothing here draws.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field

from .engine import SCREEN_BOXES, fits, layout_cost
from .graphmodel import Graph, Node, title
from .roll import roll

__all__ = ["Drawable", "Outline", "collapse", "contract", "fold", "fold_blocks", "summary", "within_limits", "wrap"]

SUMMARY_ABOVE = 100  # nodes: a graph that cannot be laid out shows as its summary above this, in full below


@dataclass(frozen=True)
class Drawable:
    """What the renderer draws: ``model`` (as walked, or folded) with ``marks`` by its node indices
    (``highlight``, ``done``, ``edge_labels``, and ``steps``: (count, nodes) of each step drawn once for many)
    and a ``note`` saying what was folded. ``boxes``: what its layout must place; ``beyond_screen``: more than
    any screen shows, so it is not laid out and its summary (:meth:`outline`) is what a learner reads instead."""

    model: Graph
    marks: dict = field(default_factory=dict)
    note: str = ""
    boxes: int = 0
    beyond_screen: bool = False
    show_saved: bool = False

    @property
    def summarised(self) -> bool:
        """Whether the graph is too big to read as text in full: when its layout fails, the summary stands in."""
        return self.beyond_screen or len(self.model.nodes) > SUMMARY_ABOVE

    def outline(self) -> Outline:
        """What its text summary says, without its tensors: ``outline().text(why)`` writes the summary."""
        return Outline.of(self.model, self.boxes)


def _signatures(model: Graph) -> list:
    """A number per node, equal for nodes that root identical branches (same operations, same shared nodes)."""
    fan = model.fan_in()
    _, order = model.ranks()
    sig, table = [0] * len(model.nodes), {}
    for i in reversed(order):  # inputs before the nodes that use them
        node = model.nodes[i]
        tokens = tuple(None if j is None else ("shared", j) if fan[j] > 1 else sig[j] for j in node.inputs)
        leaf = ("leaf", i) if node.is_leaf or node.members else None  # a branch ends in its own leaf
        sig[i] = table.setdefault((node.name, node.param, node.module, tokens, leaf), len(table))
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
    return node.name, node.param, node.module, tokens


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
    """``marks`` keyed by the new indices ``new`` maps old ones to (merged nodes share one)."""
    return dict(
        highlight={new[i] for i in marks["highlight"] if i in new},
        done={new[i] for i in marks["done"] if i in new},
        edge_labels={(new[a], new[b]): v for (a, b), v in marks["edge_labels"].items() if a in new and b in new},
    )


def contract(model: Graph, group: list, boxes: dict) -> tuple[Graph, dict]:
    """``model`` with the nodes of each group drawn as one box: (new graph, old -> new index).

    ``group`` holds per node a key or None (kept as it is); ``boxes`` maps each key to ``(name, module)``, what
    the box reads. A box's inputs are its members' inputs outside it, each once.
    """
    keys, order = {}, []  # the new nodes in order: a kept node, or a box at its first member
    for i, key in enumerate(group):
        if key is None:
            order.append(("node", i))
        elif key not in keys:
            keys[key] = len(order)
            order.append(("box", key))
    position = {item: k for k, item in enumerate(order)}
    new = {i: position[("node", i)] if key is None else keys[key] for i, key in enumerate(group)}
    members: dict = {}
    for i, key in enumerate(group):
        if key is not None:
            members.setdefault(key, []).append(i)
    nodes = []
    for kind, item in order:
        if kind == "node":
            node = model.nodes[item]
            inputs, seen = [], set()
            for j in node.inputs:
                target = None if j is None else new[j]
                if j is not None and group[j] is not None:  # into a box: one edge per box
                    if target in seen:
                        continue
                    seen.add(target)
                inputs.append(target)
            nodes.append(dataclasses.replace(node, inputs=tuple(inputs)))
            continue
        outside = []
        for i in members[item]:
            for j in model.nodes[i].inputs:
                if j is not None and group[j] != item and new[j] not in outside:
                    outside.append(new[j])
        name, module = boxes[item]
        nodes.append(Node(fn=None, name=name, inputs=tuple(outside), module=module, members=len(members[item])))
    outputs = tuple(None if i is None else new[i] for i in model.output_nodes)
    return dataclasses.replace(model, nodes=tuple(nodes), output_nodes=outputs), new


def collapse(model: Graph, depth: int, kinds: dict) -> tuple[Graph, dict]:
    """Each module ``depth`` levels down (``h.3`` at depth 2, ``h`` at 1) drawn as one box, its class and its
    node count written in it; nodes of the model's own forward (and unrecorded ones) stay as they are."""
    group = []
    for node in model.nodes:
        key = None
        if node.module:  # "" (the model's own forward) and None (not recorded) stay
            key = ".".join(node.module.split(".")[:depth])
        group.append(key)
    boxes = {key: (kinds.get(key, "module"), key) for key in group if key is not None}
    return contract(model, group, boxes)


_NUMBERED = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")


def _blocks(model: Graph) -> dict:
    """{(container, index): member nodes} for each numbered module (``h.3``) and what it made, its leaves
    included, at the outermost numbered level of each node's module."""
    blocks: dict = {}
    for i, node in enumerate(model.nodes):
        m = _NUMBERED.search(node.module or "")
        if m:
            blocks.setdefault((node.module[:m.start(1)].rstrip("."), int(m[1])), []).append(i)
    return blocks


def _block_signature(model: Graph, members: list, prefix: str) -> tuple:
    """What a block is made of, its own names left out: equal for blocks that are the same computation."""
    local = {i: k for k, i in enumerate(members)}

    def rel(name):
        return None if name is None else name[len(prefix):]

    return tuple(
        (n.name, rel(n.module), rel(n.param), tuple(n.leaf.shape) if n.leaf is not None else None,
         tuple(None if j is None else local.get(j, "outside") for j in n.inputs))
        for n in (model.nodes[i] for i in members)
    )


def fold_blocks(model: Graph, kinds: dict) -> tuple[Graph, dict, list]:
    """Runs of numbered blocks that follow one another and compute the same thing (``h.0`` ... ``h.11``): the
    first drawn in full, the rest as one box. (new graph, old -> new index, one sentence per run folded)."""
    blocks = _blocks(model)
    group, boxes, said = [None] * len(model.nodes), {}, []
    for parent in dict.fromkeys(p for p, _ in blocks):
        numbers = sorted(k for p, k in blocks if p == parent)
        sigs = {k: _block_signature(model, blocks[(parent, k)], f"{parent}.{k}." if parent else f"{k}.")
                for k in numbers}
        start = 0
        while start < len(numbers):
            end = start
            while (end + 1 < len(numbers) and numbers[end + 1] == numbers[end] + 1
                   and sigs[numbers[end + 1]] == sigs[numbers[start]]):
                end += 1
            if end > start:
                first, second, last = (f"{parent}.{numbers[k]}" if parent else str(numbers[k])
                                       for k in (start, start + 1, end))
                kind = kinds.get(first, "block")
                key = f"{second} - {last}"
                boxes[key] = (f"{end - start} more blocks identical to {first} ({kind})", key)
                for k in numbers[start + 1:end + 1]:
                    for i in blocks[(parent, k)]:
                        group[i] = key
                said.append(f"{first} - {last}: {end - start + 1} identical blocks, {first} drawn")
            start = end + 1
    if not boxes:
        return model, {i: i for i in range(len(model.nodes))}, []
    folded, new = contract(model, group, boxes)
    return folded, new, said


MODEL_ADVICE = ("A model's graph does not shrink with the batch. Draw less of it: record the forward with "
                "record_modules(model) and pass depth=1 (each top module one box) or fold=True; draw one block "
                "(draw_graph(model.h[0](x)) or the like); or give the layout more time: timeout=60.")
LOOP_ADVICE = ("chain(tensor) prints the whole graph as text; draw a smaller case (fewer samples or steps), "
               "pass fold=True, or give the layout more time: timeout=60.")


@dataclass(frozen=True)
class Outline:
    """What the text summary of a graph says, kept without its tensors (a drawing kept in a notebook's output
    history then keeps no autograd graph alive); :meth:`text` writes it, when it is shown.

    ``names``: each node's name; ``busiest``: the node most used, and ``used_by``: by how many; ``boxes``: what
    the layout must place; ``model_like``: nodes named by parameter or module (the advice fits a model)."""

    names: tuple
    busiest: str
    used_by: int
    boxes: int
    model_like: bool

    @classmethod
    def of(cls, model: Graph, boxes: int) -> Outline:
        fan = model.fan_in()
        busiest = max(range(len(fan)), key=fan.__getitem__)
        model_like = any(n.module is not None or n.param is not None for n in model.nodes)
        return cls(tuple(n.name for n in model.nodes), title(model.nodes[busiest]), fan[busiest], boxes, model_like)

    def text(self, why: str = "") -> str:
        """The text a learner gets instead of a picture that could not be laid out: why, what is in it, what
        to do (``why`` left out: more boxes than any screen shows)."""
        kinds = Counter(self.names).most_common()
        why = why or f"{self.boxes} boxes, more than any screen shows ({SCREEN_BOXES})"
        lines = [
            f"autograd graph of {len(self.names)} nodes, not drawn: {why}.",
            *wrap("nodes by kind: " + ", ".join(f"{name} x {n}" for name, n in kinds)),
            f"  most used node: {self.busiest}, input of {self.used_by} nodes",
            *wrap(MODEL_ADVICE if self.model_like else LOOP_ADVICE),
        ]
        return "\n".join(lines)


def summary(model: Graph, show_saved: bool = False, why: str = "") -> str:
    """The text a learner gets instead of a picture of ``model`` that could not be laid out (:class:`Outline`)."""
    return Outline.of(model, layout_cost(model, show_saved)[0]).text(why)


def wrap(text: str, width: int = 110, indent: str = "  ") -> list:
    """``text`` as lines of at most ``width`` characters, each indented (a report line never runs off)."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False)


def _fold(model: Graph, marks: dict, kinds: dict) -> tuple[Graph, dict, dict, tuple, list]:
    """``model`` with its repeated structure drawn once: numbered blocks, then identical branches and chains of
    identical links, then the same step repeated over time (:mod:`autograd_lab.roll`). (graph, marks, edge
    labels of what was folded, the rolled steps, one sentence per kind of folding done)."""
    model, new, said = fold_blocks(model, kinds)
    marks = _remap(marks, new)
    folded, counts, new = fold(model)
    labels = {}
    if counts or said:
        model, marks = folded, _remap(marks, new)
        labels = {key: f"x {n}" for key, n in counts.items()}
    if counts:
        said.append("'x N' on an edge counts identical branches, on a loop the links of a chain")
    rolled = roll(model)
    if rolled.said:
        model, marks, new = rolled.graph, _remap(marks, rolled.new), rolled.new
        labels = {(new[a], new[b]): v for (a, b), v in labels.items() if a in new and b in new} | rolled.labels
        said += [*rolled.said, "'next step' on an arrow back into a step: its state, carried into the next step"]
        if any(text != "next step" for text in rolled.labels.values()):
            said.append("'x N' on an edge out of a dashed box: read from every step")
    return model, marks, labels, rolled.steps, said


def within_limits(model: Graph, marks: dict, show_saved: bool = False, *, folding="auto", depth=None,
                  kinds=None, any_size: bool = False) -> Drawable:
    """What to draw of ``model``: collapsed to ``depth`` (module boxes), folded, or as it is.

    ``folding`` "auto" folds repeated blocks, identical branches and steps repeated over time when the graph is
    too big to read comfortably (:func:`~autograd_lab.engine.fits`), True always, False never. A graph with more
    boxes than any screen shows is marked ``beyond_screen`` (shown as its summary only), unless ``any_size``.
    ``marks`` holds ``highlight`` and ``done`` (sets of node indices) and ``edge_labels`` ({(node, input):
    text}); they follow the nodes' new indices. The layout's cost is counted once for the graph drawn.
    """
    notes, labels, steps, kinds = [], {}, (), kinds or {}
    if depth is not None:
        model, new = collapse(model, depth, kinds)
        marks = _remap(marks, new)
        notes.append(f"depth {depth}: each module {depth} level{'s' if depth > 1 else ''} down drawn as one box")
    cost = layout_cost(model, show_saved)
    if folding is True or (folding == "auto" and not fits(cost)):
        size = len(model.nodes)
        folded, marks, labels, steps, said = _fold(model, marks, kinds)
        if said:
            model, cost = folded, layout_cost(folded, show_saved)
            notes.append(f"folded from {size} nodes, repeated structure drawn once: " + "; ".join(said))
    labels.update(marks.pop("edge_labels"))
    marks = {**marks, "edge_labels": labels, "steps": steps}
    return Drawable(model, marks, note="; ".join(notes), boxes=cost[0],
                    beyond_screen=cost[0] > SCREEN_BOXES and not any_size, show_saved=show_saved)
