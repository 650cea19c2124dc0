"""One walk of an autograd graph into plain data: the model every picture and text renders from.

``walk(loss)`` follows ``grad_fn.next_functions`` once, with a loop (no recursion,
so a graph of any depth walks), and returns a :class:`Graph`: its backward nodes
in order of first appearance (depth first, inputs in order), each with its name,
its inputs (positions in that list), the leaf it fills (for ``AccumulateGrad``),
that leaf's ``.grad`` and, when asked, the tensors it saved for backward.

Each idea has its home here and nowhere else: how a node is named
(:func:`node_name`), what counts as a leaf (:func:`leaf_of`), how a parameter is
named (:func:`param_names`) and how a node is titled in text (:func:`title`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch.utils import checkpoint as checkpoint_module

SAVED_PREFIX = "_saved_"  # torchviz's convention: a node's saved tensors are its ``_saved_*`` attributes

__all__ = [
    "Graph",
    "Node",
    "check_tensor",
    "checkpoint_notes",
    "leaf_of",
    "node_name",
    "output_names",
    "param_names",
    "read_saved",
    "saved_attrs",
    "saved_tensors",
    "title",
    "visit",
    "walk",
]


def node_name(fn) -> str:
    """The class name of a backward node, e.g. ``MulBackward0``; ``"None"`` for a missing input."""
    return "None" if fn is None else type(fn).__name__


def leaf_of(fn):
    """The leaf tensor a backward node accumulates into (``AccumulateGrad.variable``), else ``None``."""
    return getattr(fn, "variable", None) if fn is not None else None


def check_tensor(value, what: str = "draw_graph") -> None:
    """A ``TypeError`` saying what to pass when ``value`` is not a tensor."""
    if isinstance(value, torch.Tensor):
        return
    raise TypeError(
        f"{what} expects a torch.Tensor (for example a loss), got {type(value).__name__}. "
        f"Pass the tensor whose graph you want to see, e.g. {what}(loss)."
    )


def roots_of(tensors, what: str = "draw_graph") -> list:
    """``tensors`` (one tensor, or a non-empty list or tuple of them) as a list."""
    if isinstance(tensors, (list, tuple)) and tensors:
        for t in tensors:
            check_tensor(t, what)
        return list(tensors)
    check_tensor(tensors, what)
    return [tensors]


def _pairs(mapping, argument: str, example: str):
    """The (name, tensor) pairs of ``mapping``; clear errors for other types and for tensor -> name."""
    if isinstance(mapping, torch.nn.Module):
        return list(mapping.named_parameters())
    if isinstance(mapping, Mapping):
        items = list(mapping.items())
    elif isinstance(mapping, Iterable) and not isinstance(mapping, (str, bytes, torch.Tensor)):
        items = list(mapping)
    else:
        raise TypeError(
            f"{argument} must be a dict {{name: tensor}}, an nn.Module, or (name, tensor) pairs; "
            f"got {type(mapping).__name__}. For example {argument}={example}."
        )
    pairs = []
    for pair in items:
        if isinstance(pair, torch.Tensor):
            raise TypeError(f"{argument} must hold (name, tensor) pairs; got a tensor without a name. "
                            f"Write {argument}={example}.")
        try:
            name, tensor = pair
        except (TypeError, ValueError):
            raise TypeError(f"{argument} must hold (name, tensor) pairs; got {pair!r:.80}.") from None
        if isinstance(name, torch.Tensor) and not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"{argument} maps a tensor to {tensor!r:.40}: it goes the other way round, name -> tensor. "
                f"Write {argument}={example}."
            )
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{argument}[{name!r}] must be a tensor, got {type(tensor).__name__}.")
        pairs.append((str(name), tensor))
    return pairs


PARAMS_EXAMPLE = 'model (the nn.Module itself), model.named_parameters() or {"w": w}'


def param_names(params) -> dict[int, str]:
    """{id(tensor): name} from a dict {name: tensor}, an ``nn.Module`` or (name, tensor) pairs."""
    if params is None:
        return {}
    return {id(t): name for name, t in _pairs(params, "params", PARAMS_EXAMPLE)}


def output_names(names) -> dict[int, str]:
    """{id(tensor): name} for the drawn outputs, from a dict {name: tensor} such as ``{"loss": loss}``."""
    if names is None:
        return {}
    return {id(t): name for name, t in _pairs(names, "names", '{"loss": loss}')}


RAW_PREFIX = "_raw_saved_"  # the same slots unread: torch's SavedTensor objects, whose hooks have not run
_CUSTOM = "saved_tensors"  # what a custom autograd.Function's ctx.save_for_backward kept, under this name


@dataclass(frozen=True)
class SavedRead:
    """What one backward node keeps for backward, read without running any saved-tensor hook that computes.

    ``tensors``: (name, tensor) for every tensor it holds; ``recomputed``: the names of those a non-reentrant
    checkpoint did not keep (reading them would run the segment's forward again); ``freed``: backward() already
    released them (reading them raises).
    """

    tensors: tuple = ()
    recomputed: tuple = ()
    freed: bool = False


def _checkpoint_holder(raw) -> bool:
    """Whether a SavedTensor holds a non-reentrant checkpoint's placeholder instead of a tensor (torch >= 2.5
    tells: ``unpack_hook`` and ``data``; older torch has no way to ask, and the tensor is read as before)."""
    holder = getattr(checkpoint_module, "_Holder", None)
    try:
        return holder is not None and raw.unpack_hook is not None and isinstance(raw.data, holder)
    except (AttributeError, RuntimeError):
        return False


def _raw_slots(fn, name: str):
    """The SavedTensor objects behind ``_saved_<name>`` (a list for a list of tensors; empty when none)."""
    raw = getattr(fn, RAW_PREFIX + name, None)
    return list(raw) if isinstance(raw, (list, tuple)) else [] if raw is None else [raw]


def _custom_saved(fn) -> SavedRead:
    """A custom autograd.Function's node: the tensors its ctx.save_for_backward kept."""
    try:
        raws = fn._raw_saved_tensors
    except RuntimeError:  # freed by an earlier backward
        return SavedRead(freed=True)
    if any(_checkpoint_holder(r) for r in raws):
        return SavedRead(recomputed=tuple(f"{_CUSTOM}[{i}]" for i in range(len(raws))))
    values = fn.saved_tensors
    return SavedRead(tensors=tuple((f"{_CUSTOM}[{i}]", v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)))


def read_saved(fn) -> SavedRead:
    """Every tensor backward node ``fn`` saved for backward, in a stable order (the ``_saved_*`` attributes that
    torchviz reads, or a custom Function's ``saved_tensors``), without changing anything: a tensor a
    non-reentrant checkpoint will recompute is named in ``recomputed``, not recomputed."""
    if isinstance(fn, torch.autograd.function.BackwardCFunction):  # a custom autograd.Function's node
        return _custom_saved(fn)
    out, recomputed, freed = [], [], False
    for attr in sorted(dir(fn)):
        if not attr.startswith(SAVED_PREFIX):
            continue
        name = attr[len(SAVED_PREFIX):]
        if any(_checkpoint_holder(r) for r in _raw_slots(fn, name)):
            recomputed.append(name)
            continue
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by an earlier backward
            freed = True
            continue
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, tuple):
            out.extend((f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor))
    return SavedRead(tuple(out), tuple(recomputed), freed)


def _segment_parameters(fn) -> int | None:
    """How many parameters requiring grad a reentrant checkpoint's segment holds (None when it is not a module)."""
    run = getattr(fn, "run_function", None)
    module = run if isinstance(run, torch.nn.Module) else getattr(run, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return None
    return sum(1 for p in module.parameters() if p.requires_grad)


def checkpoint_notes(graph, show_saved: bool) -> list[str]:
    """Sentences for what a drawing of ``graph`` cannot show: reentrant checkpoints (their segments' graphs
    are built only in backward), tensors a non-reentrant checkpoint recomputes, saved tensors already freed."""
    notes = []
    reentrant = [n for n in graph.nodes
                 if getattr(n.fn, "_forward_cls", None) is getattr(checkpoint_module, "CheckpointFunction", ())]
    if reentrant:
        counts = [_segment_parameters(n.fn) for n in reentrant]
        held = f" ({sum(counts)} in all)" if None not in counts else ""
        notes.append(
            f"{len(reentrant)} reentrant checkpoint{'s' * (len(reentrant) > 1)} (use_reentrant=True): each "
            "CheckpointFunctionBackward stands for a segment whose graph is built only during backward, so its "
            f"nodes and parameters{held} are not drawn (use_reentrant=False draws them)"
        )
    if not show_saved:
        return notes
    recomputed = [n for n in graph.nodes if n.recomputed]
    if recomputed:
        count = sum(len(n.recomputed) for n in recomputed)
        notes.append(f"{count} tensors of {len(recomputed)} nodes in checkpointed segments are not kept "
                     "(not drawn): checkpoint recomputes them during backward")
    if any(n.freed for n in graph.nodes):
        notes.append("saved tensors not drawn: backward() has freed them (draw before backward(), or call "
                     "backward(retain_graph=True) to keep them)")
    return notes


def saved_tensors(fn) -> tuple:
    """(name, tensor) for every tensor a backward node saved and still holds (see :func:`read_saved`)."""
    return read_saved(fn).tensors


def saved_attrs(fn, max_chars: int = 50) -> tuple:
    """(name, text) for every value a backward node saved that is not a tensor (``dim``, ``alpha``, a shape),
    as torchviz's ``show_attrs`` shows them, each text cut to ``max_chars`` characters."""
    out = []
    for attr in sorted(dir(fn)):
        if not attr.startswith(SAVED_PREFIX):
            continue
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by an earlier backward
            continue
        if isinstance(value, torch.Tensor) or (isinstance(value, tuple) and any(
                isinstance(v, torch.Tensor) for v in value)):
            continue
        text = str(value)
        out.append((attr[len(SAVED_PREFIX):], text if len(text) <= max_chars else text[:max(max_chars - 3, 0)] + "..."))
    return tuple(out)


@dataclass(frozen=True)
class Node:
    """One backward node. ``inputs`` holds, per entry of ``next_functions``, the input's index or None."""

    fn: object
    name: str
    inputs: tuple
    leaf: torch.Tensor | None = None
    param: str | None = None
    grad: torch.Tensor | None = None
    saved: tuple = ()
    recomputed: tuple = ()  # saved-tensor names a non-reentrant checkpoint recomputes in backward (not held)
    freed: bool = False  # its saved tensors were released by backward()
    module: str | None = None  # the module whose forward made it (record_modules), "" for the model's own
    attrs: tuple = ()  # (name, text) of the non-tensor values it saved (show_attrs)
    members: int = 0  # a box that stands for this many backward nodes (a module collapsed by folding), else 0

    @classmethod
    def of(cls, fn, names: Mapping, inputs: tuple = (), saved: bool = False) -> Node:
        """The node for backward node ``fn``; ``names`` maps id(leaf tensor) -> parameter name."""
        leaf = leaf_of(fn)
        read = read_saved(fn) if saved else SavedRead()
        return cls(
            fn=fn,
            name=node_name(fn),
            inputs=inputs,
            leaf=leaf,
            param=names.get(id(leaf)) if leaf is not None else None,
            grad=leaf.grad if leaf is not None else None,
            saved=read.tensors,
            recomputed=read.recomputed,
            freed=read.freed,
        )

    @property
    def is_leaf(self) -> bool:
        """Whether this node fills a leaf's ``.grad`` (an ``AccumulateGrad`` node)."""
        return self.leaf is not None


def title(node) -> str:
    """How text names a node (a :class:`Node`, or a backward node as is): ``AccumulateGrad(w)`` for a named
    leaf, else the node's name; ``"None"`` for a missing input."""
    if node is None:
        return "None"
    if not isinstance(node, Node):
        node = Node.of(node, {})
    return f"AccumulateGrad({node.param})" if node.is_leaf and node.param is not None else node.name


@dataclass(frozen=True)
class Graph:
    """The walked graph: nodes in order of first appearance, the drawn tensors and the node each comes from."""

    nodes: tuple
    outputs: tuple  # the tensors walked from
    output_nodes: tuple  # per output: the index of its grad_fn, or None

    def index(self, fn) -> int | None:
        """The position of backward node ``fn`` in ``nodes``, or None when it is not in this graph."""
        if "_index" not in self.__dict__:
            object.__setattr__(self, "_index", {id(n.fn): i for i, n in enumerate(self.nodes)})
        return self._index.get(id(fn))

    def edges(self) -> list:
        """(input, node) index pairs, in node order then input order: the gradient flows input <- node."""
        return [(j, i) for i, node in enumerate(self.nodes) for j in node.inputs if j is not None]

    def fan_in(self) -> list:
        """How many edges leave each node towards the output (the number of nodes that use it)."""
        counts = [0] * len(self.nodes)
        for j, _ in self.edges():
            counts[j] += 1
        return counts

    def ranks(self) -> tuple[list, list]:
        """Each node's longest distance from an output (Graphviz's rank), and the nodes in an order that puts
        every node before its inputs."""
        left = self.fan_in()
        rank = [0] * len(self.nodes)
        ready = [i for i, n in enumerate(left) if n == 0]
        order = []
        while ready:
            i = ready.pop()
            order.append(i)
            for j in self.nodes[i].inputs:
                if j is None:
                    continue
                rank[j] = max(rank[j], rank[i] + 1)
                left[j] -= 1
                if left[j] == 0:
                    ready.append(j)
        return rank, order

    def with_grads(self, grads: Mapping) -> Graph:
        """The same graph with each leaf's gradient replaced: ``grads`` maps node index -> tensor or None."""
        nodes = tuple(
            dataclasses.replace(n, grad=grads.get(i)) if n.is_leaf else n for i, n in enumerate(self.nodes)
        )
        return dataclasses.replace(self, nodes=nodes)


def visit(root_fns) -> tuple[list, list, dict]:
    """The walk itself: backward nodes in order of first appearance (depth first, inputs in order).

    Returns (nodes, each node's inputs as objects, {id(node): position}). A loop, not recursion: any depth
    walks. The input lists keep every node object alive, so no id() is reused during the walk.
    """
    index: dict[int, int] = {}
    order, children = [], []
    stack = [fn for fn in reversed(root_fns) if fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in index:
            continue
        index[id(fn)] = len(order)
        order.append(fn)
        kids = [child for child, _ in fn.next_functions]
        children.append(kids)
        stack += [child for child in reversed(kids) if child is not None and id(child) not in index]
    return order, children, index


def _annotated(node: Node, modules, attrs: int | None) -> Node:
    """``node`` with the module that made it and, when asked, its saved non-tensor values."""
    module = None
    if modules is not None:
        module = node.param.rpartition(".")[0] if node.is_leaf and node.param else modules(node.fn)
    extra = saved_attrs(node.fn, attrs) if attrs is not None and not node.is_leaf else ()
    return dataclasses.replace(node, module=module, attrs=extra)


def walk(tensors, params=None, *, saved: bool = False, what: str = "draw_graph", modules=None,
         attrs: int | None = None) -> Graph:
    """Walk the graph behind ``tensors`` once (iteratively) into a :class:`Graph`.

    params  names for leaves: a dict {name: tensor}, an nn.Module, or (name, tensor) pairs.
    saved   also collect the tensors each node saved for backward (slower: it reads every attribute).
    modules a function backward node -> module name (:meth:`autograd_lab.modules.ModuleCalls.lookup`):
            each node's ``module``; a leaf's is its parameter's owner, from its name.
    attrs   also collect each node's non-tensor saved values, cut to this many characters (show_attrs).
    """
    roots = roots_of(tensors, what)
    names = param_names(params)
    root_fns = [t.grad_fn for t in roots]  # read once: some tensors hand out a new node at every access
    order, children, index = visit(root_fns)
    nodes = [
        Node.of(fn, names, tuple(None if c is None else index[id(c)] for c in kids), saved)
        for fn, kids in zip(order, children)
    ]
    if modules is not None or attrs is not None:
        nodes = [_annotated(n, modules, attrs) for n in nodes]
    output_nodes = tuple(None if fn is None else index[id(fn)] for fn in root_fns)
    return Graph(nodes=tuple(nodes), outputs=tuple(roots), output_nodes=output_nodes)
