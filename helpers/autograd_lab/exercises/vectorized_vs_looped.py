"""Answer checks for notebook 03, vectorized against looped losses.

The references below are the code the notebook shows (the loss of exercise 1, written out in its prompt, and the
loop of exercise 2), kept here because a check must not depend on what a learner has since changed in the
notebook; tests/exercises/test_vectorized_vs_looped_checks.py runs the notebook's own cells beside them on fresh
inputs. A wrong answer's hint comes from a table of diagnoses (:mod:`.diagnoses`): each row is a miscount, or a
loss, that reproduces one mistake.

No check raises on a learner's answer: each is wrapped in ``never_raises``, with the
policy that module ``leaf_tensors`` describes (every ``Exception`` becomes feedback).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import sysconfig

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from ..measure import count_nodes
from . import trust
from .answers import as_int, as_number, close, is_unanswered, read_number
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong

__all__ = ["check_looped_nodes", "check_vectorized_loss"]


# ---------------------------------------------------------------- exercise 1: predict a looped graph's size


def _reference_scaled_loss(w, b, x, y):
    """The loss of exercise 1, as its prompt shows it (there ``w`` and ``b`` are global tensors)."""
    scale = w.exp()
    total = 0
    for k in range(len(y)):
        total = total + (scale * x[k] + b - y[k]) ** 2
    return total / len(y)


def _scaled_loss_nodes(n: int) -> int:
    """The node count of exercise 1's graph for ``n`` samples, built (the values do not change the count)."""
    gen = trust.fresh_generator()
    w, b = (torch.randn((), generator=gen).requires_grad_(True) for _ in range(2))
    x = torch.randn(n, generator=gen)
    return count_nodes(_reference_scaled_loss(w, b, x, 2 * x))


_MAX_N = 10_000  # the largest batch whose graph the check builds (50 in the notebook)
_PER_SAMPLE = ("scale * x[k]", "+ b", "- y[k]", "** 2", "total + ...")  # the operations one iteration records
_ONCE = ("w.exp()", "the division", "w's AccumulateGrad", "b's AccumulateGrad")  # the nodes all samples share


# Each miscount of exercise 1's graph, as the count it gives from N and the graph's true nodes per sample and shared
# nodes; the first row whose count is the answer names the mistake.
_NODE_DIAGNOSES = (
    Diagnosis("the first `0 + ...` taken for unrecorded, or section 2's 5 N + 3 copied",
              lambda n, per, once: per * n + once - 1,
              "one node short. Did you count the first iteration's `total + ...`, which is `0 + ...`? Adding a plain "
              "number to a tensor that needs grad is recorded like any other operation. Then check the shared nodes: "
              "what runs before and after the loop, and one AccumulateGrad per leaf. (5 N + 3 is section 2's count, "
              "for its own loss.)"),
    Diagnosis("w.exp(), or b's AccumulateGrad, counted once per sample", lambda n, per, once: (per + 1) * n + once - 1,
              "one node too many on each sample's path: either w.exp(), which runs once, before the loop, or b's "
              "AccumulateGrad, which is one node however many samples add b."),
    Diagnosis("x[k] or y[k] counted as a node", lambda n, per, once: (per + 1) * n + once,
              "one node too many on each sample's path: x[k] and y[k] index data that needs no grad, so autograd "
              "records nothing for them. Count only operations on tensors that need grad."),
    Diagnosis("x[k] and y[k] counted as nodes", lambda n, per, once: (per + 2) * n + once,
              "x[k] and y[k] index data that needs no grad: autograd records nothing for either. Count only operations "
              "on tensors that need grad."),
    Diagnosis("an AccumulateGrad per sample for w and for b", lambda n, per, once: (per + 2) * n + once - 2,
              "w and b are one leaf each: their AccumulateGrad nodes are shared by every path, not repeated per "
              "sample."),
    Diagnosis("one operation of the loop missed", lambda n, per, once: (per - 1) * n + once,
              "one node per sample short: count again the operations one iteration runs on tensors that need grad; "
              "the running sum's `total + ...` is one of them, and so is `+ b`."),
    Diagnosis("a stack or a mean counted, as section 2's loss has", lambda n, per, once: per * n + once + 1,
              "one node too many among the shared ones: this loss stacks nothing and takes no mean; it divides once."),
    Diagnosis("the shared nodes left out", lambda n, per, once: per * n,
              "you counted the per-sample paths but not the nodes all samples share: what runs before and after the "
              "loop, and the leaves' AccumulateGrad."),
    Diagnosis("one sample too few", lambda n, per, once: per * (n - 1) + once,
              lambda n: f"that is the count for N = {n - 1}: take one path per sample, {n} of them."),
    Diagnosis("one sample too many", lambda n, per, once: per * (n + 1) + once,
              lambda n: f"that is the count for N = {n + 1}: take one path per sample, {n} of them."),
    Diagnosis("the graph of N = 2, as section 2 drew it", lambda n, per, once: 2 * per + once,
              lambda n: f"that is the count for N = 2. The loop records one path per sample: {n} of them."),
    Diagnosis("the graph of one sample", lambda n, per, once: per + once,
              lambda n: f"that is the count for N = 1. The loop records one path per sample: {n} of them."),
)


@never_raises
def check_looped_nodes(answer, n: int = 50) -> Feedback:
    """Exercise 1: the number of backward nodes in the graph of the exercise's ``scaled_loss`` for ``n`` samples."""
    n_given = as_int(n)
    if n_given is None or not 1 <= n_given <= _MAX_N:
        return malformed(f"n is the batch size of the exercise (n=50 in the notebook), a whole number from 1 to "
                         f"{_MAX_N}; got {n!r}.")
    n = n_given
    number = as_number(answer)
    if number is not None and not math.isfinite(number):
        return wrong(f"{number} is not a finite number; a graph holds a whole, finite number of nodes.")
    value, problem = read_number(answer, f"a whole number: the node count of scaled_loss's graph for N = {n}", "42",
                                 whole=True)
    if problem is not None:
        return problem
    one, two, truth = _scaled_loss_nodes(1), _scaled_loss_nodes(2), _scaled_loss_nodes(n)
    per_sample = two - one
    once = one - per_sample
    if value == truth:
        return correct(
            f"{truth} nodes: {per_sample} on each sample's path ({', '.join(_PER_SAMPLE)}) times {n} samples, plus "
            f"{once} shared by all ({', '.join(_ONCE)}). What runs before or after the loop is recorded once; what "
            "runs inside it, once per sample."
        )
    if value <= 0:
        return wrong(f"{value} nodes cannot be: even one sample's graph has {one}.")
    hint = hint_for(_NODE_DIAGNOSES, lambda count: count(n, per_sample, once) == value, n=n)
    return wrong(hint or
                 "read the code line by line. The graph holds (nodes per sample) x N + (nodes shared by all samples): "
                 "one node for each operation on a tensor that needs grad, inside the loop once per sample, outside it "
                 "once, and one AccumulateGrad for each leaf.")


# ---------------------------------------------------------------- exercise 2: vectorize a loop


def _reference_weighted_loss_loop(w, x, y, weights):
    """The loop of exercise 2, as the notebook shows it."""
    total = 0
    for k in range(len(y)):
        error = x[k] @ w - y[k]
        total = total + weights[k] * error ** 2
    return total / weights.sum()


def _sizes(w, x, y, weights):
    """The loop's loss and its gradient with respect to w, each computed from the absolute values of its parts (an
    error |x[k]| @ |w| + |y[k]|): the sizes of the terms that the loss, and each entry of its gradient, add up. An
    answer computed in float32 (as the check's tests allow) rounds each term: its loss and gradient stray by a few
    parts in 10**7 of these sizes with the few dozen terms here, and a gradient entry where terms cancel can be far
    smaller than its terms."""
    leaf = w.abs().requires_grad_(True)
    size = _reference_weighted_loss_loop(leaf, x.abs(), -y.abs(), weights)
    (grad_size,) = torch.autograd.grad(size, leaf)
    return size.detach(), grad_size


# (N, D) of the cases the check runs, the largest N first: there the usual slips give values that tell them apart.
# The last case has another width, so that code written for D = 3 (w[0] * x[:, 0] + ...) does not pass.
_CASES = ((33, 3), (4, 3), (1, 3), (6, 5))
_WORK_SIZES = (4, 33)  # batch sizes whose work is counted: a per-sample loop adds at least a step per sample


def _data(n: int, dim: int, seed: int):
    """A case's w, x, y and weights, drawn so that the usual slips never land within rounding of the loop's value
    or of each other's, and each keeps its own hint: the weights lie between 1 and 2, so their sum is never close
    to N (dividing by N is no accident of the draw), and they rise with the size of the error at w, so the weighted
    mean of the squared errors exceeds their plain mean by a share of itself (leaving the weights out is no
    accident either)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, generator=gen, dtype=torch.float64)
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    weights = torch.rand(n, generator=gen, dtype=torch.float64).sort().values + 1.0
    by_error = (x @ w - y).abs().argsort()  # the sample with the k-th smallest error gets the k-th smallest weight
    return w, x, y, torch.empty_like(weights).scatter_(0, by_error, weights)


def _shape(t) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


# Each wrong loss of exercise 2 as a function of the answer's form; the first row whose value is the answer's names it.
_LOSS_DIAGNOSES = (
    Diagnosis("a mean over N", lambda w, x, y, v: (v * (x @ w - y) ** 2).mean(),
              "you divided by N (a mean); the loop divides by the sum of the weights."),
    Diagnosis("no final division", lambda w, x, y, v: (v * (x @ w - y) ** 2).sum(),
              "you forgot the final division by the sum of the weights."),
    Diagnosis("the weights left out", lambda w, x, y, v: ((x @ w - y) ** 2).mean(),
              "your loss ignores the weights: each squared error is multiplied by its weight."),
    Diagnosis("the weights only in the divisor", lambda w, x, y, v: ((x @ w - y) ** 2).sum() / v.sum(),
              "each squared error must be multiplied by its own weight before summing."),
    Diagnosis("the error weighted, not squared", lambda w, x, y, v: (v * (x @ w - y)).sum() / v.sum(),
              "the error must be squared before it is weighted."),
    Diagnosis("each weight squared", lambda w, x, y, v: (v**2 * (x @ w - y) ** 2).sum() / v.sum(),
              "each weight should multiply its squared error once; yours is squared too."),
)


def _result_problem(out, leaf: torch.Tensor, n: int) -> Feedback | None:
    """What is wrong with what the learner's function returned, before its value is compared."""
    if out is None or out is Ellipsis:
        return wrong("your function returns nothing yet: replace the ... with a return statement.")
    if not isinstance(out, torch.Tensor):
        return malformed(f"your function should return a tensor (the loss), not a {type(out).__name__}.")
    if out.layout != torch.strided or out.is_meta or out.is_complex():
        kind = "meta" if out.is_meta else "complex" if out.is_complex() else str(out.layout)
        return wrong(f"your function returns a {kind} tensor; the loss is an ordinary real number in a dense tensor.")
    if out.numel() != 1:
        return wrong(
            f"with N = {n} samples your function returned shape {_shape(out)}; the loss of a batch is one number "
            "(shape ()): sum the weighted terms, then divide."
        )
    if leaf.grad is not None:
        return wrong("your function calls backward() itself (w.grad was filled during the call); return the loss "
                     "and leave backward to whoever trains with it.")
    if out.grad_fn is None:
        return wrong(
            "the result has no grad_fn, so no gradient can reach w. Stay with tensor operations "
            "(no .item(), .numpy(), float() or torch.no_grad())."
        )
    if not torch.isfinite(out.detach()).all():
        return wrong(f"with N = {n} samples your function returned {out.item()}: check for a division by zero.")
    return None


def _compare_with_loop(fn, w, x, y, weights) -> tuple[Feedback | None, tuple | None]:
    """Run ``fn`` (always under a ``_WorkCounter``: it runs as every other call runs, whether its work is counted
    or not) and the loop on the same data: (a problem or None, (its graph nodes, the loop's, the counter))."""
    shapes = f"w {_shape(w)}, x {_shape(x)}, y {_shape(y)}, weights {_shape(weights)}"
    leaf = w.clone().requires_grad_(True)
    _warm_up()
    counter = _WorkCounter()
    try:
        with counter:
            out = fn(leaf, x.clone(), y.clone(), weights.clone())
    except Exception as err:  # a learner's function may raise anything; report it, never raise
        return wrong(f"called with {shapes} your function raised {describe_error(err)}"), None
    if counter.switched_off:
        return wrong(f"your function called {counter.switched_off}, which switches off what the check counts its "
                     "work with: a loss function needs no such call. Take it out."), None
    problem = _result_problem(out, leaf, len(y))
    if problem is not None:
        return problem, None
    try:
        nodes = count_nodes(out)
        (g,) = torch.autograd.grad(out.sum(), leaf, allow_unused=True)
    except Exception as err:
        return wrong(f"computing the gradient of your result raised {describe_error(err)}"), None
    value = out.detach().cpu()  # a learner may have moved the work to another device
    ref_w = w.clone().requires_grad_(True)
    ref = _reference_weighted_loss_loop(ref_w, x, y, weights)
    ref_nodes = count_nodes(ref)
    (ref_g,) = torch.autograd.grad(ref, ref_w)
    size, grad_size = _sizes(w, x, y, weights)
    if not close(value, ref.detach(), size=size):
        if x.shape[1] != _CASES[0][1]:
            return wrong(f"right for x with {_CASES[0][1]} columns, but not with {x.shape[1]}: does your function "
                         "assume a width? Use x @ w, which works for any D."), None
        return wrong(
            f"with N = {len(y)} samples the loop gives {ref.item():.6g}, yours {value.item():.6g}: "
            + (hint_for(_LOSS_DIAGNOSES, lambda variant: close(value, variant(w, x, y, weights)))
               or "write out the loop's sum for two samples and match it term by term: weight x (prediction - "
                  "target)^2.")
        ), None
    if g is None or not close(g.cpu(), ref_g, size=grad_size):
        return wrong(
            "same value, but a different gradient with respect to w: part of your computation is cut off "
            "from the graph (a .detach(), .data or a tensor rebuilt from numbers)."
        ), None
    return None, (nodes, ref_nodes, counter)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# Code that is not the learner's: torch, the standard library, installed packages, this course's package, and code
# generated at run time (a first call may import modules lazily; their lines are no work of the learner's loss).
_LIBRARY = tuple(sorted({_TORCH_DIR, os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep}
                        | {os.path.join(sysconfig.get_paths()[k], "") for k in
                           ("stdlib", "platstdlib", "purelib", "platlib")}))
_GENERATED = ("<string>", "<frozen", "<_")  # exec'd and frozen code; a notebook cell's file is a real one


_LEAVES_TORCH = {"tolist", "numpy", "__array__"}  # a tensor's values handed to Python or NumPy
_SWITCHES = {"settrace", "setprofile", "_pop_torch_dispatch_stack"}  # calls that would switch the counting off


class _Through(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@functools.cache
def _warm_up():
    """Use a dispatch mode once before any counting: torch imports several hundred modules on first use of one,
    which would otherwise run under the tracer and slow the first check by seconds."""
    with _Through():
        torch.zeros(2).requires_grad_().sum()


class _WorkCounter(TorchDispatchMode):
    """Counts the steps a call takes that a per-sample loop repeats: each Python line run outside torch's own code
    and this module (``sys.settrace``) and each operation that reaches torch's dispatcher (this mode), which no
    Python-level route avoids (``torch._C.DisableTorchFunction()`` included).

    A loop that runs inside a builtin over plain Python numbers (``sum(v.tolist())``, ``math.fsum``) runs no
    line and no operation per sample; what gives it away is the step before it, a tensor of several values turned
    into Python numbers or a NumPy array: ``left_torch`` names that call (``sys.setprofile`` sees it). A call that
    would switch any of this off (``sys.settrace(None)``, popping the mode) is named in ``switched_off``.
    """

    def __init__(self):
        super().__init__()
        self.steps = 0
        self.left_torch = None
        self.switched_off = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.steps += 1
        return func(*args, **(kwargs or {}))

    def _trace(self, frame, event, arg):
        name = frame.f_code.co_filename
        if name.startswith(_LIBRARY) or name.startswith(_GENERATED):
            return None
        if event == "line":
            self.steps += 1
        return self._trace

    def _profile(self, frame, event, arg):
        name = frame.f_code.co_filename
        if event != "c_call" or name.startswith(_LIBRARY) or name.startswith(_GENERATED):
            return
        name = getattr(arg, "__name__", "")  # the builtin about to be called
        if name in _SWITCHES:
            self.switched_off = self.switched_off or f"{name}()"
        owner = getattr(arg, "__self__", None)
        if name in _LEAVES_TORCH and isinstance(owner, torch.Tensor) and owner.numel() > 1:
            self.left_torch = self.left_torch or name

    def __enter__(self):
        self._previous = sys.gettrace(), sys.getprofile()
        sys.settrace(self._trace)
        sys.setprofile(self._profile)
        return super().__enter__()

    def __exit__(self, *exc):
        if sys.gettrace() != self._trace or sys.getprofile() != self._profile:
            self.switched_off = self.switched_off or "sys.settrace() or sys.setprofile()"
        sys.settrace(self._previous[0])
        sys.setprofile(self._previous[1])
        if self not in _get_current_dispatch_mode_stack():
            self.switched_off = self.switched_off or "torch._C._pop_torch_dispatch_stack()"
            torch._C._push_on_torch_dispatch_stack(self)  # back on, so that leaving it pops it
        return super().__exit__(*exc)


@never_raises
def check_vectorized_loss(answer) -> Feedback:
    """Exercise 2: a function ``f(w, x, y, weights)`` equal to the loop, without the loop.

    "Without the loop" is tested on the real thing twice over: the graph must not grow with N,
    and neither may the Python lines and torch calls the function runs (see ``_WorkCounter``).
    """
    if is_unanswered(answer):
        return unanswered("your function itself, e.g. answer = weighted_loss_vectorized")
    if not callable(answer):
        return malformed(
            "answer should be the function (answer = weighted_loss_vectorized, no brackets), "
            f"not a {type(answer).__name__}."
        )
    # One call first whose counts are not used: a first call can run one-off work that is not the learner's (torch's
    # lazy imports the first time an operation runs under a dispatch mode, a library imported on first use), which
    # would read as work that grows with N. Its problem, if any, comes back from the cases below.
    _compare_with_loop(answer, *_data(_WORK_SIZES[0], _CASES[0][1], trust.fresh_seed()))
    node_counts = {}
    for n, dim in _CASES:
        problem, counts = _compare_with_loop(answer, *_data(n, dim, trust.fresh_seed()))
        if problem is not None:
            return problem
        if dim == _CASES[0][1]:
            node_counts[n] = counts
    sizes = sorted(node_counts)
    small_n, large_n = sizes[1], sizes[-1]
    small, large = node_counts[small_n], node_counts[large_n]
    if large[0] != small[0]:
        return wrong(
            f"right values and gradients, but your graph grows with N ({small[0]} nodes for N = {small_n}, "
            f"{large[0]} for N = {large_n}): something still runs once per sample. Use x @ w for all "
            "predictions at once, then operations on whole tensors."
        )
    few, many = (node_counts[n][2] for n in _WORK_SIZES)
    if many.steps - few.steps >= _WORK_SIZES[1] - _WORK_SIZES[0]:
        return wrong(
            f"right values and gradients, and your graph does not grow with N, but your code still works once per "
            f"sample: it ran {many.steps - few.steps} more Python lines and torch calls for N = {_WORK_SIZES[1]} "
            f"than for N = {_WORK_SIZES[0]}. Some loop or comprehension remains (perhaps over the weights); replace "
            "it with an operation on the whole tensor, such as weights.sum()."
        )
    left = next((c.left_torch for c in (few, many) if c.left_torch), None)
    if left is not None:
        return wrong(
            f"right values and gradients, but your function hands a whole tensor's values to Python or NumPy "
            f"(.{left}()) and adds them up there: sum() or math.fsum() over them is a loop over the samples that "
            "runs inside a builtin, and on a GPU the values are copied to the CPU first. Keep it in torch, on the "
            "whole tensor: weights.sum()."
        )
    return correct(
        f"same value and gradient as the loop for N = {', '.join(str(s) for s in sizes)}, with {large[0]} "
        f"graph nodes for any N (the loop needs {large[1]} for N = {large_n})."
    )


trust.record(__name__)  # last: every name above is defined (see .trust)
