"""Answer checks for notebook 05, accumulation pitfalls.

The experiment itself (one full-batch update against k accumulated micro-batches)
is written out in the notebook. This module holds only what the checks need: the
set-ups of exercise 1 with their verdicts (tests/notebooks/test_accumulation_pitfalls.py
measures every one of them, so a PyTorch release that changes one is caught),
and, for exercises 2 and 3, a reference run to compare the learner's code with.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.functional import mse_loss

from .answers import is_unanswered
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .loops import record_passes, wide_pass_mistake

__all__ = [
    "IN_FEATURES",
    "HIDDEN",
    "LAM",
    "MAX_NORM",
    "SETUPS",
    "VERDICTS",
    "check_accumulated_update",
    "check_normalized_model",
    "check_predictions",
    "full_batch_reference",
    "penalty",
]

IN_FEATURES, HIDDEN = 8, 16  # the notebook's model sizes
LAM, MAX_NORM = 0.05, 0.5  # exercise 2: L2 penalty strength, clipping threshold

# ---------------------------------------------------------------- exercise 1: predict the verdicts

VERDICTS = ("equivalent", "not equivalent", "only in distribution")

SETUPS = {
    "A": "AdamW; a model with LayerNorm; each micro-batch loss multiplied by its share len(xb) / len(x)",
    "B": "SGD; a model with BatchNorm1d in training mode; each micro-batch loss multiplied by its share",
    "C": "SGD; clip_grad_norm_ called right after every micro-batch's backward(), with a max_norm that even "
    "the first micro-batch's gradient exceeds (section 6's 0.2), so the clipping acts inside the loop",
    "D": "SGD; each micro-batch loss computed with reduction='sum', then divided by the full batch size N",
    "E": "Adam; a model with two Dropout layers; each micro-batch loss multiplied by its share",
    "F": "SGD(weight_decay=0.01) instead of a penalty in the loss; each micro-batch loss multiplied by its share",
}

# The verdict of each set-up at k = 4. Typed here as an answer key; the unit tests run every
# set-up and fail if a PyTorch release changes one.
ANSWERS = {
    "A": "equivalent",
    "B": "not equivalent",
    "C": "not equivalent",
    "D": "equivalent",
    "E": "only in distribution",
    "F": "equivalent",
}

_WHY = {
    "A": "LayerNorm normalizes each sample over its own features, so no sample sees another; "
    "AdamW reads the summed .grad once, in step().",
    "B": "BatchNorm normalizes with the statistics of the batch it is given: each micro-batch gets its own mean "
    "and variance, so every sample's output and gradient change (and the running statistics are updated k times).",
    "C": "clipping is not linear: clipping the partial sums along the way is not the same as clipping the "
    "finished gradient once. Clip once, after the loop, right before step(). (With a max_norm that no partial "
    "sum reaches, clipping never acts and the loop would be exact.)",
    "D": "sum over the micro-batch divided by N is the micro-batch mean times its share n_i / N: "
    "the k pieces add up to the full-batch mean, whatever the micro-batch sizes.",
    "E": "the dropout masks come from the random stream in another order (layer 1 and 2 alternate per micro-batch), "
    "so one seed gives other masks; the masks have the same distribution, so the average over seeds agrees.",
    "F": "weight decay in the optimizer acts once per step() on the parameters, not once per backward(): "
    "it does not care how .grad was accumulated.",
}


def _normalize_verdict(value):
    if not isinstance(value, str):
        return None
    text = " ".join(value.lower().replace("_", " ").replace("-", " ").split())
    aliases = {"not": "not equivalent", "in distribution": "only in distribution", "equal": "equivalent"}
    text = aliases.get(text, text)
    return text if text in VERDICTS else None


@never_raises
def check_predictions(answer) -> Feedback:
    """Exercise 1: a dict mapping each set-up letter in ``SETUPS`` to one of ``VERDICTS``."""
    form = 'a dict like {"A": "equivalent", "B": "not equivalent", ...} with one of ' + ", ".join(
        repr(v) for v in VERDICTS
    )
    if is_unanswered(answer):
        return unanswered(form)
    if not isinstance(answer, dict):
        return malformed(f"expected {form}; got {type(answer).__name__}.")
    keys = {str(k).strip().upper(): v for k, v in answer.items()}
    missing = [k for k in SETUPS if k not in keys]
    unknown = sorted(set(keys) - set(SETUPS))
    if unknown:
        return malformed(f"there is no set-up {', '.join(unknown)}; the set-ups are {', '.join(SETUPS)}.")
    if missing:
        return malformed(f"give a verdict for every set-up; missing: {', '.join(missing)}.")
    bad = [k for k in SETUPS if _normalize_verdict(keys[k]) is None]
    if bad:
        return malformed(
            f"the verdict for {', '.join(bad)} is not one of " + ", ".join(repr(v) for v in VERDICTS) + "."
        )
    wrong_keys = [k for k in SETUPS if _normalize_verdict(keys[k]) != ANSWERS[k]]
    if not wrong_keys:
        return correct(
            "all six. Accumulation is exact when nothing in the step looks across samples of a batch "
            "(BatchNorm does), nothing non-linear acts on the partial sums (clipping inside the loop), "
            "and every random draw happens in the same order."
        )
    lines = [f"- {k} is {ANSWERS[k]}: {_WHY[k]}" for k in wrong_keys]
    count = len(wrong_keys)
    return wrong(f"{count} of {len(SETUPS)} not yet right:\n" + "\n".join(lines))


# ---------------------------------------------------------------- a reference run for exercises 2 and 3


def penalty(model: nn.Module) -> torch.Tensor:
    """The L2 penalty of exercise 2: the sum of every parameter squared."""
    return sum((p**2).sum() for p in model.parameters())


def full_batch_reference(model, opt, x, y):
    """Exercise 2's full-batch update: loss with an L2 penalty, clipping, one step."""
    opt.zero_grad()
    loss = mse_loss(model(x), y) + LAM * penalty(model)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    opt.step()


def _mlp():
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def _largest_param_diff(model_a, model_b, start):
    with torch.no_grad():
        moved = max(float((p - s).abs().max()) for p, s in zip(model_b.parameters(), start))
        diff = max(float((a - b).abs().max()) for a, b in zip(model_a.parameters(), model_b.parameters()))
    return diff / moved


def _run(make_model, full, accumulated, k, *, n=24, updates=2, seed=0, make_opt=None):
    """Parameters of ``full`` against ``accumulated`` after ``updates`` updates: the largest relative difference."""
    make_opt = make_opt or (lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    gen = torch.Generator().manual_seed(seed)
    data = [(torch.randn(n, IN_FEATURES, generator=gen), torch.randn(n, 1, generator=gen)) for _ in range(updates)]
    torch.manual_seed(seed)
    model_f = make_model()
    model_a = copy.deepcopy(model_f)
    opt_f, opt_a = make_opt(model_f.parameters()), make_opt(model_a.parameters())
    start = [p.detach().clone() for p in model_f.parameters()]
    for x, y in data:
        torch.manual_seed(seed + 1)
        full(model_f, opt_f, x, y)
        torch.manual_seed(seed + 1)
        accumulated(model_a, opt_a, x, y, k)
    return _largest_param_diff(model_a, model_f, start)


# ---------------------------------------------------------------- exercise 2: write the accumulated update


def _micro(x, y, k):
    return zip(x.tensor_split(k), y.tensor_split(k))


def _variant(*, clip="after", pen="scaled", scale="share", step="once", zero=True):
    def update(model, opt, x, y, k):
        if zero:
            opt.zero_grad()
        for xb, yb in _micro(x, y, k):
            w = {"share": len(xb) / len(x), "k": 1 / k, "none": 1.0}[scale]
            loss = mse_loss(model(xb), yb) * w
            if pen == "scaled":
                loss = loss + LAM * penalty(model) * w
            elif pen == "every":
                loss = loss + LAM * penalty(model)
            loss.backward()
            if clip == "inside":
                nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            if step == "inside":
                opt.step()
        if clip == "after":
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        if step == "once":
            opt.step()

    return update


_DIAGNOSES = [
    (
        dict(clip="inside"),
        "you clip inside the loop, after each micro-batch's backward(). Clipping is not linear: clip the "
        "finished .grad once, after the loop, right before opt.step().",
    ),
    (
        dict(pen="every"),
        "the penalty goes into every micro-batch loss without the share, so it counts k times. "
        "Multiply the whole micro-batch loss (error + penalty) by its share.",
    ),
    (dict(pen="none"), "the L2 penalty LAM * penalty(model) is missing from your loss."),
    (dict(clip="none"), "you do not clip: call nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM) after the loop."),
    (
        dict(scale="none"),
        "the micro-batch losses are not scaled: .grad becomes the sum of k means, k times the full-batch mean. "
        "Multiply each micro-batch loss by its share len(xb) / len(x).",
    ),
    (
        dict(step="inside"),
        "you call opt.step() inside the loop: that is k small updates, not one. Step once, after the loop.",
    ),
    (
        dict(zero=False),
        "nothing clears .grad at the start of the update, so the previous update's gradient leaks into this one. "
        "Call opt.zero_grad() first.",
    ),
]


def _same(answer, variant, k, tol):
    """Does the learner's update land where a known variant (a known mistake) does?"""
    try:
        return _run(_mlp, lambda model, opt, x, y: variant(model, opt, x, y, k), answer, k) < tol
    except Exception:
        return False


def _observe(update, k, n=24):
    """Run ``update`` once on a fresh model: its forward and backward passes (a PassLog) and its step count."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    real_step = opt.step

    def step(*args, **kwargs):
        steps.append(1)
        return real_step(*args, **kwargs)

    opt.step = step
    with record_passes(model) as log:
        update(model, opt, torch.randn(n, IN_FEATURES), torch.randn(n, 1), k)
    return log, len(steps)


def _explain_passes(log, steps, k, n=24):
    """Mistakes visible in how the update uses the model, before any number is compared."""
    if log.forward_sizes and max(log.forward_sizes) == n:
        return wrong(
            f"your model saw a forward pass of all {n} samples; run k = {k} micro-batches of "
            "x.tensor_split(k) instead, one backward() each."
        )
    wide = wide_pass_mistake(f"With k = {k}", log)
    if wide is not None:
        return wide
    if steps == 0:
        return wrong("your function never calls opt.step(): the parameters do not move. Step once, after the loop.")
    return None


@never_raises
def check_accumulated_update(answer, *, tol: float = 1e-4) -> Feedback:
    """Exercise 2: ``answer(model, opt, x, y, k)`` must leave the parameters where ``full_batch_reference`` does.

    It is run with k = 2, 3 and 4 micro-batches of a 24-sample batch and with k = 5
    (micro-batches of 5, 5, 5, 5 and 4 samples), two updates each, SGD with momentum.
    A loop whose one backward() covers several micro-batches is refused even when its numbers match.
    """
    if is_unanswered(answer):
        return unanswered("your function (its name, without parentheses)")
    if not callable(answer):
        return malformed(f"expected a function taking (model, opt, x, y, k); got {type(answer).__name__}.")
    for k in (2, 3, 4, 5):
        try:
            log, steps = _observe(answer, k)
            diff = _run(_mlp, full_batch_reference, answer, k)
        except Exception as err:  # the learner's code: report it, never raise
            return wrong(f"with k = {k} your function raised {describe_error(err)}")
        fb = _explain_passes(log, steps, k)
        if fb is not None:
            return fb
        if diff < tol:
            continue
        if k == 5 and _same(answer, _variant(scale="k"), 5, tol):
            return wrong(
                "right for equal micro-batches, not for k = 5, where the 24 samples split 5, 5, 5, 5, 4: dividing "
                "by k (or not scaling at all) gives each sample of the small micro-batch more weight. Multiply each "
                "loss by its share len(xb) / len(x). (With equal micro-batches the clipping after the loop hid a "
                "wrong overall scale: it rescales .grad to MAX_NORM anyway.)"
            )
        for kwargs, hint in _DIAGNOSES:
            if _same(answer, _variant(**kwargs), k, tol):
                return wrong(hint)
        return wrong(
            f"with k = {k} your parameters end up {diff:.2g} (relative to the step) away from the full-batch "
            "update. Follow full_batch_reference: the same loss, scaled by each micro-batch's share, "
            "summed by backward(), clipped once, one step."
        )
    return correct(
        "your accumulated update lands where the full-batch update does, also for unequal micro-batches: "
        "penalty inside the scaled loss, clipping once after the loop, one step."
    )


# ---------------------------------------------------------------- exercise 3: a normalization layer that accumulates


_BATCH_NORMS = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)
_PROBE = 4  # samples in the probe batch the model is first run on
_SPREAD = 1e-4  # below this standard deviation a layer's output counts as constant


def _is_norm(module):
    """A normalization layer: torch's (LayerNorm, GroupNorm, RMSNorm, BatchNorm, ...) or a learner's own *Norm."""
    return "norm" in type(module).__name__.lower()


def _leaf_calls(model, x):
    """The leaf modules one forward pass calls, in order, with the tensor each got and gave, its output, and
    whether it drew from torch's (CPU) random stream: dropout, or anything random written by hand."""
    calls = []
    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(lambda mod, args, out: calls.append((mod, args[0] if args else None, out)))
               for m in leaves]
    state = torch.get_rng_state()
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    return calls, out, not torch.equal(state, torch.get_rng_state())


def _spread(t):
    """The smallest per-sample standard deviation of a (N, features) tensor; 0 for anything else."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] < 2:
        return 0.0
    return float(t.double().std(dim=1).min())


def _explain_structure(model, calls, out):
    """Does the model do what exercise 3 asks: Linear(8, 16), then a per-sample normalization that is not degenerate?"""
    if any(isinstance(m, _BATCH_NORMS) for m in model.modules()):
        return wrong(
            "your model has a BatchNorm layer: in training it normalizes each micro-batch with that micro-batch's "
            "own mean and variance, so k micro-batches never match the full batch. Pick a layer that normalizes "
            "each sample on its own."
        )
    norms = [(i, m, x, y) for i, (m, x, y) in enumerate(calls) if _is_norm(m)]
    if not norms:
        unused = [type(m).__name__ for m in model.modules() if _is_norm(m)]
        if unused:
            return wrong(f"your model holds a {unused[0]}, but its forward pass never calls it: a layer that is "
                         "defined but not used normalizes nothing. Put it between the first Linear and the Tanh.")
        return wrong(
            "there is no normalization layer in your model. Keep the normalization, but one that works on each "
            "sample's own features (nn.LayerNorm, or nn.GroupNorm)."
        )
    first_linear = next(((i, m) for i, (m, _, _) in enumerate(calls) if isinstance(m, nn.Linear)), None)
    if first_linear is None or (first_linear[1].in_features, first_linear[1].out_features) != (IN_FEATURES, HIDDEN):
        got = "no Linear layer" if first_linear is None else f"{first_linear[1]}"
        return wrong(f"the model should start with nn.Linear({IN_FEATURES}, {HIDDEN}), a hidden layer of {HIDDEN} "
                     f"units; its first layer is {got}.")
    after = [(m, x, y) for i, m, x, y in norms if i > first_linear[0]]
    if not after or tuple(getattr(after[0][1], "shape", ())) != (_PROBE, HIDDEN):
        return wrong(f"the normalization should act on the {HIDDEN} hidden units that the first Linear gives, "
                     f"right after it; yours {'comes before it' if not after else 'gets another shape'}.")
    norm, _, normed = after[0]
    if _spread(normed) < _SPREAD:
        return wrong(
            f"your {type(norm).__name__} turns every sample's {HIDDEN} hidden units into one constant (GroupNorm "
            "with one unit per group, or a normalization over a single value, normalizes each value by itself "
            "to 0): nothing of the input gets through. Normalize over all 16 units, or over groups of several."
        )
    if not isinstance(out, torch.Tensor) or float(out.double().std(dim=0).max()) < _SPREAD:
        return wrong("your model gives the same output for every sample: nothing of the input reaches the output.")
    return None


def _explain_random(calls, draws):
    """A model whose training-mode forward pass draws random numbers (dropout) matches only in distribution."""
    dropouts = [m for m, _, _ in calls if isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0]
    if not dropouts and not draws:
        return None
    if dropouts:
        lead = (f"your model has an active {type(dropouts[0]).__name__}(p={dropouts[0].p:g}) in training mode: "
                "its masks are random draws")
    else:
        lead = "your model's forward pass draws random numbers in training mode (dropout written by hand, or noise)"
    return wrong(
        f"{lead}, so k micro-batches are guaranteed to match the full batch only in distribution. An exact match "
        "on one seed (as with a single dropout layer on this CPU generator) is an accident of the draw order, "
        "which another device or PyTorch release may change. The exercise asks for an update that is equal by "
        "construction: leave dropout out (per-sample layers only)."
    )


@never_raises
def check_normalized_model(answer, *, tol: float = 1e-5) -> Feedback:
    """Exercise 3: ``answer()`` builds a model Linear(8, 16) -> a normalization -> ... -> 1 output whose
    accumulated update (k = 4, training mode) equals the full-batch update."""
    if is_unanswered(answer):
        return unanswered("your model-building function (its name, without parentheses)")
    if isinstance(answer, nn.Module):
        return malformed("you passed a model; pass the function that builds one, e.g. answer = make_model")
    if not callable(answer):
        return malformed(
            f"expected a function that takes no arguments and returns a model; got {type(answer).__name__}."
        )
    try:
        model = answer()
        if not isinstance(model, nn.Module):
            return malformed(f"your function should return an nn.Module; it returned {type(model).__name__}.")
        calls, out, draws = _leaf_calls(model.train(), torch.randn(_PROBE, IN_FEATURES))
    except Exception as err:
        return wrong(f"building your model or running it on {_PROBE} samples of {IN_FEATURES} features raised "
                     f"{describe_error(err)}")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (_PROBE, 1):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return wrong(f"the model should map (N, {IN_FEATURES}) to (N, 1); it gave {shape} for N = {_PROBE}.")
    fb = _explain_structure(model, calls, out)
    if fb is None:
        fb = _explain_random(calls, draws)
    if fb is not None:
        return fb

    def accumulated(model, opt, x, y, k):
        opt.zero_grad()
        for xb, yb in _micro(x, y, k):
            (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        opt.step()

    def full(model, opt, x, y):
        opt.zero_grad()
        mse_loss(model(x), y).backward()
        opt.step()

    def make_model():
        return answer().train()

    try:
        diff = _run(make_model, full, accumulated, 4)
    except Exception as err:
        return wrong(f"training your model raised {describe_error(err)}")
    if diff < tol:
        return correct(
            "with a per-sample normalization, k = 4 micro-batches give the full-batch update, "
            "up to rounding: no sample's output depends on the other samples in its micro-batch."
        )
    return wrong(
        f"accumulating still changes the update (parameter difference {diff:.2g} of the step). Does some layer "
        "mix samples, or draw random numbers (dropout)? Use only per-sample layers."
    )
