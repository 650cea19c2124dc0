"""Draw an autograd graph the same way every time.

The instrument behind every picture in the course. It follows torchviz's
conventions (backward nodes grey, leaves that receive ``.grad`` blue, saved
tensors orange, the output green) and adds what a learner needs to read a graph:
parameter names, leaf values, each leaf's ``.grad`` once backward has run.

Node names are given in order of appearance (``n0``, ``n1``, ...) instead of
torchviz's ``id()``-based names, so the same graph gives the same SVG bytes in any
process, and nbval can compare graphs like any other output.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterable, Mapping

import graphviz
import torch

# torchviz's own constants and names: we draw with its conventions.
SAVED_PREFIX = "_saved_"
COLOURS = {
    "op": "lightgrey",  # a backward node (grad_fn)
    "leaf": "lightblue",  # a leaf that receives .grad (AccumulateGrad)
    "saved": "orange",  # a tensor saved for backward
    "output": "darkolivegreen1",  # the tensor you drew
    "highlight": "gold",  # the node a step-through is running
    "nograd": "white",  # a tensor that records no graph
}
FONT = "Helvetica"

__all__ = [
    "AutogradGraph",
    "GraphvizMissing",
    "chain",
    "draw_graph",
    "graph_nodes",
    "install_hint",
    "node_name",
]


class GraphvizMissing(RuntimeError):
    """Raised when a graph must be rendered and the Graphviz ``dot`` program is absent."""


def install_hint() -> str:
    """The commands that install Graphviz's ``dot``, the current platform first."""
    commands = {
        "Debian/Ubuntu": "sudo apt-get install graphviz",
        "macOS (Homebrew)": "brew install graphviz",
        "Windows": "winget install graphviz   (or: choco install graphviz), then reopen the terminal",
        "conda": "conda install -c conda-forge graphviz",
    }
    first = {"linux": "Debian/Ubuntu", "darwin": "macOS (Homebrew)", "win32": "Windows"}.get(sys.platform)
    if "CONDA_PREFIX" in __import__("os").environ:
        first = "conda"
    order = ([first] if first else []) + [k for k in commands if k != first]
    lines = [f"  {name:<17} {commands[name]}" for name in order]
    return (
        "Graphviz's `dot` program was not found on PATH, so this graph cannot be drawn.\n"
        "Install it, then restart the kernel:\n" + "\n".join(lines)
    )


def node_name(fn) -> str:
    """The class name of a backward node, e.g. ``MulBackward0``; ``None`` for a missing input."""
    return "None" if fn is None else type(fn).__name__


def _check_tensor(value, what="draw_graph"):
    if isinstance(value, torch.Tensor):
        return
    raise TypeError(
        f"{what} expects a torch.Tensor (for example a loss), got {type(value).__name__}. "
        "Pass the tensor whose graph you want to see, e.g. draw_graph(loss)."
    )


def _roots(tensors):
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, (list, tuple)) and tensors:
        for t in tensors:
            _check_tensor(t)
        return list(tensors)
    _check_tensor(tensors)
    return []  # not reached


def graph_nodes(tensors) -> list:
    """Every backward node reachable from ``tensors``, in order of first appearance.

    Depth-first along ``grad_fn.next_functions``, inputs in order: the order the
    drawing and the text chain use. ``AccumulateGrad`` nodes are included.
    """
    seen: dict[int, object] = {}
    order = []
    stack = [t.grad_fn for t in reversed(_roots(tensors)) if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        order.append(fn)
        for child, _ in reversed(fn.next_functions):
            if child is not None and id(child) not in seen:
                stack.append(child)
    return order


def _param_names(params) -> dict[int, str]:
    if params is None:
        return {}
    if isinstance(params, torch.nn.Module):
        items = params.named_parameters()
    elif isinstance(params, Mapping):
        items = params.items()
    elif isinstance(params, Iterable):
        items = params
    else:
        raise TypeError(
            "params must be a dict {name: tensor}, an nn.Module, or (name, tensor) pairs; "
            f"got {type(params).__name__}."
        )
    names = {}
    for pair in items:
        try:
            name, tensor = pair
        except (TypeError, ValueError):
            raise TypeError(f"params must hold (name, tensor) pairs; got {pair!r}.") from None
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"params[{name!r}] must be a tensor, got {type(tensor).__name__}.")
        names[id(tensor)] = str(name)
    return names


def _fmt_number(x: float) -> str:
    text = f"{x:.4g}"
    return text if any(c in text for c in ".enia") else text + "."


def format_tensor(t: torch.Tensor, max_values: int = 6) -> str:
    """A short, stable text for a tensor: its value when small, else its shape."""
    t = t.detach()
    if t.numel() == 0 or t.numel() > max_values or t.is_complex():
        return "shape (" + ", ".join(str(s) for s in t.shape) + ")"
    values = t.to("cpu", torch.float64).flatten().tolist()
    if t.dim() == 0:
        return _fmt_number(values[0])
    body = ", ".join(_fmt_number(v) for v in values)
    return f"[{body}]" if t.dim() == 1 else f"[{body}] shape ({', '.join(str(s) for s in t.shape)})"


def _saved_tensors(fn):
    """(name, tensor) for every tensor a backward node saved, in a stable order."""
    out = []
    for attr in sorted(dir(fn)):
        if not attr.startswith(SAVED_PREFIX):
            continue
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by an earlier backward
            continue
        name = attr[len(SAVED_PREFIX):]
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, tuple):
            out.extend((f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor))
    return out


_SVG_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)


class AutogradGraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that shows itself as SVG in Jupyter, and as text without Graphviz.

    ``text`` holds the graph's structure (its labels and edges): the part of a
    graph that is the same under every Graphviz release, and what nbval compares.
    """

    text: str = ""

    def svg(self) -> str:
        """The SVG, without the comments in which Graphviz writes its version."""
        try:
            raw = self.pipe(format="svg", encoding="utf-8")
        except graphviz.ExecutableNotFound:
            raise GraphvizMissing(install_hint()) from None
        return _SVG_COMMENT.sub("", raw)

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        if shutil.which("dot") is None:
            message = install_hint() + "\n\nThe same graph as text:\n" + self.text
            return {"text/plain": message}
        return {"image/svg+xml": self.svg(), "text/plain": self.text}

    def __repr__(self) -> str:
        return self.text or super().__repr__()


def _label(*lines: str) -> str:
    return "\n".join(line for line in lines if line)


def draw_graph(
    tensors,
    params=None,
    *,
    names=None,
    show_saved: bool = False,
    show_values: bool = True,
    show_grads: bool = True,
    highlight=(),
    edge_labels: Mapping | None = None,
    done=(),
    direction: str = "BT",
    size: str | None = None,
) -> AutogradGraph:
    """Draw the autograd graph behind ``tensors`` (a tensor or a list of them).

    params      names for leaves: a dict {name: tensor}, an nn.Module, or (name, tensor) pairs.
    names       names for the drawn output tensors, e.g. {"loss": loss}.
    show_saved  add the tensors each node saved for backward (orange, dashed edges).
    show_values write small leaf values on the leaves; show_grads writes their ``.grad``.
    highlight   backward nodes to fill gold (a step-through marks the node being run).
    edge_labels {(node, input_node): text} written on the edge between two backward nodes.
    done        backward nodes already run, drawn with a bold border.
    direction   Graphviz rankdir: "BT" (the default) puts the output at the top, the leaves at the bottom,
                and arrows follow the forward pass upwards; "TB" turns it upside down.
    """
    roots = _roots(tensors)
    pnames = _param_names(params)
    out_names = {id(t): str(n) for n, t in (names or {}).items()}
    highlight_ids = {id(h) for h in highlight}
    done_ids = {id(d) for d in done}
    labels = {(id(a), id(b)): str(v) for (a, b), v in (edge_labels or {}).items()}

    graph = AutogradGraph(
        name="autograd",
        format="svg",
        graph_attr={"rankdir": direction, "fontname": FONT, "size": size or "", "nodesep": "0.3", "ranksep": "0.35"},
        node_attr={"style": "filled", "shape": "box", "fontname": FONT, "fontsize": "12", "height": "0.2"},
        edge_attr={"fontname": FONT, "fontsize": "10"},
    )
    if not graph.graph_attr["size"]:
        del graph.graph_attr["size"]

    nodes = graph_nodes(roots)
    ids = {id(fn): f"n{i}" for i, fn in enumerate(nodes)}
    text_lines = []

    for fn in nodes:
        nid = ids[id(fn)]
        fill = COLOURS["op"]
        if hasattr(fn, "variable"):
            var = fn.variable
            name = pnames.get(id(var), "leaf")
            small = show_values and var.numel() <= 6
            label = _label(
                name,
                f"value {format_tensor(var)}" if small else format_tensor(var, max_values=0) if var.dim() else "",
                (f"grad {format_tensor(var.grad)}" if var.grad is not None else "grad None") if show_grads else "",
            )
            fill = COLOURS["leaf"]
            text_lines.append(f"{nid} AccumulateGrad -> leaf {label.replace(chr(10), ' | ')}")
        else:
            label = node_name(fn)
            text_lines.append(f"{nid} {label}")
        if id(fn) in highlight_ids:
            fill = COLOURS["highlight"]
            text_lines[-1] += "  [running]"
        attrs = {"fillcolor": fill}
        if id(fn) in done_ids:
            attrs["penwidth"] = "2.5"
            text_lines[-1] += "  [done]"
        graph.node(nid, label, **attrs)

        if show_saved:
            for k, (sname, saved) in enumerate(_saved_tensors(fn)):
                sid = f"{nid}s{k}"
                slabel = _label(sname, format_tensor(saved))
                graph.node(sid, slabel, fillcolor=COLOURS["saved"])
                graph.edge(sid, nid, style="dashed", arrowhead="none")
                text_lines.append(f"{sid} saved by {nid}: {slabel.replace(chr(10), ' = ')}")

    for fn in nodes:
        for child, _ in fn.next_functions:
            if child is None:
                continue
            text = labels.get((id(fn), id(child)), "")
            graph.edge(ids[id(child)], ids[id(fn)], label=f" {text} " if text else "")
            text_lines.append(f"{ids[id(child)]} -> {ids[id(fn)]}" + (f"  {text}" if text else ""))

    for k, t in enumerate(roots):
        oid = f"out{k}"
        name = out_names.get(id(t), "output" if len(roots) == 1 else f"output {k}")
        if t.grad_fn is None:
            why = (
                "a leaf: nothing recorded before it"
                if t.requires_grad
                else "requires_grad=False: no graph was recorded"
            )
            label = _label(name, format_tensor(t) if show_values else "", why)
            graph.node(oid, label, fillcolor=COLOURS["leaf"] if t.requires_grad else COLOURS["nograd"])
            text_lines.append(f"{oid} {label.replace(chr(10), ' | ')}")
            continue
        label = _label(name, format_tensor(t) if show_values else "")
        graph.node(oid, label, fillcolor=COLOURS["output"])
        graph.edge(ids[id(t.grad_fn)], oid, style="dashed", arrowhead="none")
        text_lines.append(f"{oid} {label.replace(chr(10), ' | ')} <- {ids[id(t.grad_fn)]}")

    graph.text = "\n".join(["autograd graph:"] + ["  " + line for line in text_lines])
    return graph


def chain(tensor, *, show_none: bool = False, params=None) -> str:
    """The graph behind ``tensor`` as text: ``MeanBackward0 -> PowBackward0 -> ...``.

    A node with one input continues the line; a node with several puts each
    input on its own indented line. A node met a second time is named, not
    repeated. Leaves read ``AccumulateGrad(name)`` when ``params`` names them.
    """
    _check_tensor(tensor, "chain")
    if tensor.grad_fn is None:
        why = "a leaf tensor" if tensor.requires_grad else "requires_grad=False"
        return f"(no graph: {why})"
    pnames = _param_names(params)
    seen: dict[int, object] = {}  # keeps each node alive: a freed node's id() can be reused by the next one
    lines: list[str] = []

    def title(fn):
        if fn is None:
            return "None"
        if hasattr(fn, "variable") and id(fn.variable) in pnames:
            return f"AccumulateGrad({pnames[id(fn.variable)]})"
        return node_name(fn)

    def run(fn, indent, lead=""):
        parts = []
        while True:
            if fn is not None and id(fn) in seen:
                parts.append(f"({title(fn)}, shared: see above)")
                break
            parts.append(title(fn))
            if fn is None:
                break
            seen[id(fn)] = fn
            inputs = [c for c, _ in fn.next_functions if show_none or c is not None]
            if len(inputs) == 1:
                fn = inputs[0]
                continue
            lines.append(" " * indent + lead + " -> ".join(parts))
            for child in inputs:
                run(child, indent + 4, "-> ")
            return
        lines.append(" " * indent + lead + " -> ".join(parts))

    run(tensor.grad_fn, 0)
    return "\n".join(lines)
