"""Step through a backward pass that was already run, one node at a time.

An instrument for the "step through backward" widget of notebook 02. It runs
nothing itself: the backward loop is written out in the notebook, and it keeps
a *log* there, one entry per node it ran, in the order it ran them::

    (node, grad_output, grads)

``node`` is the backward node (a ``grad_fn``, or an ``AccumulateGrad`` node),
``grad_output`` the gradient it received, and ``grads`` what it returned, one
item per entry of ``node.next_functions`` (``None`` where nothing needs a
gradient). An ``AccumulateGrad`` node returns nothing (``grads`` is empty); its
``grad_output`` is what it adds into its leaf's ``.grad``, already summed to the
leaf's shape.

``draw_step(loss, log, step)`` draws the graph as it stands after ``step`` of
those entries: the node being run is gold, the nodes run before it have a bold
border, each edge a node has sent a gradient along carries that gradient, and
each leaf shows the ``.grad`` deposited so far. ``describe_step`` says the same
in one line of text. Step 0 is the moment before the first node runs.

Both read the one graph model (:mod:`autograd_lab.graphmodel`): the gradients a
step has deposited are data handed to the drawing; no tensor's real ``.grad`` is
read or written.
"""

from __future__ import annotations

import torch

from .arguments import check_int
from .graph import draw_model, format_tensor
from .graphmodel import Graph, Node, leaf_of, node_name, output_names, param_names, title, walk

__all__ = ["describe_step", "draw_step"]

_FORM = "a list of (node, grad_output, grads) entries, one per node run, as the notebook's backward loop records them"


def _check_log(log) -> list:
    """The log as a list of (node, grad_output, grads) triples; ``TypeError`` saying what is wrong otherwise."""
    if not isinstance(log, (list, tuple)):
        raise TypeError(f"log must be {_FORM}; got {type(log).__name__}.")
    entries = []
    for k, entry in enumerate(log):
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3):
            raise TypeError(f"log entry {k} must be a (node, grad_output, grads) triple; got {entry!r:.80}.")
        node, grad_output, grads = entry
        if not hasattr(node, "next_functions"):
            raise TypeError(f"log entry {k}: the first item must be a backward node, got {type(node).__name__}.")
        if not isinstance(grad_output, torch.Tensor):
            raise TypeError(f"log entry {k}: grad_output must be a tensor, got {type(grad_output).__name__}.")
        grads = tuple(grads) if isinstance(grads, (list, tuple)) else (grads,)
        if len(grads) > len(node.next_functions):
            raise TypeError(
                f"log entry {k}: {node_name(node)} has {len(node.next_functions)} inputs but the entry "
                f"holds {len(grads)} gradients."
            )
        entries.append((node, grad_output, grads))
    return entries


def _check_step(step, n: int) -> int:
    return check_int("step", step, f"an int from 0 (nothing run yet) to {n} (the last node)", low=0, high=n,
                     type_error=TypeError)


def _deposits_by_id(entries, step: int) -> dict:
    """{id(leaf): (leaf, gradient added so far)} after the first ``step`` entries."""
    out: dict[int, tuple] = {}
    for node, grad_output, _ in entries[:step]:
        leaf = leaf_of(node)
        if leaf is not None:
            total = out[id(leaf)][1] + grad_output if id(leaf) in out else grad_output
            out[id(leaf)] = (leaf, total)
    return out


def _edge_gradients(model: Graph, ran) -> dict:
    """{(node, input) index pair: the gradients sent along that edge so far, as text}."""
    labels: dict = {}
    for node, _, grads in ran:
        i = model.index(node)
        for j, grad in zip(model.nodes[i].inputs, grads):
            if j is None or grad is None:
                continue
            text = format_tensor(grad)
            labels[(i, j)] = f"{labels[(i, j)]}; {text}" if (i, j) in labels else text
    return labels


def _leaf_grads(model: Graph, entries, step: int) -> dict:
    """{leaf node index: what the walk has deposited into it after ``step`` entries} (absent: None)."""
    filled = _deposits_by_id(entries, step)
    grads = {}
    for i, node in enumerate(model.nodes):
        if node.is_leaf and id(node.leaf) in filled:
            grad = filled[id(node.leaf)][1]
            if grad.shape != node.leaf.shape:
                raise ValueError(
                    f"the log deposits a gradient of shape {tuple(grad.shape)} into a leaf of shape "
                    f"{tuple(node.leaf.shape)}: sum it down to the leaf's shape first (grad.sum_to_size(leaf.shape))."
                )
            grads[i] = grad
    return grads


def draw_step(loss, log, step: int, *, params=None, names=None, show_values: bool = True):
    """The graph behind ``loss`` after ``step`` entries of ``log`` have run (see the module docstring).

    Leaves show the ``.grad`` the walk has deposited so far (``None`` before it
    reaches them), whatever their real ``.grad`` holds, which is never touched.
    """
    entries = _check_log(log)
    step = _check_step(step, len(entries))
    model = walk(loss, params, what="draw_step")
    for node, _, _ in entries:
        if model.index(node) is None:
            raise ValueError(
                f"the log holds a {node_name(node)} node that is not in this loss's graph: "
                "record the log by running backward by hand on the same loss you draw."
            )
    ran = entries[:step]
    return draw_model(
        model.with_grads(_leaf_grads(model, entries, step)),
        names=output_names(names),
        show_values=show_values,
        highlight={model.index(ran[-1][0])} if ran else set(),
        done={model.index(node) for node, _, _ in ran[:-1]},
        edge_labels=_edge_gradients(model, ran),
    )


def _title(fn, names: dict) -> str:
    """The text title of a backward node met in a log: the graph model's one rule."""
    return title(None if fn is None else Node.of(fn, names))


def describe_step(log, step: int, *, params=None) -> str:
    """One line of text on what happens at ``step``: which node runs, what it receives, where its results go."""
    entries = _check_log(log)
    step = _check_step(step, len(entries))
    names = param_names(params)
    n = len(entries)
    if step == 0:
        if not entries:
            return "step 0 of 0: the log is empty; run backward by hand first."
        first, seed, _ = entries[0]
        return (
            f"step 0 of {n}: nothing has run yet. The gradient of the loss with respect to itself, "
            f"{format_tensor(seed)}, waits at {_title(first, names)}."
        )
    node, grad_output, grads = entries[step - 1]
    head = f"step {step} of {n}: {_title(node, names)}"
    leaf = leaf_of(node)
    if leaf is not None:
        total = _deposits_by_id(entries, step)[id(leaf)][1]
        name = names.get(id(leaf), "the leaf")
        tail = f" adds {format_tensor(grad_output)} into {name}.grad (now {format_tensor(total)})."
    else:
        head += f" receives {format_tensor(grad_output)}"
        sends = []
        for (child, _), grad in zip(node.next_functions, grads):
            if child is None:
                sends.append("nothing to None (that input needs no gradient)")
            else:
                sends.append(f"{format_tensor(grad) if grad is not None else 'None'} to {_title(child, names)}")
        tail = "; sends " + ", ".join(sends) + "." if sends else "; it has no inputs to send to."
    if step == n:
        tail += " Backward is finished."
    return head + tail
