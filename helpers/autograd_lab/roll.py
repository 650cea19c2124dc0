"""Rolling: the same step repeated over time (a recurrent net unrolled) drawn once, with its count.

A recurrent net builds one step of its cell per element of the sequence: the same operations, reading the same
weights, each step reading the state (``h``, or ``h`` and ``c``) that the step before it made. Unrolled over
tens of steps that is hundreds of nodes, and every step's long edges to the shared weights make it slow to lay
out. Rolled, one step is drawn in full, in a dashed box labelled with its count (``x 20 steps``), and an
arrow back into it, labelled ``next step``, carries its state from each step to the next (TorchLens draws
recurrent loops rolled the same way).

How the steps are found, in the walked graph (:class:`~autograd_lab.graphmodel.Graph`) alone:

1. nodes that compute the same thing from the same kinds of inputs a few levels down are candidates for the
   same position in successive steps (the ``h`` of each step);
2. for such candidates, ordered from the first step to the last, the step of each one is what it reaches
   that the ones before it do not reach, and the step before it is one whose step it reads (two loops that
   run side by side, the directions of a bidirectional net, are two chains);
3. two successive steps are the same step when a walk of both, side by side, pairs every node with one of the
   same operation and the same input positions, and each input outside the step is either the very node the
   other step reads there (a weight, the input sequence: shared) or the state the step before handed on, at
   the position the step before read its own state from. A step that holds a leaf of its own (different
   weights), reads a different node, or does different operations ends the run. A step must read at least one
   shared node that leads to a leaf (the weights it reuses): a plain chain of operations is not a loop. Each
   step may read its own output of a shared node (``x[t]``, the element of the sequence for that step).

Only runs of at least ``MIN_STEPS`` steps are rolled. The first step of a run may read no state (an initial
state that records no graph, ``None``) or an initial state of its own (``h0``) where the others read the step
before: it is still the same step, and it is found from the state the second step reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .graphmodel import Graph

__all__ = ["MIN_STEPS", "Rolled", "Run", "roll", "runs"]

MIN_STEPS = 3  # a step repeated fewer times is drawn as it is
KEY_DEPTH = 3  # levels of inputs that make two nodes candidates for the same position in successive steps


@dataclass(frozen=True)
class Run:
    """``steps`` successive steps that are the same step: ``drawn`` maps every node of them to its
    counterpart in the first step (the one drawn); ``state`` holds (node, input) pairs of the first step, an
    input the next step reads from the step before it; ``reused``: the names of the leaves every step reads."""

    steps: int
    size: int
    drawn: dict
    state: tuple
    reused: tuple

    @property
    def removed(self) -> int:
        return (self.steps - 1) * self.size


def _position_keys(model: Graph) -> list:
    """A number per node, equal for nodes with the same operation whose inputs, ``KEY_DEPTH`` levels down, have
    the same operations; a leaf or a box is its own."""
    table: dict = {}
    keys = [table.setdefault((n.name, n.param, n.module, i if n.is_leaf or n.members else None), len(table))
            for i, n in enumerate(model.nodes)]
    for _ in range(KEY_DEPTH):
        keys = [table.setdefault((keys[i], tuple(None if j is None else keys[j] for j in n.inputs)), len(table))
                for i, n in enumerate(model.nodes)]
    return keys


def _leafy(model: Graph, order: list) -> list:
    """Per node: whether a leaf is (or is below) it."""
    below = [False] * len(model.nodes)
    for i in reversed(order):  # inputs before the nodes that use them
        node = model.nodes[i]
        below[i] = node.is_leaf or any(j is not None and below[j] for j in node.inputs)
    return below


def _reach(model: Graph, start: int, seen: set) -> set:
    """The nodes ``start`` reaches (itself included) that are not in ``seen``; ``seen`` takes them in."""
    body, stack = set(), [start]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        body.add(i)
        stack.extend(j for j in model.nodes[i].inputs if j is not None and j not in seen)
    return body


def _bodies(model: Graph, chain: list) -> tuple[list, dict]:
    """Per member of ``chain`` (first step first): the nodes it reaches that the members before it do not; and
    {node: the member whose body holds it}."""
    seen: set = set()
    bodies = [_reach(model, start, seen) for start in chain]
    return bodies, {i: t for t, body in enumerate(bodies) for i in body}


def _read_from(model: Graph, body: set, owner: dict) -> list:
    """The members whose bodies hold a node that ``body`` reads, the latest first: where its step before is."""
    found = {owner[j] for i in body for j in model.nodes[i].inputs if j is not None and j not in body and j in owner}
    return sorted(found, reverse=True)


def _outputs(node) -> tuple:
    """Which output of each of its inputs a backward node reads (``next_functions``' numbers; None where a
    folded node no longer says)."""
    nexts = getattr(node.fn, "next_functions", None)
    if nexts is None or len(nexts) != len(node.inputs):
        return (None,) * len(node.inputs)
    return tuple(number for _, number in nexts)


def _alike(a, b) -> bool:
    """Whether two nodes of successive steps do the same thing: same operation, module, number of inputs."""
    if a.is_leaf or a.members or b.is_leaf or b.members:  # a step's own leaf: different weights in each step
        return False
    return (a.name, a.param, a.module, len(a.inputs)) == (b.name, b.param, b.module, len(b.inputs))


@dataclass
class _Match:
    pairs: dict  # node of the later step -> its counterpart in the earlier step
    state: dict  # a node of the earlier step read by the later one -> what the earlier step read there
    consumers: list  # (node of the later step, node of the earlier step it reads): the state handed on
    shared: set  # nodes outside both steps that both read at the same positions
    renumbered: bool = False  # the state is read from another output of its node than the earlier step read


_MISSING = object()


def _pair_walk(model: Graph, later: int, earlier: int, body: set, before: set) -> _Match | None:
    """Walk step ``body`` (from ``later``) and the step before it (``before``, from ``earlier``) side by side."""
    nodes = model.nodes
    found = _Match({}, {}, [], set())
    taken: set = set()
    stack = [(later, earlier)]
    while stack:
        v, u = stack.pop()
        if v in found.pairs:
            if found.pairs[v] != u:
                return None
            continue
        if u is None or u in taken or u not in before or not _alike(nodes[v], nodes[u]):
            return None
        found.pairs[v] = u
        taken.add(u)
        for x, y, a, b in zip(nodes[v].inputs, nodes[u].inputs, _outputs(nodes[v]), _outputs(nodes[u])):
            if x == y and x is not None and x not in body:  # a node both read: each step may read its own
                found.shared.add(x)  # output of it (the sequence's element for that step)
            elif x is not None and x not in body:  # the state the step before handed on, or a node not shared
                if x not in before or found.state.setdefault(x, y) != y:
                    return None
                found.consumers.append((v, x))
                found.renumbered |= a != b  # an initial state may be another output (h0[1] for a 2nd layer)
            elif a != b or (x is None) != (y is None):  # another output read, or a state missing
                return None
            elif x is not None:
                stack.append((x, y))
    return found


def _match(model: Graph, later: int, earlier: int, bodies: tuple, handed: dict | None, leafy: list):
    """The pairing of step ``bodies[1]`` (from ``later``) with the step before it (``bodies[0]``, from
    ``earlier``), or None when they are not the same step. ``handed``: the pairing of the earlier step with
    the one before it (None when the earlier step is the first of a run, whose body may hold what comes before
    the loop: only the part paired with the later step is its step)."""
    body, before = bodies
    found = _pair_walk(model, later, earlier, body, before)
    if found is None or len(found.pairs) != len(body) or not found.state:
        return None
    step = set(found.pairs.values())
    if found.shared & step or any(x not in step for x in found.state):
        return None
    if not any(leafy[x] for x in found.shared):  # reads no weights: a chain of operations, not a loop
        return None
    if handed is None:
        if any(y in step for y in found.state.values()):
            return None
    elif (len(step) != len(before) or found.renumbered
          or any(handed.get(x, _MISSING) != y for x, y in found.state.items())):
        return None
    return found


def _run(model: Graph, matches: list) -> Run:
    """The run of the steps that ``matches`` (each step paired with the one before it, in order) pair up."""
    drawn = {u: u for u in matches[0].pairs.values()}
    for found in matches:
        drawn.update({v: drawn[u] for v, u in found.pairs.items()})
    first = matches[0]
    state = tuple(dict.fromkeys((drawn[v], x) for v, x in first.consumers))
    reused = tuple(dict.fromkeys(model.nodes[x].param or "leaf" for x in sorted(first.shared)
                                 if model.nodes[x].is_leaf))
    return Run(len(matches) + 1, len(first.pairs), drawn, state, reused)


def _extend(model: Graph, first: int, matches: list, leafy: list) -> list:
    """``matches`` (a run whose first step ends at ``first``) with the steps before it that are the same step,
    found from the state the first step reads. The first step of a loop reads no state (or an initial one), so
    its end is not a candidate like the others' (its inputs differ a few levels down)."""
    while matches[0].state.get(first) is not None:
        earlier = matches[0].state[first]
        before = _reach(model, earlier, set())
        body = _reach(model, first, set(before))
        found = _match(model, first, earlier, (body, before), None, leafy)
        if (found is None or set(matches[0].pairs.values()) != body or matches[0].renumbered
                or any(found.pairs.get(x, _MISSING) != y for x, y in matches[0].state.items())):
            break
        matches, first = [found, *matches], earlier
    return matches


def _chain_runs(model: Graph, chain: list, leafy: list) -> list:
    """The runs of at least ``MIN_STEPS`` same steps among ``chain`` (candidates, first step first). Each member's
    step before it is the member whose step it reads that is the same step: chains that run side by side (the
    two directions of a bidirectional net) are told apart."""
    bodies, owner = _bodies(model, chain)
    matched, after = {}, {}  # member -> its pairing with the step before; member -> the step after it
    for t in range(1, len(chain)):
        for p in _read_from(model, bodies[t], owner):
            if p in after:
                continue
            handed = matched[p].pairs if p in matched else None
            match = _match(model, chain[t], chain[p], (bodies[t], bodies[p]), handed, leafy)
            if match is not None:
                matched[t], after[p] = match, t
                break
    found = []
    for start in (p for p in after if p not in matched):  # a run's first step: no step before it
        matches, t = [], after[start]
        while True:
            matches.append(matched[t])
            if t not in after:
                break
            t = after[t]
        found.append(_extend(model, chain[start], matches, leafy))
    return [_run(model, m) for m in found if len(m) + 1 >= MIN_STEPS]


def runs(model: Graph) -> list:
    """The runs of the same step repeated over time in ``model`` that rolling draws once, none sharing a node:
    of two ways to cut the same loop into steps, the one that rolls more nodes, hands on fewer, and ends
    nearer the output (a step ends at its state, e.g. ``h``) is kept."""
    rank, order = model.ranks()
    keys = _position_keys(model)
    groups: dict = {}
    for i, node in enumerate(model.nodes):
        if not node.is_leaf and not node.members:
            groups.setdefault(keys[i], []).append(i)
    leafy = _leafy(model, order)
    candidates, covered = [], set()
    chains = [sorted(g, key=lambda i: (-rank[i], i)) for g in groups.values() if len(g) >= MIN_STEPS]
    for chain in sorted(chains, key=lambda c: (rank[c[-1]], c[-1])):  # a step's end first
        if covered.issuperset(chain):  # the same loop, cut elsewhere
            continue
        for run in _chain_runs(model, chain, leafy):
            candidates.append((-run.removed, len(run.state), len(candidates), run))
            covered.update(run.drawn)
    chosen, taken = [], set()
    for *_, run in sorted(candidates, key=lambda c: c[:3]):
        if taken.isdisjoint(run.drawn):
            chosen.append(run)
            taken.update(run.drawn)
    return chosen


def _inputs(model: Graph, i: int, rep: list, counts: dict) -> list:
    """Node ``i``'s inputs, each standing for the step drawn; reads of the same node from several steps
    become one, counted in ``counts``."""
    inputs, first = [], {}
    for j in model.nodes[i].inputs:
        r = None if j is None else rep[j]
        if r is not None and r in first and first[r] != j:
            counts[(i, r)] = counts.get((i, r), 1) + 1
            continue
        if r is not None:
            first.setdefault(r, j)
        inputs.append(r)
    return inputs


@dataclass(frozen=True)
class Rolled:
    """A graph with each run of the same step drawn once: ``graph``, ``new`` (old -> new index), ``labels``
    ({(node, input): text}: ``next step`` on an arrow back into the step drawn, its state carried into the next
    step, which is not an edge of the graph, so that it stays acyclic; ``x N`` where a node read that node of
    every step), ``steps`` ((count, the drawn step's nodes) per run) and ``said`` (one sentence per run)."""

    graph: Graph
    new: dict
    labels: dict
    steps: tuple
    said: tuple


def roll(model: Graph) -> Rolled:
    """``model`` with each run of the same step repeated over time drawn once (:func:`runs`)."""
    found = runs(model)
    if not found:
        return Rolled(model, {i: i for i in range(len(model.nodes))}, {}, (), ())
    rep = list(range(len(model.nodes)))
    for run in found:
        for v, u in run.drawn.items():
            rep[v] = u
    kept, counts = {}, {}
    stack = [i for i in model.output_nodes if i is not None]
    while stack:
        i = rep[stack.pop()]
        if i not in kept:
            kept[i] = _inputs(model, i, rep, counts)
            stack.extend(j for j in kept[i] if j is not None)
    index = {old: k for k, old in enumerate(sorted(kept))}
    nodes = tuple(dataclasses.replace(model.nodes[old], inputs=tuple(None if j is None else index[j] for j in inputs))
                  for old, inputs in sorted(kept.items()))
    outputs = tuple(None if i is None else index[rep[i]] for i in model.output_nodes)
    labels = {(index[i], index[j]): f"x {n}" for (i, j), n in counts.items()}
    steps, said = [], []
    for run in found:
        labels.update({(index[v], index[x]): "next step" for v, x in run.state})
        steps.append((run.steps, tuple(sorted(index[u] for u in set(run.drawn.values())))))
        reusing = f", reusing {', '.join(run.reused)}" if run.reused else ""
        said.append(f"{run.steps} steps of the same {run.size} nodes{reusing}, drawn once in a dashed box")
    graph = dataclasses.replace(model, nodes=nodes, output_nodes=outputs)
    new = {i: index[rep[i]] for i in range(len(model.nodes)) if rep[i] in index}
    return Rolled(graph, new, labels, tuple(steps), tuple(said))
