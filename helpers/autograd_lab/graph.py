"""Draw an autograd graph the same way every time.

The instrument behind every picture in the course. It follows torchviz's
conventions (backward nodes grey, leaves that receive ``.grad`` blue, saved
tensors orange, the output green) and adds what a learner needs to read a graph:
parameter names, leaf values, each leaf's ``.grad`` once backward has run.

Everything here renders the one walk of :mod:`autograd_lab.graphmodel`. Node
names are given in order of appearance (``n0``, ``n1``, ...) instead of
torchviz's ``id()``-based names, so the same graph gives the same SVG bytes in any
process; laid out by graphviz-pure, the engine pip installs with the course, the same
graph gives the same picture on every platform, and nbval compares graphs like any other
output. A graph too big to lay out quickly is folded or summarised first
(:mod:`autograd_lab.fold`), and the engine itself runs under a time limit
(:mod:`autograd_lab.engine`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import graphviz
import torch

from .arguments import check_int, check_seconds, is_bool
from .engine import DOT_TIMEOUT_S, MAX_TIMEOUT_S, GraphTooSlow, GraphvizMissing, find_engine, install_hint, run_dot
from .fold import within_limits
from .graphmodel import Graph, check_tensor, checkpoint_notes, node_name, output_names, roots_of, title, visit, walk
from .modules import calls_for

COLOURS = {
    "op": "lightgrey",  # a backward node (grad_fn)
    "leaf": "lightblue",  # a leaf that receives .grad (AccumulateGrad)
    "saved": "orange",  # a tensor saved for backward
    "output": "darkolivegreen1",  # the tensor you drew
    "highlight": "gold",  # the node a step-through is running
    "nograd": "white",  # a tensor that records no graph
}
FONT = "Helvetica"
DIRECTIONS = ("BT", "TB", "LR", "RL")
SIZE = re.compile(r"\d+(\.\d+)?(,\d+(\.\d+)?)?!?")  # Graphviz's size attribute: "8", "8,5", "8,5!"
CHAIN_MAX_INDENT = 25  # chain(): levels of indentation before a deep graph's level is written as a number

__all__ = ["AutogradGraph", "chain", "draw_graph", "draw_model", "format_tensor", "graph_nodes"]


def graph_nodes(tensors) -> list:
    """Every backward node reachable from ``tensors``, in order of first appearance.

    Depth-first along ``grad_fn.next_functions``, inputs in order: the order the
    drawing and the text chain use. ``AccumulateGrad`` nodes are included.
    """
    return visit([t.grad_fn for t in roots_of(tensors, "graph_nodes")])[0]


def _fmt_number(x: float) -> str:
    text = f"{x:.4g}"
    return text if any(c in text for c in ".enia") else text + "."


def format_tensor(t, max_values: int = 6) -> str:
    """A short, stable text for a tensor: its value when small, else its shape."""
    t = t.detach()
    if t.numel() == 0 or t.numel() > max_values or t.is_complex():
        return "shape (" + ", ".join(str(s) for s in t.shape) + ")"
    values = t.to("cpu", torch.float64).flatten().tolist()
    if t.dim() == 0:
        return _fmt_number(values[0])
    body = ", ".join(_fmt_number(v) for v in values)
    return f"[{body}]" if t.dim() == 1 else f"[{body}] shape ({', '.join(str(s) for s in t.shape)})"


_SVG_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)
DOT_MIME = "text/vnd.graphviz"  # the graph's DOT source, beside its SVG: what any engine lays out


# A generic font family has no metrics in graphviz-pure, which measures text without the system's fonts: it
# falls back to Times', too narrow for torchviz's monospace labels, which then overflow their boxes. Graphviz's
# PostScript names have metrics in both engines, and the SVG names the family after them ("Courier,monospace").
GENERIC_FONTS = {"monospace": "Courier", "sans-serif": "Helvetica", "serif": "Times"}
_GENERIC_FONT = re.compile(r'fontname=("?)(monospace|sans-serif|serif)\1(?=[\s,;\]])')


def measurable_fonts(source: str) -> str:
    """DOT ``source`` with each generic font family (``fontname=monospace``) named as Graphviz measures it."""
    return _GENERIC_FONT.sub(lambda m: f'fontname="{GENERIC_FONTS[m[2]]}"', source)


def svg_of(source: str, layout: str = "dot", engine=None, timeout: float = DOT_TIMEOUT_S) -> str:
    """SVG of DOT ``source``, laid out within ``timeout`` by the course's engine (or ``engine``, an
    :class:`~autograd_lab.engine.Engine`), its fonts measurable, without the comments in which Graphviz writes
    its version and each node's name."""
    return _SVG_COMMENT.sub("", run_dot(measurable_fonts(source), timeout, layout, engine))


def _text_only(err: Exception, text: str) -> dict:
    """What a notebook shows of a graph that has no picture: why, then the graph as text."""
    return {"text/plain": f"{err}\n\nThe same graph as text:\n{text}"}


class AutogradGraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that shows itself as SVG in Jupyter, and as text without a layout engine.

    ``text`` holds the graph's structure (its labels and edges), the same whichever engine lays it out.
    ``summary_only`` marks a graph beyond any screen: it shows as text only. ``timeout``: the seconds its
    layout may take; ``summary``: for a graph too big to read as text in full, a function (why the layout
    failed -> text) that writes what it shows instead when the layout runs out of time, so the summary is
    built only when it is shown.

    The SVG is kept once laid out, with the DOT source, time limit and engine it was made from: showing the
    graph again does not run the engine again, and a graph changed through graphviz's API (``.node()``,
    ``.edge()``, ``.attr()``) has another source, so it is laid out afresh. A layout that ran out of time is
    kept too: showing the same graph again would only wait as long again.
    """

    text: str = ""
    summary_only: bool = False
    timeout: float = DOT_TIMEOUT_S
    summary = None

    def svg(self) -> str:
        """The SVG, laid out by the course's engine (:mod:`autograd_lab.engine`), time-bounded, kept for the
        next call while the graph, its time limit and the engine stay the same."""
        if self.summary_only:
            raise GraphTooSlow(self.text)
        engine, problem = find_engine()
        if engine is None:
            raise GraphvizMissing(install_hint(problem=problem))
        key = (self.source, self.timeout, engine)
        kept = self.__dict__.get("_laid_out")
        if kept is None or kept[0] != key:
            try:
                kept = (key, svg_of(key[0], timeout=self.timeout, engine=engine), None)
            except GraphTooSlow as err:
                kept = (key, None, str(err))
            self._laid_out = kept
        if kept[2] is not None:
            raise GraphTooSlow(kept[2])
        return kept[1]

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        if self.summary_only:
            return {"text/plain": self.text}
        try:
            svg = self.svg()
        except GraphTooSlow as err:
            if self.summary is not None:
                return {"text/plain": self.summary(str(err).split(". ")[0])}
            return _text_only(err, self.text)
        except GraphvizMissing as err:  # no picture: say why, and show the graph as text
            return _text_only(err, self.text)
        return {"image/svg+xml": svg, "text/plain": self.text, DOT_MIME: self.source}

    def __repr__(self) -> str:
        return self.text or super().__repr__()


def graphviz_bundle(graph) -> dict:
    """How a notebook shows a ``graphviz`` graph (``torchviz.make_dot``'s): laid out by the course's engine,
    like the course's own drawings. The ``graphviz`` package itself runs a program called ``dot``, which
    graphviz-pure does not install; ``autograd_lab`` registers this function as the notebook's display of
    graphviz's ``Graph``, ``Digraph`` and ``Source`` (its own :class:`AutogradGraph` shows itself)."""
    source = graph.source
    try:
        svg = svg_of(source, getattr(graph, "engine", "dot"))
    except (GraphTooSlow, GraphvizMissing) as err:
        return _text_only(err, source)
    return {"image/svg+xml": svg, "text/plain": source, DOT_MIME: source}


def _label(*lines: str) -> str:
    return "\n".join(line for line in lines if line)


def _one_line(label: str, sep: str = " | ") -> str:
    return label.replace("\n", sep)


def _leaf_label(node, show_values: bool, show_grads: bool) -> str:
    var = node.leaf
    small = show_values and var.numel() <= 6
    grad = (f"grad {format_tensor(node.grad)}" if node.grad is not None else "grad None") if show_grads else ""
    value = f"value {format_tensor(var)}" if small else format_tensor(var, max_values=0) if var.dim() else ""
    return _label(node.param or "leaf", value, grad)


def _op_label(node) -> str:
    """A backward node's label: its name, the module that made it, its saved values (show_attrs); a box
    standing for a module's nodes: the module, what it is, how many nodes it holds."""
    if node.members:
        return _label(node.module, node.name, f"{node.members} backward node{'s' if node.members > 1 else ''}")
    attrs = "\n".join(f"{k}: {v}" for k, v in node.attrs)
    return _label(node.name, node.module or "", attrs)


def _storage(t) -> tuple:
    return ("storage", t.device.type, t.untyped_storage().data_ptr())


def leaf_names(model: Graph) -> dict:
    """{id(leaf): name} and {its storage: name} for the named leaves of ``model``: how a saved tensor is
    recognised as a parameter, or a view of one."""
    named = [(n.leaf, n.param) for n in model.nodes if n.is_leaf and n.param]
    return {**{id(t): name for t, name in named}, **{_storage(t): name for t, name in named}}


def _owner(saved, names: Mapping) -> str | None:
    """The parameter a saved tensor is, or shares memory with (a Linear saves its weight transposed), by name."""
    if id(saved) in names:
        return names[id(saved)]
    try:
        owner = names.get(_storage(saved))
    except RuntimeError:  # a tensor without storage (a functorch wrapper)
        return None
    return f"view of {owner}" if owner else None


def _add_nodes(graph, text, model: Graph, opts: dict) -> None:
    highlight, done, saved_names = opts["highlight"], opts["done"], opts.get("saved_names", {})
    for i, node in enumerate(model.nodes):
        nid = f"n{i}"
        if node.is_leaf:
            label = _leaf_label(node, opts["show_values"], opts["show_grads"])
            text.append(f"{nid} AccumulateGrad -> leaf {_one_line(label)}")
        else:
            label = _op_label(node)
            text.append(f"{nid} {_one_line(label, '  ')}")
        fill = COLOURS["leaf"] if node.is_leaf else COLOURS["op"]
        if i in highlight:
            fill = COLOURS["highlight"]
            text[-1] += "  [running]"
        attrs = {"fillcolor": fill}
        if i in done:
            attrs["penwidth"] = "2.5"
            text[-1] += "  [done]"
        graph.node(nid, label, **attrs)
        for k, (sname, saved) in enumerate(node.saved if opts["show_saved"] else ()):
            owner = _owner(saved, saved_names)  # a saved tensor that is a parameter (or a view of one): named
            sid, slabel = f"{nid}s{k}", _label(f"{sname} ({owner})" if owner else sname, format_tensor(saved))
            graph.node(sid, slabel, fillcolor=COLOURS["saved"])
            graph.edge(sid, nid, style="dashed", arrowhead="none")
            text.append(f"{sid} saved by {nid}: {_one_line(slabel, ' = ')}")


def _add_edges(graph, text, model: Graph, labels: Mapping) -> None:
    """The graph's edges, then the arrows folding adds, which are not edges of the (acyclic) graph: a folded
    chain's loop (one node standing for many in a row) and a rolled step's state carried into the next step.
    Those arrows do not rank the boxes (``constraint=false``): the step is laid out as its own edges place it."""
    edges = model.edges()
    known = set(edges)
    back = [(b, a) for a, b in labels if (b, a) not in known]
    for k, (child, parent) in enumerate(edges + back):
        note = labels.get((parent, child), "")
        attrs = {"constraint": "false"} if k >= len(edges) and child != parent else {}
        graph.edge(f"n{child}", f"n{parent}", label=f" {note} " if note else "", **attrs)
        text.append(f"n{child} -> n{parent}" + (f"  {note}" if note else ""))


def _add_outputs(graph, text, model: Graph, names: Mapping, show_values: bool) -> None:
    single = len(model.outputs) == 1
    for k, (t, root) in enumerate(zip(model.outputs, model.output_nodes)):
        oid = f"out{k}"
        name = names.get(id(t), "output" if single else f"output {k}")
        if root is None:
            why = "a leaf: nothing recorded before it"
            if not t.requires_grad:
                why = "requires_grad=False: no graph was recorded"
            label = _label(name, format_tensor(t) if show_values else "", why)
            graph.node(oid, label, fillcolor=COLOURS["leaf"] if t.requires_grad else COLOURS["nograd"])
            text.append(f"{oid} {_one_line(label)}")
            continue
        label = _label(name, format_tensor(t) if show_values else "")
        graph.node(oid, label, fillcolor=COLOURS["output"])
        graph.edge(f"n{root}", oid, style="dashed", arrowhead="none")
        text.append(f"{oid} {_one_line(label)} <- n{root}")


def _add_steps(graph, text, steps) -> None:
    """Each step drawn once for many (a rolled loop) in a dashed box that says how many times it ran."""
    for k, (count, members) in enumerate(steps):
        ids = [f"n{i}" for i in members]
        with graph.subgraph(name=f"cluster_step{k}") as box:  # Graphviz draws a "cluster_" subgraph as a box
            box.attr(label=f"x {count} steps", style="dashed", labeljust="l", fontsize="12")
            for nid in ids:
                box.node(nid)
        text.append(f"x {count} steps: {' '.join(ids)}")


def _new_graph(direction: str, size: str | None) -> AutogradGraph:
    graph_attr = {"rankdir": direction, "fontname": FONT, "size": size or "", "nodesep": "0.3", "ranksep": "0.35"}
    if not size:
        del graph_attr["size"]
    return AutogradGraph(
        name="autograd",
        format="svg",
        graph_attr=graph_attr,
        node_attr={"style": "filled", "shape": "box", "fontname": FONT, "fontsize": "12", "height": "0.2"},
        edge_attr={"fontname": FONT, "fontsize": "10"},
    )


def draw_model(
    model: Graph,
    *,
    names: Mapping | None = None,
    show_saved: bool = False,
    show_values: bool = True,
    show_grads: bool = True,
    highlight=frozenset(),
    done=frozenset(),
    edge_labels: Mapping | None = None,
    direction: str = "BT",
    size: str | None = None,
    note: str = "",
    saved_names: Mapping | None = None,
    steps=(),
) -> AutogradGraph:
    """Render a walked :class:`~autograd_lab.graphmodel.Graph`; marks and labels are keyed by node index.

    ``names`` maps id(output tensor) -> name; ``edge_labels`` maps (node, input) index pairs -> text (a pair
    that is not an edge of the graph is drawn as an arrow of its own: a loop, a step's state carried on);
    ``steps`` holds (count, node indices) for each step drawn once for ``count`` steps (a dashed box);
    ``note`` is a sentence drawn under the graph and put first in its text (why it was folded);
    ``saved_names`` maps id(tensor) -> parameter name, for saved tensors that are parameters.
    """
    graph = _new_graph(direction, size)
    text: list[str] = []
    opts = dict(show_values=show_values, show_grads=show_grads, show_saved=show_saved, highlight=highlight, done=done,
                saved_names=saved_names or {})
    _add_nodes(graph, text, model, opts)
    _add_edges(graph, text, model, edge_labels or {})
    _add_steps(graph, text, steps)
    _add_outputs(graph, text, model, names or {}, show_values)
    if note:
        graph.attr(label=note.replace("; ", ";\n"), labelloc="b", fontsize="12")  # two short lines
    head = ["autograd graph:"] + ([f"  ({note})"] if note else [])
    graph.text = "\n".join(head + ["  " + line for line in text])
    return graph


def _check_layout(direction, size) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(
            f"direction must be one of {', '.join(repr(d) for d in DIRECTIONS)} (where the output sits: "
            f"'BT' puts it at the top); got {direction!r}."
        )
    if size is not None and not (isinstance(size, str) and SIZE.fullmatch(size)):
        raise ValueError(
            f'size must be None or a Graphviz size in inches such as "8,5" (width,height; add "!" to scale up); '
            f"got {size!r}."
        )


_NODE_EXAMPLE = "loss.grad_fn, or an item of graph_nodes(loss)"
_EDGE_EXAMPLE = '{(loss.grad_fn, loss.grad_fn.next_functions[0][0]): "0.5"}'


def _is_next_pair(item) -> bool:
    """Whether ``item`` is an entry of ``next_functions``: a (node or None, input number) pair."""
    return (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int)
            and (item[0] is None or isinstance(item[0], torch.autograd.graph.Node)))


def _node_index(model: Graph, item, option: str) -> int:
    """The position of backward node ``item`` in ``model``; an error naming ``option`` for anything else."""
    if isinstance(item, torch.Tensor):
        raise TypeError(f"{option} must hold backward nodes, not tensors: pass a tensor's node, "
                        f"e.g. {option}=[loss.grad_fn] (a leaf's node is an item of graph_nodes(loss)).")
    if isinstance(item, str):
        raise TypeError(f"{option} must hold backward nodes, not their names: got {item!r:.60}. "
                        f"Pass the node itself, such as {_NODE_EXAMPLE}.")
    if _is_next_pair(item):
        raise TypeError(f"{option} holds a (node, input number) pair from next_functions: take its node, "
                        f"e.g. loss.grad_fn.next_functions[0][0].")
    if not isinstance(item, torch.autograd.graph.Node):
        raise TypeError(f"{option} must hold backward nodes such as {_NODE_EXAMPLE}; "
                        f"got {item!r:.60} ({type(item).__name__}).")
    index = model.index(item)
    if index is None:
        raise ValueError(f"{option} holds a {node_name(item)} that is not in the graph drawn (a node of another "
                         f"forward pass belongs to that pass's graph): pass nodes of this graph, such as "
                         f"{_NODE_EXAMPLE}.")
    return index


def _marked(model: Graph, value, option: str) -> set:
    """``highlight`` or ``done`` as node positions: one backward node, or an iterable of them (None: none)."""
    if value is None:
        return set()
    single = isinstance(value, (str, bytes, torch.Tensor, torch.autograd.graph.Node)) or _is_next_pair(value)
    if single or not isinstance(value, Iterable):
        value = [value]  # one item, checked (and refused when it is not a node) like the items of a list
    return {_node_index(model, item, option) for item in value}


def _edge_marks(model: Graph, edge_labels) -> dict:
    """``edge_labels`` as {(node, input) positions: text}, each key an edge of ``model`` (a tensor value is
    written as the graph writes values)."""
    if edge_labels is None:
        return {}
    if not isinstance(edge_labels, Mapping):
        raise TypeError(f"edge_labels must be a dict {{(node, input_node): text}}; got "
                        f"{type(edge_labels).__name__}. For example edge_labels={_EDGE_EXAMPLE}.")
    edges, marks = set(model.edges()), {}
    for key, value in edge_labels.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError(f"edge_labels keys must be (node, input_node) pairs; got {key!r:.60}. "
                            f"For example edge_labels={_EDGE_EXAMPLE}.")
        node, source = (_node_index(model, fn, "edge_labels") for fn in key)
        if (source, node) not in edges:
            way = (" goes the other way round: write (node, input_node), the node first"
                   if (node, source) in edges else " is not an edge of the graph: the second node must be an input "
                   "of the first (in its next_functions)")
            raise ValueError(f"edge_labels key ({title(key[0])}, {title(key[1])}){way}. "
                             f"For example edge_labels={_EDGE_EXAMPLE}.")
        marks[(node, source)] = format_tensor(value) if isinstance(value, torch.Tensor) else str(value)
    return marks


FOLDING = ("auto", True, False)


def _check_drawing(fold_, depth, timeout, show_attrs, max_attr_chars, calls) -> float:
    """The drawing options checked; the layout's time limit in seconds."""
    if not any(fold_ is f for f in FOLDING):
        raise ValueError(f'fold must be "auto" (fold a graph too big to read), True or False; got {fold_!r}.')
    if not is_bool(show_attrs):
        raise TypeError(f"show_attrs must be True or False (torchviz's name: write each node's saved values); "
                        f"got {show_attrs!r}.")
    check_int("max_attr_chars", max_attr_chars, "a whole number of characters, e.g. 50", low=0)
    if depth is not None:
        check_int("depth", depth, "None or a module depth from 1 (the model's top modules)", low=1)
        if calls is None:
            raise ValueError("depth= collapses a model's modules, so it needs the model and a record of its "
                             "forward pass: with record_modules(model): loss = loss_fn(model(x), y), then "
                             "draw_graph(loss, params=model, depth=1).")
    if timeout is None:
        return DOT_TIMEOUT_S
    return check_seconds("timeout", timeout, at_most=MAX_TIMEOUT_S)


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
    fold="auto",
    depth: int | None = None,
    module_names: bool = True,
    timeout: float | None = None,
    show_attrs: bool = False,
    max_attr_chars: int = 50,
) -> AutogradGraph:
    """Draw the autograd graph behind ``tensors`` (a tensor or a list of them).

    params      names for leaves: the model itself (an nn.Module), ``model.named_parameters()``, a dict
                {name: tensor} or (name, tensor) pairs. Saved tensors that are parameters get their names too.
    names       names for the drawn output tensors, e.g. {"loss": loss}.
    show_saved  add the tensors each node saved for backward (orange, dashed edges).
    show_values write small leaf values on the leaves; show_grads writes their ``.grad``.
    highlight   a backward node, or a list of them, to fill gold (a step-through marks the node being run).
    edge_labels {(node, input_node): text or number} written on the edge from a backward node to one of its inputs.
    done        a backward node, or a list of them, already run: drawn with a bold border.
    direction   Graphviz rankdir: "BT" (the default) puts the output at the top, the leaves at the bottom,
                and arrows follow the forward pass upwards; "TB" turns it upside down.
    size        None (natural size) or a Graphviz size in inches, e.g. "8,5".
    fold        "auto" (the default) folds a graph too big to read at a glance: repeated blocks that follow
                one another (h.0 ... h.11) drawn once and one box for the rest, identical branches once with
                their count. True always folds, False never.
    module_names when ``params`` is a model whose forward ran under ``record_modules(model)``, each node
                names the module that made it (True, the default); False leaves them out.
    depth       with such a model: each module this many levels down drawn as one box (1: the top modules).
    timeout     the seconds the layout may take (default 6). A graph that cannot be laid out in time shows
                as a text summary saying what to do; with an explicit timeout even a graph beyond any screen
                (more than 3000 boxes) is tried.
    show_attrs, max_attr_chars  torchviz's names: write each node's saved non-tensor values (a dim, an
                alpha), each cut to max_attr_chars characters.
    """
    _check_layout(direction, size)
    calls = calls_for(params)
    limit = _check_drawing(fold, depth, timeout, show_attrs, max_attr_chars, calls)
    lookup = calls.lookup() if calls is not None and (module_names or depth is not None) else None
    model = walk(tensors, params, saved=show_saved, modules=lookup, attrs=max_attr_chars if show_attrs else None)
    out_names = output_names(names)
    marks = dict(
        highlight=_marked(model, highlight, "highlight"),
        done=_marked(model, done, "done"),
        edge_labels=_edge_marks(model, edge_labels),
    )
    drawable = within_limits(model, marks, show_saved, folding=fold, depth=depth,
                             kinds=calls.kinds if calls else None, any_size=timeout is not None)
    notes = checkpoint_notes(model, show_saved)
    if drawable.beyond_screen:  # beyond any screen, even folded: the summary, as text only
        graph = _new_graph(direction, size)
        graph.text, graph.summary_only = "\n".join([drawable.outline().text()] + [f"  ({n})" for n in notes]), True
        return graph
    note = "; ".join([drawable.note] * bool(drawable.note) + notes)
    graph = draw_model(drawable.model, names=out_names, show_saved=show_saved, show_values=show_values,
                       show_grads=show_grads, **drawable.marks, note=note, direction=direction, size=size,
                       saved_names=leaf_names(drawable.model) if show_saved else None)
    graph.timeout = limit
    if drawable.summarised:  # too big to read as text in full: the summary, built if the layout runs out of time
        graph.summary = drawable.outline().text
    return graph


def chain(tensor, *, show_none: bool = False, params=None) -> str:
    """The graph behind ``tensor`` as text: ``MeanBackward0 -> PowBackward0 -> ...``.

    A node with one input continues the line; a node with several puts each
    input on its own indented line. A node met a second time is named, not
    repeated. Leaves read ``AccumulateGrad(name)`` when ``params`` names them.
    """
    check_tensor(tensor, "chain")
    model = walk(tensor, params, what="chain")
    if model.output_nodes[0] is None:
        why = "a leaf tensor" if tensor.requires_grad else "requires_grad=False"
        return f"(no graph: {why})"
    return "\n".join(_chain_lines(model, model.output_nodes[0], show_none))


def _margin(level: int) -> str:
    """Four spaces per level of branching; past ``CHAIN_MAX_INDENT`` levels the level is written as a number."""
    if level <= CHAIN_MAX_INDENT:
        return " " * 4 * level
    return " " * 4 * CHAIN_MAX_INDENT + f"[level {level}] "


def _chain_lines(model: Graph, start: int, show_none: bool = False) -> list[str]:
    """The lines of :func:`chain`, walked with an explicit stack (no recursion limit on deep graphs)."""
    nodes, seen, lines = model.nodes, set(), []
    stack = [(start, 0, "")]  # (node index or None, level, lead), the next line to write on top
    while stack:
        i, level, lead = stack.pop()
        parts = []
        while True:
            if i is not None and i in seen:
                parts.append(f"({title(nodes[i])}, shared: see above)")
                break
            parts.append(title(nodes[i]) if i is not None else "None")
            if i is None:
                break
            seen.add(i)
            inputs = [j for j in nodes[i].inputs if show_none or j is not None]
            if len(inputs) != 1:
                stack.extend((j, level + 1, "-> ") for j in reversed(inputs))
                break
            i = inputs[0]
        lines.append(_margin(level) + lead + " -> ".join(parts))
    return lines
