"""Answer checks for notebook 01, leaf tensors.

Each exercise shows a snippet; the snippet's text lives here (the notebook
prints it in its prompt) so that the check and the prompt cannot drift apart.
Every reference answer is computed by running the snippet, never typed in. The belief
behind a whole wrong answer of exercise 1 is named from a table of diagnoses
(:mod:`.diagnoses`): each row holds the answer a learner who holds it gives.

No check raises on a learner's answer (each is wrapped in ``never_raises``): an
exception of any class, from the learner's function or from an odd answer object,
``SystemExit`` included, becomes feedback. Only ``KeyboardInterrupt`` passes through:
the learner asked the cell to stop.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
from collections.abc import Mapping

import torch

from ..graphmodel import node_name
from . import trust
from .answers import as_names, close, equal, is_unanswered
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong

__all__ = ["LEAVES_SNIPPET", "OUTCOMES", "RECORDING", "check_leaves", "check_make_weight", "check_recording"]

LEAVES_SNIPPET = """\
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
h = w * x
s = x * 2
z = torch.zeros_like(w)
m = torch.zeros(3)
m[1] = w[1]"""

def _run_snippet(snippet: str) -> dict:
    """Run a snippet in a fresh namespace (with ``torch``) and return its tensors by name."""
    namespace: dict = {"torch": torch}
    exec(snippet, namespace)  # the snippets are this module's own constants
    return {name: value for name, value in namespace.items() if isinstance(value, torch.Tensor)}


# ---------------------------------------------------------------- exercise 1: which tensors are leaves?

# Why each tensor of the snippet is, or is not, a leaf: shown for a tensor the learner misplaced. The verdict
# itself comes from running the snippet; "{fn}" is the grad_fn it gave the tensor.
_LEAF_WHY = {
    "w": "you created w yourself with requires_grad=True; no operation made it: a leaf.",
    "x": "created by you, without requires_grad; a tensor that records no history is a leaf.",
    "h": "an input, w, requires grad, so the product was recorded; h has a grad_fn ({fn}) and is not a leaf.",
    "s": "made by an operation, but none of its inputs requires grad, so nothing was recorded; s has no grad_fn, "
         "and every tensor without a grad_fn is a leaf.",
    "z": "zeros_like takes only w's shape, dtype and device: w is no differentiable input of it, so nothing was "
         "recorded and z has no grad_fn: a leaf.",
    "m": "you created m as a leaf, but the second line writes w's value into it in place, and w requires grad. "
         "An in-place operation takes in the tensor it writes into: the write was recorded, m now has a grad_fn "
         "({fn}) and is no longer a leaf.",
}


def _snippet_lines(name: str) -> str:
    """The snippet's lines that make or change ``name`` (`m = ...`, then `m[1] = ...`), as the hint quotes them."""
    lines = [line.strip() for line in LEAVES_SNIPPET.splitlines()
             if line.split("=", 1)[0].strip().split("[", 1)[0] == name]
    return ", then ".join(f"`{line}`" for line in lines)


def _leaf_hint(name: str, t: torch.Tensor) -> str:
    fn = "None" if t.grad_fn is None else node_name(t.grad_fn)
    return f"{_snippet_lines(name)}: " + _LEAF_WHY[name].format(fn=fn)


def _made_by_factory(name: str) -> bool:
    return any(line.startswith(f"{name} = torch.") for line in LEAVES_SNIPPET.splitlines())


# Each belief about leaves as the set of names it picks from the snippet's tensors; the first row that picks the
# answer names the belief behind the whole answer.
_LEAF_DIAGNOSES = (
    Diagnosis("no tensor is a leaf", lambda tensors: set(),
              "You chose none, yet every tensor without a grad_fn is a leaf. "),
    Diagnosis("a leaf is a tensor that requires grad",
              lambda tensors: {n for n, t in tensors.items() if t.requires_grad},
              "You chose the tensors that require grad: being a leaf is about history (no grad_fn), not about "
              "requires_grad. "),
    Diagnosis("leaves and non-leaves swapped", lambda tensors: {n for n, t in tensors.items() if not t.is_leaf},
              "You chose exactly the non-leaves: the tensors a recorded operation made or changed. "),
    Diagnosis("only parameters are leaves",
              lambda tensors: {n for n, t in tensors.items() if t.is_leaf and t.requires_grad},
              "You kept only the leaves that require grad (the parameters); a tensor that needs no gradient and has "
              "no grad_fn is a leaf too. "),
    Diagnosis("a leaf is what a torch function created", lambda tensors: set(filter(_made_by_factory, tensors)),
              "You kept the tensors a torch function created: a leaf is a tensor without a grad_fn, whoever made it. "
              "An operation that records nothing leaves none, and a recorded change gives one. "),
)


def _leaves_form(answer) -> tuple[set | None, Feedback | None]:
    """The learner's names as a set, or the feedback that says why the answer has the wrong form."""
    form = 'a set of names (strings), e.g. {"w", "h"}'
    if isinstance(answer, Mapping):
        return None, malformed(f"you gave a {type(answer).__name__}; give only the names of the leaves, as {form}.")
    items = as_names(answer)
    if items is None:
        return None, malformed(f"expected {form}; got {type(answer).__name__}.")
    if not all(isinstance(a, str) for a in items):
        return None, malformed(f"expected {form}: write the names in quotes.")
    return {a.strip() for a in items}, None


@never_raises
def check_leaves(answer) -> Feedback:
    """Exercise 1: the set of names in ``LEAVES_SNIPPET`` whose tensor is a leaf (any collection of names)."""
    if is_unanswered(answer):
        return unanswered('the set of names of the leaves, e.g. {"w", "h"}')
    chosen, problem = _leaves_form(answer)
    if problem is not None:
        return problem
    tensors = _run_snippet(LEAVES_SNIPPET)
    names = list(tensors)
    unknown = sorted(chosen - set(names))
    if unknown:
        shown = ", ".join(u if u.isidentifier() else repr(u) for u in unknown[:5])
        shown += ", ..." if len(unknown) > 5 else ""
        return malformed(f"the snippet has no tensor named {shown}; its tensors are {', '.join(names)}.")
    leaves = {n for n, t in tensors.items() if t.is_leaf}
    if chosen == leaves:
        return correct(
            f"the leaves are {', '.join(n for n in names if n in leaves)}. A leaf is any tensor without a grad_fn: "
            "one you created and no recorded operation has written into, or one made by an operation that "
            "recorded nothing."
        )
    hints = []
    for n in names:
        if (n in chosen) != (n in leaves):
            verdict = "is a leaf" if n in leaves else "is not a leaf"
            hints.append(f"- {n} {verdict}. " + _leaf_hint(n, tensors[n]))
    count = len(hints)
    return wrong(
        f"{count} tensor{'s' if count > 1 else ''} misplaced. "
        f"{hint_for(_LEAF_DIAGNOSES, lambda variant: variant(tensors) == chosen) or ''}"
        "Run the snippet and print `t.is_leaf` to see it for yourself:\n" + "\n".join(hints)
    )


# ---------------------------------------------------------------- exercise 2: recorded, not recorded, or raises?

RECORDING_X = "torch.tensor([1.5, -0.5, 2.0], requires_grad=True)"
RECORDING = {
    "A": "x.new_zeros(3).fill_(x.sum())",
    "B": "x.new_zeros(3).fill_(x.sum().item())",
    "C": "x + torch.floor_divide(x, 2)",
    "D": "(x * 2).copy_(x.detach())",
    "E": "torch.where(x > 0, x, 0.0)",
}
OUTCOMES = ("recorded", "not recorded", "raises")

# Why each result has its outcome, and what to think about when a learner placed it elsewhere.
_RECORDING_WHY = {
    "A": "`new_zeros` makes a tensor without history, but `fill_` then takes `x.sum()`, which requires grad, as the "
         "value it writes: a differentiable input, so it is recorded, and backward sends each entry's gradient back "
         "to that value and on to `x`.",
    "B": "`.item()` turns `x.sum()` into a Python number, which has no history, and `fill_` writes it into a tensor "
         "that requires no grad: no input requires grad, so nothing is recorded, although every value came "
         "from `x`.",
    "C": "`x` is a differentiable input of both the addition and `floor_divide`, so both are recorded. Backward "
         "walks every recorded path from the output back to `x`: the direct one works, but the other reaches "
         "`floor_divide`'s node, which has no derivative formula, and backward raises there.",
    "D": "every value comes from `x.detach()`, but an in-place operation always takes in the tensor it writes into, "
         "and `x * 2` requires grad: `copy_` is recorded, and backward works (it sends `x` a zero gradient, for the "
         "values it overwrote).",
    "E": "the comparison inside records nothing, but `x` itself is a differentiable input of `torch.where` and the "
         "result is float: recorded, and backward works (the gradient reaches the entries where the condition held).",
}


# A hint for each wrong place a result can be put: the mistaken belief, and the question of the table to ask.
_RECORDING_NUDGE = {
    ("A", "not recorded"): "`new_zeros` records nothing, like the table's `new_*` factories, but it is not the last "
                           "operation: what does `fill_` take as the value it writes, and does that require grad?",
    ("A", "raises"): "filling with a value has a derivative: each entry's gradient goes back to the value it was "
                     "filled with.",
    ("B", "recorded"): "every value comes from `x`, but through what? `.item()` gives a Python number: does any "
                       "input of `fill_` require grad?",
    ("B", "raises"): "a node can raise at backward only if it was recorded first. Once `.item()` has made `x.sum()` "
                     "a Python number, does any input of `fill_` require grad?",
    ("C", "not recorded"): "walk the addition down the table: grad mode is on, `x` is a differentiable input, the "
                           "result is float. Does any of those answers stop it from being recorded?",
    ("C", "recorded"): "recorded, yes, and the addition has a derivative formula. But backward walks every recorded "
                       "path from the output back to `x`, not only the direct one: which node sits on the other?",
    ("D", "not recorded"): "every value comes from `x.detach()`, but `copy_` writes in place. Which tensor does an "
                           "in-place operation always take in, and does `x * 2` require grad?",
    ("D", "raises"): "`copy_` has a derivative formula: the gradient goes to the source, and zero to the values it "
                     "overwrote.",
    ("E", "not recorded"): "the comparison inside records nothing, but is `x` itself a differentiable input of "
                           "`torch.where`?",
    ("E", "raises"): "`torch.where` only picks entries: its derivative is 1 where it picked from `x` and 0 elsewhere.",
}


def _outcome(result: torch.Tensor) -> str:
    """A result's place in the decision table, as the notebook's outcomes cell finds it: no grad_fn, not recorded;
    else backward through it raises, or works."""
    if result.grad_fn is None:
        return "not recorded"
    try:
        result.sum().backward()
    except RuntimeError:
        return "raises"
    return "recorded"


def _reference_recording() -> dict[str, str]:
    """For each result of exercise 2, its outcome in the decision table (run, not typed in)."""
    made = {key: eval(source, {"torch": torch}, {"x": eval(RECORDING_X, {"torch": torch})})  # our own strings
            for key, source in RECORDING.items()}
    return {key: _outcome(result) for key, result in made.items()}


# Words that may stand around "raises" in the third outcome: "raises at backward", "recorded, then backward raises".
_RAISES_WORDS = {"recorded", "then", "and", "but", "raises", "raise", "at", "in", "on", "during", "when", "backward",
                 "reaches", "it"}


def _as_outcome(value) -> str | None:
    """One of OUTCOMES from the ways a learner may write it ("Not recorded", "raises at backward", ...)."""
    if not isinstance(value, str):
        return None
    text = value.lower().replace("()", "")
    for mark in "-,_.;:!":
        text = text.replace(mark, " ")
    words = text.split()
    if words in (["recorded"], ["not", "recorded"], ["unrecorded"]):
        return "recorded" if words == ["recorded"] else "not recorded"
    if {"raises", "raise"} & set(words) and set(words) <= _RAISES_WORDS:
        return "raises"  # "raises", "raises at backward", "recorded, then backward raises", "backward raises"
    return None


@never_raises
def check_recording(answer) -> Feedback:
    """Exercise 2: {"A": "recorded" | "not recorded" | "raises", ...} for the results in ``RECORDING``."""
    keys = list(RECORDING)
    form = ("a dict {" + ", ".join(f'"{k}": ...' for k in keys)
            + '} whose values are "recorded", "not recorded" or "raises"')
    if is_unanswered(answer):
        return unanswered(form)
    if not isinstance(answer, Mapping):
        return malformed(f"give {form}; got {type(answer).__name__}.")
    given = {}
    for key, value in answer.items():
        name = key.strip().upper() if isinstance(key, str) else key
        if name in given:
            return malformed(f"the key {name!r} appears twice; give each of {', '.join(keys)} once.")
        given[name] = value
    missing, extra = [k for k in keys if k not in given], [k for k in given if k not in keys]
    if missing or extra:
        return malformed(f"give exactly the keys {', '.join(keys)}"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; unknown {', '.join(map(repr, extra[:5]))}" if extra else "") + ".")
    verdicts = {k: _as_outcome(given[k]) for k in keys}
    unclear = [k for k in keys if verdicts[k] is None]
    if unclear:
        return malformed(f"{', '.join(unclear)}: each value must be one of \"recorded\", \"not recorded\" or "
                         f"\"raises\"; got {given[unclear[0]]!r:.40}.")
    truth = _reference_recording()
    off = [k for k in keys if verdicts[k] != truth[k]]
    if not off:
        return correct("every one placed right. " + " ".join(f"{k}: {_RECORDING_WHY[k]}" for k in keys))
    belief = ""
    if len(set(verdicts.values())) == 1:  # a fact of the answer, not a belief a variant reproduces
        belief = f"You gave every one the same outcome, {verdicts[keys[0]]!r}; the five land in all three. "
    lines = [f"- {k} = {RECORDING[k]}: {_RECORDING_NUDGE[(k, verdicts[k])]}" for k in off]
    return wrong(f"{len(off)} of {len(keys)} not yet. {belief}Walk each one down the decision table of section 2, "
                 "question by question:\n" + "\n".join(lines))


# ---------------------------------------------------------------- exercise 3: repair a snippet whose .grad is None


_LOW, _HIGH = 0.0, 0.01  # make_weight's range: torch.rand(3) * 0.01 is uniform in [0, 0.01)
_DRAWS = 100  # calls whose values the spread test pools (300 weights)
_KS_LIMIT = 2.69  # Kolmogorov-Smirnov distance x sqrt(n) that a uniform sample exceeds with probability 1e-6


def _needs_arguments(fn) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (some builtins): let the call decide
        return False
    return False


def _call_factory(fn) -> tuple[torch.Tensor | None, Feedback | None]:
    try:
        w = fn()
    except Exception as err:  # the learner's code: report, never raise
        return None, wrong(f"calling your function raised {describe_error(err)}")
    if not isinstance(w, torch.Tensor):
        return None, malformed(f"your function should return a tensor; it returned {type(w).__name__}.")
    return w, None


def _form_problem(w: torch.Tensor) -> Feedback | None:
    """What is wrong with the kind of tensor returned, before its values are read."""
    if w.layout != torch.strided:
        return wrong(f"your function returns a {w.layout} tensor; return an ordinary dense tensor, as torch.rand does.")
    if w.is_meta:
        return wrong("your function returns a meta tensor, which has a shape but no values; drop device='meta'.")
    if tuple(w.shape) != (3,):
        return wrong(f"the function should return 3 weights (shape (3,)); got shape {tuple(w.shape)}.")
    if w.is_complex() or not w.is_floating_point():
        return wrong(f"the weights should be real floating-point numbers, as torch.rand gives; got dtype {w.dtype}.")
    if not w.requires_grad:
        return wrong(
            "the tensor it returns requires no grad, so backward will never fill its .grad. "
            "Keep the scaling, and ask for gradients on the tensor you return."
        )
    if not w.is_leaf:
        retained = (
            "retain_grad() makes backward fill its .grad, but it stays an intermediate result: an optimizer refuses "
            "it (can't optimize a non-leaf Tensor), and the real leaf hides behind it. " if w.retains_grad else ""
        )
        return wrong(
            f"the tensor it returns is still not a leaf: it has grad_fn {node_name(w.grad_fn)}, because an operation "
            f"ran after requires_grad=True was set. {retained}Do the scaling first, then make the result require grad "
            "(.requires_grad_(), or torch.nn.Parameter)."
        )
    return None


def _value_problem(w: torch.Tensor, seen: list) -> Feedback | None:
    """What is wrong with the values, or with a tensor met on an earlier call."""
    if any(w is old for old in seen):
        return wrong("your function returns the same tensor object on every call; create a new one inside it.")
    if any(w.untyped_storage().data_ptr() == old.untyped_storage().data_ptr() for old in seen):
        return wrong("each call returns a tensor that shares its memory with the previous one; create new weights "
                     "inside the function (torch.rand draws new ones on every call).")
    values = w.detach().cpu().double()
    if not torch.isfinite(values).all():
        return wrong(f"your weights contain {values.tolist()}: not all finite numbers. "
                     "Draw them with torch.rand(3) * 0.01.")
    # rand() * 0.01 just below 0.01 rounds up to it, or past it, in a coarse dtype (bfloat16: 0.01001)
    high = _HIGH * (1 + torch.finfo(w.dtype).eps) if w.is_floating_point() else _HIGH
    if values.min() < _LOW or values.max() > high:
        return wrong(
            "the weights should stay small, uniform in [0, 0.01) like the original's; got values from "
            f"{float(values.min()):.4g} to {float(values.max()):.4g}. Keep the * 0.01."
        )
    shown = "[" + ", ".join(f"{v:.4g}" for v in values.tolist()) + "]"
    if bool((values == values[0]).all()):
        return wrong(f"your three weights are all {float(values[0]):.4g}; make_weight draws three different random "
                     "values, uniform in [0, 0.01). Keep the torch.rand(3).")
    if any(equal(values, old.detach().cpu().double()) for old in seen):
        return wrong(
            f"two calls returned the same weights {shown}. make_weight draws new random weights on every "
            "call; fixed values, or a seed set inside the function, repeat them."
        )
    return None


def _backward_problem(w: torch.Tensor, generator: torch.Generator) -> Feedback | None:
    if w.grad is not None:
        return wrong("the tensor arrives with a .grad already filled; return a fresh tensor whose .grad is None.")
    x = torch.randn(3, generator=generator).to(device=w.device, dtype=w.dtype)
    try:
        (w * x).sum().backward()
    except Exception as err:
        return wrong(f"backward through (w * x).sum() raised {describe_error(err)}")
    if w.grad is None:
        return wrong("after backward, .grad of the returned tensor is still None.")
    if not close(w.grad.detach().cpu().double(), x.cpu().double(), rtol=1e-5, atol=1e-8):
        return wrong(
            "after one backward through (w * x).sum(), w.grad should equal x, but it differs. Does your function "
            "return a fresh tensor on each call, with an empty .grad?"
        )
    return None


def _spread_problem(weights: list) -> Feedback | None:
    """Do the pooled weights look uniform on [0, 0.01)? (a Kolmogorov-Smirnov test that a right answer fails 1e-6)"""
    values = torch.cat([w.detach().cpu().double() for w in weights])
    u = ((values - _LOW) / (_HIGH - _LOW)).sort().values
    n = len(u)
    steps = torch.arange(1, n + 1, dtype=torch.float64) / n
    distance = float(torch.maximum(steps - u, u - (steps - 1 / n)).max())
    if distance * math.sqrt(n) <= _KS_LIMIT:
        return None
    return wrong(
        f"over {len(weights)} calls your weights ran from {float(values.min()):.4g} to {float(values.max()):.4g} "
        f"(mean {float(values.mean()):.4g}): not spread uniformly over [0, 0.01), where the mean is about 0.005. "
        "Keep the original's values, torch.rand(3) * 0.01."
    )


def _check_factory(fn, trials: int) -> Feedback:
    generator = trust.fresh_generator()
    seen: list = []  # every tensor returned, kept alive so that a reused object or memory shows
    for call in range(max(trials, _DRAWS)):
        if call < trials:
            w, problem = _call_factory(fn)
        else:  # the extra draws only pool values: a print in the function would repeat for each of them
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                w, problem = _call_factory(fn)
        # a Feedback is falsy unless it passed: compare each result with None, never chain them with `or`
        if problem is None:
            problem = _form_problem(w)
        if problem is None:
            problem = _value_problem(w, seen)
        if problem is None and call < trials:
            problem = _backward_problem(w, generator)
        if problem is not None:
            return problem
        seen.append(w)
    spread = _spread_problem(seen)
    return spread if spread is not None else correct(
        f"over {trials} calls your function returned a leaf that requires grad, and backward through (w * x).sum() "
        "filled its .grad with x, as d(w*x)/dw = x says."
    )


@never_raises
def check_make_weight(answer, *, trials: int = 5) -> Feedback:
    """Exercise 3: a function returning 3 weights uniform in [0, 0.01) that are leaves which receive ``.grad``.

    The check calls it ``trials`` times, runs backward through ``(w * x).sum()`` on
    random ``x`` and compares ``w.grad`` with the reference gradient, ``x``. Then it
    pools the weights of further calls (``_DRAWS`` in all) and tests that they are new
    on every call and spread uniformly over [0, 0.01). Torch's random state is seeded afresh
    from the operating system for the check (no seed the learner sets reaches it) and
    restored afterwards, so the learner's own random numbers are not disturbed; a right
    answer fails the spread test about once in a million checks.
    """
    if is_unanswered(answer):
        return unanswered("your repaired function (its name, without parentheses)")
    if isinstance(answer, torch.Tensor):
        return malformed(
            "you passed a tensor; pass the function itself, without calling it: answer = make_weight_fixed"
        )
    if not callable(answer):
        return malformed(f"expected a function that takes no arguments; got {type(answer).__name__}.")
    if _needs_arguments(answer):
        return wrong("your function needs arguments, but it is called like make_weight(), with none: "
                     "drop the parameters or give them defaults.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(trust.fresh_seed())
        return _check_factory(answer, trials)


trust.record(__name__)  # last: every name above is defined (see .trust)
