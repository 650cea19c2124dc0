"""Answer checks for notebook 02, grad_fn chains.

Each check builds the exercise's expression with PyTorch and compares the
learner's answer with what autograd really does, so the expected answers are
never typed in by hand. A wrong answer's hint comes from a table of diagnoses
(:mod:`.diagnoses`): each row holds a variant of the reference that makes one
mistake, and the first row that reproduces the answer names it.

No check raises on a learner's answer: each is wrapped in ``never_raises``, with the
policy that module ``leaf_tensors`` describes (every ``Exception`` becomes feedback).
"""

from __future__ import annotations

import re
from collections import Counter

import torch

from ..graphmodel import node_name, walk
from . import trust
from .answers import as_names, as_number, close, is_unanswered, plain, read_function
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong

__all__ = [
    "chain_expression",
    "check_chain",
    "DIV_SHAPES",
    "check_div_backward",
    "SECOND_BACKWARD",
    "check_second_backward",
]


# --- Exercise 1: predict the chain ------------------------------------------------------------

def chain_expression():
    """The expression of exercise 1 (the notebook shows the same three lines): returns (out, w)."""
    w = torch.tensor(0.5, requires_grad=True)
    x = torch.tensor([1.0, -2.0, 3.0])
    out = torch.sigmoid(w * x).sum() * 3
    return out, w


def _reference_chain() -> list[str]:
    """The node names met walking from ``out.grad_fn`` to the leaf, following the input that needs a gradient.

    Read off the course's one graph walk (:func:`autograd_lab.graphmodel.walk`), which also names the nodes.
    """
    out, _ = chain_expression()
    graph = walk(out, what="_reference_chain")
    names, i = [], graph.output_nodes[0]
    while i is not None:
        node = graph.nodes[i]
        names.append(node.name)
        i = next((j for j in node.inputs if j is not None), None)
    return names


def _base(name: str) -> str:
    """``MulBackward0`` -> ``mulbackward``: the operation, whatever the case of its letters. The number at the end
    tells overloads of one operation apart; :func:`_digit_hint` compares it where one was written.
    ``AccumulateGrad(w)``, the way ``chain()`` names a leaf's node, is ``accumulategrad``."""
    return re.sub(r"\d+$", "", re.sub(r"\s*\([^()]*\)$", "", name.strip())).lower()


def _digits(name: str) -> int | None:
    """The number a node name ends with (``SumBackward1`` -> 1, ``AccumulateGrad(w)`` -> None), or None."""
    found = re.search(r"(\d+)$", re.sub(r"\s*\([^()]*\)$", "", name.strip()))
    return int(found.group(1)) if found else None


def _variants() -> dict[str, str]:
    """{node name: what records it} for the variants of the exercise's operations that differ only in their
    digit, found by running each call (the names are never typed in)."""
    t = torch.ones(2, 2, requires_grad=True)
    made = {
        "`t.sum()`, the sum of every entry": t.sum(),
        "`t.sum(dim)`, a sum over given dimensions": t.sum(0),
        "`t * u` or `t * 3`, a product with a tensor or a number": t * 3,
        "`torch.ops.aten.mul.Scalar(t, 3)`, an overload a Python `*` does not call": torch.ops.aten.mul.Scalar(t, 3),
    }
    return {node_name(out.grad_fn): what for what, out in made.items()}


def _digit_hint(items: list, expected: list) -> str | None:
    """A hint when every operation is right but a digit written is not the one PyTorch prints, else None.

    The digit tells variants of one operation apart (``SumBackward1`` is the sum over given dimensions): a digit
    left out is fine, a wrong one names another node."""
    slips = [(k, item.strip(), name) for k, (item, name) in enumerate(zip(items, expected))
             if _digits(item) is not None and _digits(item) != _digits(name)]
    if not slips:
        return None
    variants = _variants()
    by_name: dict = {}  # the name each slip writes -> (item numbers, the node really there)
    for k, item, name in slips:
        written = re.sub(r"\d+$", "", re.sub(r"\s*\([^()]*\)$", "", name)) + str(_digits(item))
        by_name.setdefault(written, ([], name))[0].append(str(k + 1))
    lines = []
    for written, (numbers, name) in by_name.items():
        which = f"item {numbers[0]}" if len(numbers) == 1 else f"items {', '.join(numbers)}"
        if written in variants:
            what = variants.get(name, "the call in this expression")
            verb = "names" if len(numbers) == 1 else "name"
            lines.append(f"{which} ({written}) {verb} another node: {written} is recorded by {variants[written]}; "
                         f"the node here comes from {what}.")
        else:
            lines.append(f"{which} ({written}): the operation is right, but PyTorch does not print that digit for it "
                         "here.")
    return (" ".join(lines) + " The digit at the end of a name tells variants of one operation apart: leave it out, "
            "or write the one PyTorch prints.")


def _leaf_named(items: list) -> str | None:
    """The name in ``AccumulateGrad(name)`` when an item names a leaf other than w, else None."""
    for item in items:
        found = re.fullmatch(r"\s*accumulategrad\d*\s*\(\s*([^()]*?)\s*\)\s*", item, re.IGNORECASE)
        if found and found.group(1) not in ("w", ""):
            return found.group(1)
    return None


def _chain_items(answer) -> list | None:
    """The learner's node names in order: a list, tuple or iterator of strings, or the line ``chain()`` prints."""
    if isinstance(answer, str):
        return [part for part in answer.split("->")] if "->" in answer else None
    if isinstance(answer, (set, frozenset)):
        return None
    items = as_names(answer)
    return items if items is not None and all(isinstance(a, str) for a in items) else None


# Each misreading of exercise 1's chain as what it makes of the true one (names without digits, in lower case); the
# first row that turns the true chain into the answer names it.
_CHAIN_DIAGNOSES = (
    Diagnosis("the forward order", lambda chain: chain[::-1],
              "you listed the nodes in the order the forward pass ran them. The chain starts at `out.grad_fn` "
              "(the last operation) and walks back to the leaf: reverse your list."),
    Diagnosis("the operations for their nodes", lambda chain: [name.replace("backward", "") for name in chain],
              "the right operations, but a node's name is the operation plus `Backward` (e.g. `MulBackward0`)."),
    Diagnosis("`* 3` taken for no operation", lambda chain: chain[1:],
              "one node is missing at the start: `* 3` is an operation too, and it ran last, so it is the first node "
              "backward meets."),
)


def _chain_hint(given: list, want: list, items: list) -> str:
    """What is off in a chain that no row of ``_CHAIN_DIAGNOSES`` reproduces, read from its nodes and their count."""
    leaf = _base("AccumulateGrad")
    if Counter(given) == Counter(want):
        moved = [i + 1 for i, (g, e) in enumerate(zip(given, want)) if g != e]
        return (f"the right nodes, in a wrong order (items {', '.join(map(str, moved))}). Backward meets the "
                "operations in the reverse of the order they ran: the last one applied to w's value comes first.")
    if given.count(leaf) > 1 or "none" in given:
        return ("only `w` asked for a gradient. `x` was made without `requires_grad=True`, so it gets no node "
                "(in `next_functions` it shows up as `None`, which is not part of the chain).")
    if leaf not in given:
        return ("the walk does not stop at the last operation: it ends at the node that stands for the leaf `w` "
                "and puts its gradient into `w.grad`. Which node is that?")
    if len(given) < len(want):
        return (f"your chain has {len(given)} nodes; count the operations on the way from `w` to `out`. Each "
                "operation in this expression (`torch.sigmoid` and `.sum()` included) records one node, plus one for "
                "the leaf.")
    if len(given) > len(want):
        return (f"your chain has {len(given)} nodes, more than were recorded: each operation in this expression "
                "records one node, as most elementwise operations and reductions do (a function built from several "
                "operations, such as `F.normalize`, records several), and operations on `x` alone (which needs no "
                "grad) add none.")
    k = next(i for i, (g, e) in enumerate(zip(given, want)) if g != e)
    return (f"item {k + 1} ({items[k]!r}) is not the node that comes there. A node is named after the operation "
            "that made it, plus `Backward`: `torch.sigmoid` gives a `SigmoidBackward` node, `.sum()` a `SumBackward`.")


@never_raises
def check_chain(answer) -> Feedback:
    """Exercise 1: the chain of ``out = torch.sigmoid(w * x).sum() * 3``, from ``out`` back to ``w``.

    Any ordered collection of strings counts (list, tuple, generator), and so does the line ``chain()`` prints
    (``"MulBackward0 -> ... -> AccumulateGrad(w)"``). Letter case does not matter and digits may be left out, but
    a digit written must be the one PyTorch prints: ``SumBackward1`` (a sum over given dimensions) is another node.
    """
    form = 'a list of node names from out back to the leaf, e.g. ["XBackward0", ..., "AccumulateGrad"]'
    if is_unanswered(answer):
        return unanswered(form)
    items = _chain_items(answer)
    if items is None:
        return malformed(f"give {form}: a list of strings, one per node.")
    other_leaf = _leaf_named(items)
    if other_leaf is not None:
        return wrong(f"the chain ends at the node of the leaf that asked for a gradient, `w`; you wrote "
                     f"AccumulateGrad({other_leaf}). `x` was made without `requires_grad=True` and gets no node.")
    expected = _reference_chain()
    given = [_base(a) for a in items]
    want = [_base(e) for e in expected]
    if given == want:
        slip = _digit_hint(items, expected)
        if slip is not None:
            return wrong(slip)
        return correct(
            "that is the chain: " + " -> ".join(expected) + ". Backward meets the last operation first, "
            "so `* 3` gives the first node, and `x` (no grad) adds no branch."
        )
    if not given:
        return wrong("your list is empty: write one name per node, from out.grad_fn back to the leaf's node.")
    return wrong(hint_for(_CHAIN_DIAGNOSES, lambda variant: variant(want) == given) or _chain_hint(given, want, items))


# --- Exercise 2: write one node's backward ---------------------------------------------------
# The learner writes what the node of out = a / b hands its two inputs, given grad_out, in their own shapes
# (after the edge's sum), and the check compares it with autograd on shapes where b is broadcast.

DIV_SHAPES = ((2, 3), (3,))  # a, and b: broadcast over a's rows


def _div_points():
    """(a, b, grad_out) drawn afresh for each call of the check: b kept away from 0, grad_out not all ones."""
    gen = trust.fresh_generator()
    a = torch.randn(*DIV_SHAPES[0], generator=gen, dtype=torch.float64)
    b = torch.rand(*DIV_SHAPES[1], generator=gen, dtype=torch.float64) + 0.5
    g = torch.randn(*DIV_SHAPES[0], generator=gen, dtype=torch.float64)
    return a, b, g


def _reference_div_backward(a, b, grad_out):
    """What backward leaves in a.grad and b.grad for out = a / b, d loss / d out = grad_out (by autograd)."""
    a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    with torch.enable_grad():
        return torch.autograd.grad(a / b, (a, b), grad_out)


def _div_variant(grad_a=None, grad_b=None):
    """div_backward with a mistaken formula for grad_a, grad_b or both (a function of a, b and grad_out); autograd's
    gradient for the other."""

    def variant(a, b, g):
        right = _reference_div_backward(a, b, g)
        return (right[0] if grad_a is None else grad_a(a, b, g), right[1] if grad_b is None else grad_b(a, b, g))

    return variant


_NO_GRAD_OUT_B = ("grad_b leaves out grad_out: multiply the local derivative by the gradient the node receives (the "
                  "chain rule), then sum.")
# Each slip in exercise 2's derivatives as the div_backward that makes it (b is broadcast over the rows of a, dim 0,
# so grad_b sums over dim 0). A row explains a gradient that its variant gets wrong in the answer's way; the rows
# that get one gradient wrong come first, so that each gradient is named by its own slip.
_DIV_DIAGNOSES = (
    Diagnosis("grad_out left out of grad_a", _div_variant(grad_a=lambda a, b, g: 1 / b),
              "grad_a leaves out grad_out: multiply the local derivative by the gradient the node receives (the "
              "chain rule)."),
    Diagnosis("grad_a of a product", _div_variant(grad_a=lambda a, b, g: g * b),
              "grad_a is the derivative of a * b with respect to a; here b divides."),
    Diagnosis("grad_a's sign", _div_variant(grad_a=lambda a, b, g: -g / b),
              "grad_a has the wrong sign: a / b grows with a where b > 0."),
    Diagnosis("grad_a with respect to b", _div_variant(grad_a=lambda a, b, g: -g * a / b**2),
              "grad_a is the derivative with respect to b, not a."),
    Diagnosis("grad_b's sign", _div_variant(grad_b=lambda a, b, g: (g * a / b**2).sum(0)),
              "grad_b has the wrong sign: a larger b makes a / b smaller where a > 0, so the derivative with respect "
              "to b is negative there."),
    Diagnosis("grad_out left out of grad_b, unsummed", _div_variant(grad_b=lambda a, b, g: -a / b**2), _NO_GRAD_OUT_B),
    Diagnosis("grad_out left out of grad_b", _div_variant(grad_b=lambda a, b, g: (-a / b**2).sum(0)), _NO_GRAD_OUT_B),
    Diagnosis("a left out of grad_b", _div_variant(grad_b=lambda a, b, g: (-g / b**2).sum(0)),
              "grad_b leaves out a: the derivative of a / b with respect to b still holds a."),
    Diagnosis("the derivative of 1 / b taken for -1 / b", _div_variant(grad_b=lambda a, b, g: (-g * a / b).sum(0)),
              "grad_b: check the derivative of 1 / b; it is not -1 / b."),
    Diagnosis("grad_b with respect to a", _div_variant(grad_b=lambda a, b, g: (g / b).sum(0)),
              "grad_b is the derivative with respect to a, not b."),
    Diagnosis("grad_b of a product", _div_variant(grad_b=lambda a, b, g: (g * a).sum(0)),
              "grad_b is the derivative of a * b with respect to b; here b divides."),
    Diagnosis("grad_b averaged over the broadcast rows", _div_variant(grad_b=lambda a, b, g: (-g * a / b**2).mean(0)),
              "grad_b averages over the rows b was broadcast along; the edge adds them (each row used b once, and "
              "each use sends its own share)."),
    Diagnosis("the two gradients swapped",
              _div_variant(grad_a=lambda a, b, g: -g * a / b**2, grad_b=lambda a, b, g: (g / b).sum(0)),
              "you swapped them: the derivative with respect to `a` went to `b` and the other way round."),
    Diagnosis("grad_out left out of both", _div_variant(grad_a=lambda a, b, g: 1 / b, grad_b=lambda a, b, g: -a / b**2),
              "both leave out grad_out. The node must multiply its local derivatives by the gradient it receives (the "
              "chain rule), not return them alone."),
)


_DIV_NAMES = ("grad_a", "grad_b")


def _div_unexplained(i: int, got: torch.Tensor, want: torch.Tensor, broadcast: torch.Size) -> str:
    """The hint for a gradient that no row of ``_DIV_DIAGNOSES`` explains: its shape, or what to redo."""
    name = _DIV_NAMES[i]
    if got.shape == broadcast and want.shape != broadcast:
        return (f"{name} has shape {tuple(got.shape)}, the shape of out: `b` (shape {tuple(want.shape)}) was "
                f"broadcast over the rows of `a`, so each row sent it a share. Sum them back to {tuple(want.shape)} "
                "(`.sum(0)`, or `.sum_to_size(b.shape)`), as the engine does on the edge.")
    if got.shape != want.shape:
        return f"{name} should have the shape of its input, {tuple(want.shape)}; yours has shape {tuple(got.shape)}."
    return (f"{name} does not match autograd: differentiate a / b with respect to {name[-1]}, multiply by grad_out"
            + (", then sum over the rows b was broadcast along." if i else "."))


def _call_div_backward(fn, a, b, g):
    """(grad_a, grad_b) from the learner's function, or (None, feedback); grad mode and dtype left as found."""
    mode, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        out = fn(a.clone(), b.clone(), g.clone())
    except Exception as err:  # noqa: BLE001 -- the learner's code
        return None, wrong(f"calling div_backward(a, b, grad_out) raised {describe_error(err)}")
    finally:
        torch.set_grad_enabled(mode)
        torch.set_default_dtype(dtype)
    items = list(out)[:3] if isinstance(out, (tuple, list)) else []
    if len(items) != 2 or not all(isinstance(t, torch.Tensor) for t in items):
        return None, malformed("div_backward must return two tensors, `return grad_a, grad_b`; got "
                               f"{type(out).__name__}.")
    got = [plain(t) for t in items]  # judged by their values alone: a subclass cannot answer the comparisons
    if any(t is None or t.is_sparse or t.is_meta or t.is_complex() for t in got):
        return None, malformed("return ordinary real tensors (torch.Tensor, no subclass), computed from a, b and "
                               "grad_out.")
    return tuple(t.to(torch.float64) for t in got), None


def _same(t: torch.Tensor, value: torch.Tensor, size=None) -> bool:
    return t.shape == value.shape and close(t, value, size=size)


def _div_sizes(a, b, g):
    """The sizes of the terms each gradient adds up (autograd on |a| and |grad_out|; b > 0): grad_b sums a row of
    products per entry, and those can cancel, so a gradient computed in float32 is held to a share of its terms'
    sizes (``close``), not of its own."""
    return tuple(t.abs() for t in _reference_div_backward(a.abs(), b, g.abs()))


def _div_mistake(got, a, b, g) -> str | None:
    """The hint for what is wrong in (grad_a, grad_b), or None when both match autograd."""
    want, sizes = _reference_div_backward(a, b, g), _div_sizes(a, b, g)
    off = [i for i in (0, 1) if not _same(got[i], want[i], sizes[i])]
    for i in off:
        if not torch.isfinite(got[i]).all():
            return f"{_DIV_NAMES[i]} holds {got[i].tolist()}: not all finite numbers, although b is never 0 here."

    def explains(*sides):  # the variant gets these gradients wrong, and wrong as the answer does
        def matches(variant):
            out = variant(a, b, g)
            return all(not _same(out[i], want[i], sizes[i]) and _same(got[i], out[i]) for i in sides)
        return matches

    both = hint_for(_DIV_DIAGNOSES, explains(*off)) if len(off) == 2 else None
    if both is not None or not off:
        return both
    return " ".join(hint_for(_DIV_DIAGNOSES, explains(i)) or _div_unexplained(i, got[i], want[i], a.shape)
                    for i in off)


@never_raises
def check_div_backward(answer) -> Feedback:
    """Exercise 2: ``div_backward(a, b, grad_out) -> (grad_a, grad_b)`` for out = a / b, b broadcast over a's rows.

    Compared with ``torch.autograd.grad`` on two random draws (float64; a of shape (2, 3), b of shape (3,)), new
    for every call; the function gets copies, so changing them in place moves nothing the check compares with.
    """
    problem = read_function(answer, "your function div_backward (its name, without parentheses)",
                            "div_backward(a, b, grad_out) returning (grad_a, grad_b)", 3)
    if problem is not None:
        return problem
    for _ in range(2):
        a, b, g = _div_points()
        got, problem = _call_div_backward(answer, a, b, g)
        if problem is not None:
            return problem
        mistake = _div_mistake(got, a, b, g)
        if mistake is not None:
            return wrong(mistake)
    return correct("your node's backward matches autograd: grad_a = grad_out / b, and grad_b = -grad_out * a / b**2 "
                   "summed over the rows that shared b. That is micrograd's method: write a local derivative, then "
                   "check it against an engine you trust.")


# --- Exercise 3: does a second backward raise? ------------------------------------------------

SECOND_BACKWARD = {
    "A": "torch.cat([a, b]).sum()",
    "B": "(a * b.detach()).sum()",
    "C": "a.exp().sum()",
    "D": "a.expand(3, 2).sum()",
}

_WHY = {
    "A": "CatBackward0 only cuts the incoming gradient back into pieces (it keeps the dimension, a plain number), "
    "and SumBackward0 keeps a shape: neither saves a tensor.",
    "B": "the gradient for a is grad_output * b, so MulBackward0 saves the values of b, detached or not; backward "
    "frees them.",
    "C": "the derivative of exp is exp itself: ExpBackward0 saves its result, and backward frees it.",
    "D": "ExpandBackward0 sums the gradient back to a's shape and needs only that shape; SumBackward0 too.",
}

# Hints for a wrong item: the question to ask, not the verdict.
_NUDGE = {
    "A": "to hand each input its part of the gradient, does concatenation need the values of a and b, or only "
    "where one ends and the other begins?",
    "B": "detach() keeps b out of the graph. Does that change what the product needs, at backward time, to send a "
    "its gradient?",
    "C": "what is the derivative of exp(a), and where does ExpBackward0 find it when backward runs?",
    "D": "expand copies a along a new dimension without reading its values; what does its backward do with the "
    "incoming gradient?",
}


# Each belief about exercise 3 as the answer it gives, whatever the expressions are.
_SECOND_DIAGNOSES = (
    Diagnosis("backward frees every node", lambda keys: dict.fromkeys(keys, True),
              "You said every one raises: backward frees what nodes saved, but a node that saved nothing loses "
              "nothing. "),
    Diagnosis("backward frees nothing a node needs", lambda keys: dict.fromkeys(keys, False),
              "You said none raises: but some nodes must keep a tensor for backward, and backward frees it. "),
)


def _second_backward_raises(source: str) -> bool:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    out = eval(source, {"torch": torch}, {"a": a, "b": b})  # our own fixed strings, above
    out.backward()
    try:
        out.backward()
    except RuntimeError:
        return True
    return False


def _reference_second_backward() -> dict[str, bool]:
    """For each expression of exercise 3: does a second ``.backward()`` raise? (run, not typed in)"""
    return {key: _second_backward_raises(src) for key, src in SECOND_BACKWARD.items()}


def _as_verdict(value) -> bool | None:
    """True/False from a bool, a numpy bool, a one-element bool tensor, or the integers 1 and 0; else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool and value.numel() == 1 and value.layout == torch.strided and not value.is_meta:
            return bool(value.reshape(()))
        return None
    if getattr(getattr(value, "dtype", None), "kind", "") == "b" and getattr(value, "size", 0) == 1:
        return bool(value.item())  # numpy's True_ / False_
    number = as_number(value)
    return {0.0: False, 1.0: True}.get(number) if number is not None else None


def _verdicts(answer, keys: list, form: str) -> tuple[dict | None, Feedback | None]:
    """The learner's {key: raises?} with keys in upper case, or the feedback on the answer's form.

    A dict is read as given; a set, list or tuple of keys (e.g. {"B", "C"}) as the expressions that raise.
    """
    if isinstance(answer, dict):
        pairs = list(answer.items())
    else:
        items = as_names(answer, limit=len(keys) * 4)
        if items is None or not all(isinstance(k, str) for k in items):
            return None, malformed(f"give {form}.")
        raising = {k.strip().upper() for k in items}
        pairs = [(k, k in raising) for k in keys] + [(k, True) for k in sorted(raising - set(keys))]
    named = {}
    for key, value in pairs:
        name = key.strip().upper() if isinstance(key, str) else key
        if name in named:
            return None, malformed(f"the key {name!r} appears twice; give each of {', '.join(keys)} once.")
        named[name] = value
    missing = [k for k in keys if k not in named]
    extra = [k for k in named if k not in keys]
    if missing or extra:
        what = (f"missing {', '.join(map(str, missing))}" if missing else "") + (
            ("; " if missing and extra else "") + (f"unknown keys {', '.join(map(repr, extra[:5]))}" if extra else "")
        )
        return None, malformed(f"give exactly the keys {', '.join(keys)} ({what}).")
    verdicts = {k: _as_verdict(named[k]) for k in keys}
    if any(v is None for v in verdicts.values()):
        return None, malformed(f"each value must be True or False; give {form}.")
    return verdicts, None


@never_raises
def check_second_backward(answer) -> Feedback:
    """Exercise 3: {"A": True/False, ...}, True where a second ``.backward()`` raises.

    Also accepted: numpy or tensor booleans, 1 and 0, lower-case keys, and the set of keys that raise.
    """
    keys = list(SECOND_BACKWARD)
    form = "a dict {" + ", ".join(f'"{k}": True or False' for k in keys) + "}, True where the second backward raises"
    if is_unanswered(answer):
        return unanswered(form)
    verdicts, problem = _verdicts(answer, keys, form)
    if problem is not None:
        return problem
    truth = _reference_second_backward()
    off = [k for k in keys if verdicts[k] != truth[k]]
    if not off:
        return correct(
            "a second backward fails exactly where a node needs a tensor it saved: "
            + " ".join(f"{k}: {_WHY[k]}" for k in keys)
        )
    belief = hint_for(_SECOND_DIAGNOSES, lambda variant: variant(keys) == verdicts) or ""
    lines = [f"{k} = {SECOND_BACKWARD[k]}: {_NUDGE[k]}" for k in off]
    return wrong(
        f"{len(off)} of {len(keys)} not yet. {belief}Ask of each node: does its derivative need a value from the "
        "forward pass? Only saved tensors are freed; a `_saved_` attribute that holds a number, a shape or None "
        "(`_saved_alpha` of an addition, `_saved_self` of `w * x` when x needs no gradient) loses nothing. To "
        "look, print each node's `_saved_` attributes, as section 2 does, and find the ones that hold tensors.\n"
        + "\n".join(lines)
    )


trust.record(__name__)  # last: every name above is defined (see .trust)
