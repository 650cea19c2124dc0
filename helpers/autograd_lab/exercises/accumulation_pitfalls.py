"""Answer checks for notebook 05, accumulation pitfalls.

The experiment itself (one full-batch update against k accumulated micro-batches) is written out in the
notebook. This module holds only what the checks need: the set-ups of exercise 1 with their verdicts (set-ups
the notebook's map does not hold; tests/notebooks/test_accumulation_pitfalls.py measures every one of them, so
a PyTorch release that changes one is caught), and, for exercises 2 and 3, a reference run to compare the
learner's code with and the plausible mistakes as rows (:mod:`.diagnoses`): each a variant of the reference that
makes it, and the hint that names it. Exercise 2's reference, ``_variant``, is the notebook's accumulated_update
with the exercise's clipping; tests/exercises/test_accumulation_pitfalls_checks.py runs the notebook's own cells
beside it, so the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.functional import mse_loss

from . import trust
from .answers import close, equal, is_unanswered
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .isolation import kept_as_found
from .loops import record_passes, thrown_away_mistake, unwatched_mistake, wide_pass_mistake

__all__ = [
    "IN_FEATURES",
    "HIDDEN",
    "LAM",
    "MAX_VALUE",
    "SETUPS",
    "VERDICTS",
    "check_accumulated_update",
    "check_normalized_model",
    "check_predictions",
    "full_batch_reference",
    "penalty",
]

IN_FEATURES, HIDDEN = 8, 16  # the notebook's model sizes
LAM, MAX_VALUE = 0.05, 0.05  # exercise 2: penalty strength, the bound clip_grad_value_ clips each entry to

# ---------------------------------------------------------------- exercise 1: predict the verdicts

VERDICTS = ("equivalent", "not equivalent", "only in distribution")

SETUPS = {
    "A": "SGD; the loss is the largest error among the samples the model is given, (out - y).abs().max(), instead "
    "of the mean squared error",
    "B": "SGD; a mixing augmentation: each sample averaged with the one before it in its batch, "
    "x = 0.5 * (x + x.roll(1, dims=0)) and the same for y, applied to each micro-batch (the full batch: to the "
    "whole batch)",
    "C": "SGD; each update cuts its batch at random: idx = torch.randperm(48).tensor_split(4), and micro-batch j is "
    "x[idx[j]], y[idx[j]] (a new permutation every update)",
    "D": "SGD; the penalty lam * penalty(model) left out of the micro-batch losses and given a backward() of its own, "
    "once per update, after the micro-batch loop",
    "E": "AdamW; noise as augmentation, drawn in the loop for each micro-batch: xb + 0.1 * torch.randn_like(xb), then "
    "yb + 0.1 * torch.randn_like(yb) (the full batch: the same for the whole x, then the whole y)",
    "F": "SGD without momentum or weight decay, batches of 48 samples; the share forgotten, and the learning rate "
    "divided by k instead",
}

# The verdict of each set-up at k = 4. Typed here as an answer key; the notebook tests run every
# set-up and fail if a PyTorch release changes one.
ANSWERS = {
    "A": "not equivalent",
    "B": "not equivalent",
    "C": "equivalent",
    "D": "equivalent",
    "E": "only in distribution",
    "F": "equivalent",
}

_WHY = {
    "A": "the largest error is taken over the samples the model is given: the full batch's worst sample is one of "
    "48, each micro-batch's is one of 12, and the shares of four maxima are not the maximum. Like BatchNorm, the "
    "loss looks across the samples of a batch; a mean of per-sample losses does not.",
    "B": "x.roll(1, dims=0) pairs each sample with the one before it in the batch it is given: the first sample of "
    "every micro-batch is paired with the last of its own micro-batch, where the full batch pairs it with the "
    "sample before it: four of the 48 mixed samples differ, so the inputs themselves do. The augmentation looks "
    "across the samples of a batch.",
    "C": "which samples go into which micro-batch does not matter: each one's loss is computed on its own and enters "
    ".grad with its weight 1 / N whatever micro-batch holds it, so the sum over micro-batches is the full-batch "
    "gradient for any cut. The permutation is random; the step is not (up to float rounding).",
    "D": "the penalty's gradient enters .grad exactly once per update, as in the full batch: one backward() of "
    "its own adds it, whatever k is.",
    "E": "the noise is drawn in another order (x-noise and y-noise alternate per micro-batch), so one seed gives "
    "other noise; every draw has the same distribution, so the average over seeds agrees.",
    "F": "48 samples in k = 4 micro-batches of 12: equal micro-batches, so .grad is k times the full-batch gradient, "
    "and plain SGD's step is lr * .grad, so lr / k gives the same step. (With momentum alone it still would; weight "
    "decay, Adam or clipping would see the k. With unequal micro-batches, k = 5 of 10, 10, 10, 9, 9, it would not: "
    "without the share each sample is weighted by 1 / n_i, not 1 / N.)",
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
            f"all {len(SETUPS)}. Accumulation is exact when nothing looks across the samples of a batch (a maximum, "
            "a neighbour, a statistic over it), everything reaches .grad with the full batch's weight (however the "
            "batch is cut), nothing non-linear acts on the partial sums, and every random draw happens in the same "
            "order."
        )
    lines = [f"- {k} is {ANSWERS[k]}: {_WHY[k]}" for k in wrong_keys]
    count = len(wrong_keys)
    return wrong(f"{count} of {len(SETUPS)} not yet right:\n" + "\n".join(lines))


# ---------------------------------------------------------------- a reference run for exercises 2 and 3


def penalty(model: nn.Module) -> torch.Tensor:
    """The penalty of exercise 2: the sum of every parameter squared."""
    return sum((p**2).sum() for p in model.parameters())


def full_batch_reference(model, opt, x, y):
    """Exercise 2's full-batch update: a penalty in the loss, every entry of .grad clipped, one step."""
    opt.zero_grad()
    loss = mse_loss(model(x), y) + LAM * penalty(model)
    loss.backward()
    nn.utils.clip_grad_value_(model.parameters(), MAX_VALUE)
    opt.step()


def _mlp():
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def _largest_param_diff(model_a, model_b, start):
    with torch.no_grad():
        if not all(bool(torch.isfinite(a).all()) for a in model_a.parameters()):
            return math.inf
        moved = max(float((p - s).abs().max()) for p, s in zip(model_b.parameters(), start))
        diff = max(float((a - b).abs().max()) for a, b in zip(model_a.parameters(), model_b.parameters()))
    return diff / moved


def _run(make_model, full, accumulated, k, *, n=24, updates=2, seed=None, make_opt=None, watch=None):
    """Parameters of ``full`` against ``accumulated`` after ``updates`` updates: the largest relative difference
    (infinite when the accumulated run leaves a parameter NaN or infinite).

    The accumulated run (the learner's code in exercise 2) goes first, on copies of the data, each of its updates
    inside ``watch(model, opt)`` when given; the full-batch run starts only when it has returned, so no frame above
    the learner's code holds the reference. Data and models come from a seed drawn afresh unless one is given."""
    seed = trust.fresh_seed() if seed is None else seed
    make_opt = make_opt or (lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    model_a = _train(make_model, make_opt, lambda m, o, x, y: accumulated(m, o, x, y, k), n, updates, seed, watch)
    model_f = _train(make_model, make_opt, full, n, updates, seed)
    trust.seed_cpu(seed)
    start = [p.detach().clone() for p in copy.deepcopy(make_model()).parameters()]
    return _largest_param_diff(model_a, model_f, start)


def _train(make_model, make_opt, update, n, updates, seed, watch=None):
    """A model made after seeding the CPU generator with seed, after ``updates`` calls of ``update`` on batches from
    ``seed`` (each call on fresh copies, after seeding it with seed + 1, inside ``watch(model, opt)`` when
    given, the kernel kept as found). The parameters are read once the last call has returned."""
    gen = torch.Generator().manual_seed(seed)
    data = [(torch.randn(n, IN_FEATURES, generator=gen), torch.randn(n, 1, generator=gen)) for _ in range(updates)]
    trust.seed_cpu(seed)
    model = copy.deepcopy(make_model())  # the learner's own model object (exercise 3) stays untouched
    opt = make_opt(model.parameters())
    for x, y in data:
        trust.seed_cpu(seed + 1)
        with watch(model, opt) if watch is not None else contextlib.nullcontext(), kept_as_found():
            update(model, opt, x.clone(), y.clone())
    return model


class _GradTouches:
    """What an update does to ``.grad`` between the passes of its micro-batches: each parameter's ``.grad`` as one
    backward() left it, against what the next backward() finds there after a new forward pass of the model
    (``layer``, its last layer, through which every forward pass goes). Clipping inside the loop changes it in
    between; a loop that only accumulates leaves it alone, and clipping after the loop, before a penalty's own
    backward() (no forward pass), is not inside it. ``changes`` holds (left, found) pairs."""

    def __init__(self, params, layer=None):
        params = list(params)
        self.left, self.changes, self.handles, self.fresh = {}, [], [], set()
        self.backwards = {}  # parameter -> how many backward() calls added into its .grad
        for p in params:
            self.handles.append(p.register_hook(lambda grad, p=p: self._arriving(p)))
            self.handles.append(p.register_post_accumulate_grad_hook(self._accumulated))
        if layer is not None and params:
            self.handles.append(layer.register_forward_pre_hook(lambda *args: self.fresh.update(params)))

    def _accumulated(self, p):
        self.left[p] = p.grad.detach().clone()
        self.backwards[p] = self.backwards.get(p, 0) + 1
        self.fresh.discard(p)

    def _arriving(self, p):  # a new gradient for p, before it is added: .grad still holds what was there
        left, found = self.left.pop(p, None), p.grad
        if p in self.fresh and left is not None and found is not None and not equal(left, found):
            self.changes.append((left, found.detach().clone()))

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def kind(self) -> str | None:
        """"value" or "norm" when every change between two passes looks like clipping of that kind, else None."""
        if not self.changes:
            return None
        if all(_clamped(left, found) for left, found in self.changes):
            return "value"
        if all(_shrunk(left, found) for left, found in self.changes):
            return "norm"
        return None


def _clamped(left, found) -> bool:
    """``found`` is ``left`` with its entries clamped to a bound (the largest entry of ``found``), some of them cut."""
    bound = float(found.abs().max())
    return bound > 0 and equal(found, left.clamp(-bound, bound)) and bool((left.abs() > bound).any())


def _shrunk(left, found) -> bool:
    """``found`` is ``left`` multiplied by one factor between 0 and 1."""
    scale = float(found.norm() / left.norm()) if float(left.norm()) > 0 else 0.0
    return 0 < scale < 1 and float((found - scale * left).abs().max()) <= 1e-6 * (1 + float(left.abs().max()))


class _Watch:
    """Watches each update of a run: its passes (a ``PassLog``, on the model's last layer, through which every
    forward pass goes, so ``model.forward(x)`` is seen as ``model(x)`` is), how many times it stepped, and what
    happened to ``.grad`` between its passes (a ``_GradTouches``). ``hooks=False`` watches at the dispatcher only
    (``record_passes``): the runs whose parameters are judged carry no hook the learner's code could look for,
    and the dispatcher still sees a full batch."""

    def __init__(self, hooks: bool = True):
        self.hooks = hooks
        self.logs, self.steps, self.touches = [], [], []

    @contextlib.contextmanager
    def __call__(self, model, opt):
        steps = []
        handle = opt.register_step_post_hook(lambda *args: steps.append(1))
        touches = _GradTouches(model.parameters() if self.hooks else (), model[-1])
        try:
            with record_passes(model[-1], hooks=self.hooks) as log:
                yield
        finally:
            handle.remove()
            touches.remove()
        self.logs.append(log)
        self.steps.append(len(steps))
        self.touches.append(touches)

    def clipping_inside(self) -> str | None:
        """How the watched updates clipped ``.grad`` between passes ("value", "norm"), or None."""
        return next((kind for kind in (t.kind() for t in self.touches) if kind is not None), None)


# ---------------------------------------------------------------- exercise 2: write the accumulated update

_N = 24  # samples in each batch of exercise 2's runs: k = 5 splits them 5, 5, 5, 5, 4


def _micro(x, y, k):
    return zip(x.tensor_split(k), y.tensor_split(k))


def _clip(model, how, bound=MAX_VALUE):
    if how == "value":
        nn.utils.clip_grad_value_(model.parameters(), bound)
    elif how == "norm":
        nn.utils.clip_grad_norm_(model.parameters(), bound)


_DEMO_MAX_NORM = 0.2  # the bound notebook 05's comparison table clips at (max_norm=0.2), not the exercise's


def _variant(*, clip="after", how="value", pen="scaled", scale="share", step="once", zero=True, bound=MAX_VALUE):
    """Exercise 2's update written one way: right with the defaults, else one known mistake."""

    def update(model, opt, x, y, k):
        if zero:
            opt.zero_grad()
        for i, (xb, yb) in enumerate(_micro(x, y, k)):
            w = {"share": len(xb) / len(x), "k": 1 / k, "none": 1.0}[scale]
            loss = mse_loss(model(xb), yb) * w
            if pen == "scaled":
                loss = loss + LAM * penalty(model) * w
            elif pen == "every" or (pen == "once" and i == 0):
                loss = loss + LAM * penalty(model)
            loss.backward()
            if clip == "inside":
                _clip(model, how, bound)
            if step == "inside":
                opt.step()
        if pen in ("own", "own_k"):
            (LAM * penalty(model) / (k if pen == "own_k" else 1)).backward()
        if clip == "after":
            _clip(model, how, bound)
        if pen == "own_after_clip":
            (LAM * penalty(model)).backward()
        if step == "once":
            opt.step()

    return update


_CLIPPED_INSIDE = {
    "value": "you clip inside the loop: .grad is clamped between one backward() and the next. Clipping by value is "
    "not linear: clamping a partial sum is not clamping the finished .grad. Clip once, after the loop (after the "
    "penalty's own backward(), if it has one), right before opt.step().",
    "norm": "you clip the gradient's norm, inside the loop: .grad shrinks between one backward() and the next. The "
    "reference clips each entry by value, and once, after the loop (clipping either way is not linear, so it must "
    "see the finished .grad): nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE) right before opt.step().",
}

# Exercise 2's plausible mistakes, each a variant of the update that makes it, tried in this order: a narrower
# mistake before a broader one.
_DIAGNOSES = (
    Diagnosis("dividing by k", _variant(scale="k"),
              "right for equal micro-batches, not for k = 5, where the 24 samples split 5, 5, 5, 5, 4: dividing by k "
              "gives each sample of the small micro-batch more weight. Multiply each loss by its share "
              "len(xb) / len(x)."),
    Diagnosis("clipping inside the loop", _variant(clip="inside"), _CLIPPED_INSIDE["value"]),
    Diagnosis("clipping the norm inside the loop", _variant(clip="inside", how="norm"), _CLIPPED_INSIDE["norm"]),
    Diagnosis("clipping the norm", _variant(how="norm"),
              "you clip the gradient's norm; the reference clips each entry by value: "
              "nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE), after the loop."),
    Diagnosis("the demo's bound", _variant(bound=_DEMO_MAX_NORM),
              f"you clip at {_DEMO_MAX_NORM}, the max_norm of the notebook's comparison table; this exercise clips "
              f"each entry at ex.MAX_VALUE = {MAX_VALUE}: nn.utils.clip_grad_value_(model.parameters(), "
              "ex.MAX_VALUE)."),
    Diagnosis("the demo's clipping", _variant(how="norm", bound=_DEMO_MAX_NORM),
              f"you clip the gradient's norm at {_DEMO_MAX_NORM}, as the notebook's comparison table does; this "
              f"exercise clips each entry by value at ex.MAX_VALUE = {MAX_VALUE}: "
              "nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE), after the loop."),
    Diagnosis("the penalty in every micro-batch", _variant(pen="every"),
              "the penalty goes into every micro-batch loss without the share, so it counts k times. Multiply the "
              "whole micro-batch loss (error + penalty) by its share."),
    Diagnosis("no penalty", _variant(pen="none"), "the penalty LAM * penalty(model) is missing from your loss."),
    Diagnosis("the penalty after the clipping", _variant(pen="own_after_clip"),
              "the penalty's backward() comes after the clipping, so its gradient is never clipped; the full batch "
              "clips the gradient of error and penalty together. Call the penalty's backward() before "
              "clip_grad_value_."),
    Diagnosis("the penalty's own backward() over k", _variant(pen="own_k"),
              "the penalty's own backward() runs once per update, so it takes no share: the full penalty "
              "LAM * penalty(model), not divided by k."),
    Diagnosis("no clipping", _variant(clip="none"),
              "you do not clip: call nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE) after the loop."),
    Diagnosis("no share", _variant(scale="none"),
              "the micro-batch losses are not scaled: .grad becomes the sum of k means, k times the full-batch mean. "
              "Multiply each micro-batch loss by its share len(xb) / len(x)."),
    Diagnosis("no share, the penalty once", _variant(scale="none", pen="once"),
              "the penalty is there once, but the micro-batch losses are not scaled: their sum is k times the "
              "full-batch mean, so the data outweighs the penalty k-fold. Multiply each micro-batch loss by its "
              "share len(xb) / len(x)."),
    Diagnosis("a step per micro-batch", _variant(step="inside"),
              "you call opt.step() inside the loop: that is k small updates, not one. Step once, after the loop."),
    Diagnosis("no zero_grad()", _variant(zero=False),
              "nothing clears .grad at the start of the update, so the previous update's gradient leaks into this "
              "one. Call opt.zero_grad() first."),
)


def _same(answer, variant, k, tol):
    """Does the learner's update land where a known variant (a known mistake) does?"""
    try:
        return _run(_mlp, lambda model, opt, x, y: variant(model, opt, x, y, k), answer, k,
                    watch=_Watch(hooks=False)) < tol
    except Exception:
        return False


def _explain_split(sizes, k, n=_N, widest_use=0):
    """A loop that does not run k micro-batches of x.tensor_split(k): the hint naming how it splits, or None."""
    if len(sizes) != k and sizes == [n]:
        return wrong(f"your model saw one forward pass of all {n} samples; run k = {k} micro-batches of "
                     "x.tensor_split(k) instead, one backward() each.")
    if len(sizes) == 2 and k != 2:
        return wrong(f"with k = {k} your loop still cut the batch into two halves ({sizes[0]} and {sizes[1]} "
                     "samples): it does not use k. Cut it into k micro-batches: x.tensor_split(k).")
    if len(sizes) != k and max(sizes) == k:
        return wrong(f"with k = {k} your loop ran {len(sizes)} micro-batches of {k} samples: x.split(k) cuts pieces "
                     "of k samples; accumulating over k micro-batches wants k pieces, x.tensor_split(k).")
    widest = max(sizes + [widest_use])
    if widest > math.ceil(n / k):
        return wrong(f"with k = {k} your model ran on {widest} samples at once, more than the largest micro-batch "
                     f"of x.tensor_split(k) ({math.ceil(n / k)}): that is the full batch's memory, however many "
                     "other forward passes run beside it. Run k micro-batches, one forward and backward() each.")
    if len(sizes) == k:
        return None
    return wrong(f"with k = {k} your loop ran the model on {len(sizes)} micro-batches ({', '.join(map(str, sizes))} "
                 f"samples); it should run k = {k}, the pieces of x.tensor_split(k), one backward() each.")


def _explain_judged(log, k):
    """What the dispatcher saw of a judged run (no hooks on the model): a switched-off watcher or a full batch."""
    fb = unwatched_mistake(f"With k = {k}", log)
    if fb is None and log.widest_use > math.ceil(_N / k):
        fb = _explain_split([log.widest_use], k, widest_use=log.widest_use)
    return fb


def _explain_passes(log, steps, k):
    """Mistakes visible in how one update uses the model, before any number is compared."""
    fb = unwatched_mistake(f"With k = {k}", log)
    if fb is None and log.forward_sizes:
        fb = _explain_split(log.forward_sizes, k, widest_use=log.widest_use)
    if fb is not None:
        return fb
    wide = wide_pass_mistake(f"With k = {k}", log)
    if wide is not None:
        return wide
    if steps == 0:
        return wrong("your function never calls opt.step(): the parameters do not move. Step once, after the loop.")
    return None


def _explain_miss(answer, k, diff, tol):
    """The parameters missed: the first known mistake they land with, or how far they are."""
    hint = hint_for(_DIAGNOSES, lambda variant: _same(answer, variant, k, tol))
    return wrong(hint or f"with k = {k} your parameters end up {diff:.2g} (relative to the step) away from the "
                 "full-batch update. Follow full_batch_reference: the same loss, scaled by each micro-batch's share, "
                 "summed by backward(), clipped once, one step.")


@never_raises
def check_accumulated_update(answer, *, tol: float = 1e-4) -> Feedback:
    """Exercise 2: ``answer(model, opt, x, y, k)`` must leave the parameters where ``full_batch_reference`` does.

    It is run with k = 2, 3 and 4 micro-batches of a 24-sample batch and with k = 5
    (micro-batches of 5, 5, 5, 5 and 4 samples), two updates each, SGD with momentum. A loop that does not run
    k micro-batches, or whose one backward() covers several of them, is refused even when its numbers match.
    """
    if is_unanswered(answer):
        return unanswered("your function (its name, without parentheses)")
    if not callable(answer):
        return malformed(f"expected a function taking (model, opt, x, y, k); got {type(answer).__name__}.")
    for k in (2, 3, 4, 5):
        # one run watched with hooks, for the hints; the run whose parameters are judged is watched at the
        # dispatcher alone, so a loop that looks for hooks finds none there, and any full batch is still seen
        watch, judged = _Watch(), _Watch(hooks=False)
        try:
            _train(_mlp, lambda params: torch.optim.SGD(params, lr=0.1), lambda m, o, x, y, k=k: answer(m, o, x, y, k),
                   _N, 1, trust.fresh_seed(), watch)
            diff = _run(_mlp, full_batch_reference, answer, k, watch=judged)
        except Exception as err:  # the learner's code: report it, never raise
            return wrong(f"with k = {k} your function raised {describe_error(err)}")
        fb = next((f for f in map(_explain_passes, watch.logs, watch.steps, [k] * len(watch.logs)) if f is not None),
                  None)
        if fb is None:
            fb = next((f for f in (_explain_judged(log, k) for log in judged.logs) if f is not None), None)
        if fb is None and diff == math.inf:
            fb = wrong(f"with k = {k}, after your update some parameters are NaN or infinite: the update must leave "
                       "them where the full-batch update does, finite numbers.")
        if fb is None and diff >= tol:  # clipping between passes is named first, whatever else the loop does
            kind = watch.clipping_inside()
            fb = wrong(_CLIPPED_INSIDE[kind]) if kind is not None else _explain_miss(answer, k, diff, tol)
        if fb is None:
            fb = next((f for f in (thrown_away_mistake(f"With k = {k}", log) for log in watch.logs) if f is not None),
                      None)
        if fb is not None:
            return fb
    return correct(
        "your accumulated update lands where the full-batch update does, also for unequal micro-batches: the "
        "penalty's gradient reaches .grad once in total, clipping sees the finished sum, once after the loop, one "
        f"step. {_how_the_penalty_came(watch)}".strip()
    )


def _how_the_penalty_came(watch) -> str:
    """What the learner's last watched update did with the penalty, read from how many backward() calls added
    into .grad against how many forward passes it ran: one more backward() than passes is a penalty backward() of
    its own; as many is a penalty that came in with the micro-batches' losses; else nothing is claimed."""
    touches, log = watch.touches[-1], watch.logs[-1]
    backwards, passes = max(touches.backwards.values(), default=0), len(log.forward_sizes)
    if passes and backwards == passes + 1:
        return ("Your penalty has a backward() of its own, before the clipping: one pass over the parameters per "
                "update instead of k.")
    if passes and backwards == passes:
        return "Your penalty came in with the micro-batches' losses and counts once in all."
    return ""


# ---------------------------------------------------------------- exercise 3: a normalization that accumulates


_BATCH_NORMS = (nn.modules.batchnorm._BatchNorm,)  # SyncBatchNorm included
_BUILT_IN_NORMS = _BATCH_NORMS + (nn.modules.instancenorm._InstanceNorm, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm,
                                  nn.LocalResponseNorm)
# Samples in the probe batch the model is first run on. A normalization is told by most of them (_undoes_scaling),
# so that one sample whose spread is near eps does not decide.
_PROBE = 8
_SPREAD = 1e-4  # values that differ by less than this count as one value (a kernel's rounding of a constant)
_SCALE = 3.0  # the first Linear's output is multiplied by this: a normalization after it undoes that


def _probe():
    """The probe batch, drawn afresh for every check."""
    return torch.randn(_PROBE, IN_FEATURES, generator=trust.fresh_generator())


def _is_norm(module):
    """A module named like a normalization (LayerNorm, GroupNorm, RMSNorm, a learner's own *Norm): for hints only.
    Whether a model normalizes is judged by what it does (``_Seen.normalization``), not by names."""
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
        with torch.enable_grad():  # as in training: a model must not be able to tell a probe from a step
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    draws = not equal(state, torch.get_rng_state())
    torch.set_rng_state(state)
    return calls, out, draws


def _output(model, x):
    """The model's output for ``x``, computed as in training (gradients on, no hook on the model), detached; the
    random stream left where it was."""
    state = torch.get_rng_state()
    try:
        with torch.enable_grad():
            out = model(x)
        return out.detach() if isinstance(out, torch.Tensor) else out
    finally:
        torch.set_rng_state(state)


def _scaled_copy(model, linear):
    """A copy of the model whose ``linear`` gives ``_SCALE`` times its output (its weight and bias scaled): no hook
    tells the model it is being probed."""
    index = list(model.modules()).index(linear)
    twin = copy.deepcopy(model)
    scaled = list(twin.modules())[index]
    with torch.no_grad():
        for p in (scaled.weight, scaled.bias):
            if p is not None:
                p.mul_(_SCALE)
    return twin


def _undoes_scaling(model, linear, x, out) -> bool:
    """Does the model's output stay where it is, for most samples of the probe ``x``, when ``linear``'s output is
    ``_SCALE`` times larger? A normalization after ``linear`` undoes the scaling only where the spread it divides by
    is large beside its eps (var + eps): a sample whose normalized values, or a group of them, nearly coincide moves
    a little. A model that does not normalize there moves every sample's output."""
    scaled = _output(_scaled_copy(model, linear), x)
    if not isinstance(scaled, torch.Tensor) or scaled.shape != out.shape:
        return False
    kept = sum(close(mine, theirs, rtol=1e-3, atol=1e-3) for mine, theirs in zip(scaled, out.detach()))
    return 2 * kept > len(out)


def _depends_on_the_batch(model, x) -> bool:
    """Do the first two samples' outputs change when the model runs on them alone instead of in the batch ``x``?
    Beyond rounding only: another batch size can take another kernel, which sums each output's terms in another
    order, and an output near 0 (terms that cancel) cannot be held to its own size. So the differences are held to a
    share of the batch's largest output; a statistic over the batch moves the outputs by a share of their size."""
    whole, pair = _output(model, x), _output(model, x[:2])
    return not close(whole[:2], pair, rtol=1e-4, atol=1e-4 * float(whole.abs().max()))


def _same_for_every(t, dim) -> bool:
    """Does ``t`` hold one value along ``dim`` (up to ``_SPREAD``)?"""
    return close(t, t.mean(dim, keepdim=True).expand_as(t), atol=_SPREAD)


@dataclass(frozen=True)
class _Seen:
    """What exercise 3's check sees a model do on the probe batch, in the terms its mistakes differ in: the
    defaults are what the reference does, and a mistake departs from them."""

    constant: str = "no"  # "hidden": after the first Linear each sample is one value; "output": all samples are one
    normalization: str = "works"  # a scaling of the first Linear's output undone; else where a *Norm layer sits:
    #                               "before" the first Linear, "later" (undoing nothing), "unused", or "none"
    random: str = "no"  # "dropout": an active dropout layer; "draws": random numbers drawn otherwise
    mixes: str = "no"  # a sample's output moves with the others': through a "batchnorm", or a "batch" statistic


def _observe(model, x, calls, out, draws) -> tuple:
    """(``_Seen``, the facts its hints quote) for a model that ran on ``x`` as ``_leaf_calls`` saw it, its output
    of the shape exercise 3 asks and its first layer a Linear."""
    called = [m for m, _, _ in calls]
    first = next(i for i, m in enumerate(called) if isinstance(m, nn.Linear))
    after = calls[first + 1:first + 2]
    hidden = after[0][2] if after else None
    constant = ("hidden" if isinstance(hidden, torch.Tensor) and tuple(hidden.shape) == (_PROBE, HIDDEN)
                and _same_for_every(hidden.detach(), 1) else "output" if _same_for_every(out.detach(), 0) else "no")
    frozen = any(isinstance(m, _BATCH_NORMS) and not m.training for m in called[first + 1:])
    places = {"before": [m for m in called[:first] if _is_norm(m)],
              "later": [m for m in called[first + 1:] if _is_norm(m)],
              "unused": [m for m in model.modules() if _is_norm(m) and m not in called]}
    if frozen or _undoes_scaling(model, called[first], x, out):
        normalization = "works"
    else:
        normalization = next((place for place, found in places.items() if found), "none")
    dropouts = [m for m in called if isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0]
    random = "dropout" if dropouts else "draws" if draws else "no"
    mixes = "no"  # told by outputs only where nothing is random: a draw for more samples may differ for the first
    if random == "no" and _depends_on_the_batch(model, x):
        mixes = "batchnorm" if any(isinstance(m, _BATCH_NORMS) and m.training for m in model.modules()) else "batch"
    facts = {"after": type(after[0][0]).__name__ if after else "",
             "norm": next((type(found[0]).__name__ for found in places.values() if found), ""),
             "dropout": f"{type(dropouts[0]).__name__}(p={dropouts[0].p:g})" if dropouts else ""}
    return _Seen(constant, normalization, random, mixes), facts


class _Lambda(nn.Module):
    """A layer that applies ``fn`` and holds ``spare`` layers it never calls: a variant's forward of its own."""

    def __init__(self, fn, *spare):
        super().__init__()
        self.fn, self.spare = fn, nn.ModuleList(spare)

    def forward(self, h):
        return self.fn(h)


def _own_norm(dim=1):
    """A normalization written by hand, mean and spread taken over ``dim``: over 1, each sample's hidden units, as
    the reference does; over 0, the batch, as BatchNorm does."""
    return _Lambda(lambda h: (h - h.mean(dim, keepdim=True)) / (h.std(dim, keepdim=True) + 1e-5))


def _net(*layers):
    """Linear(8, 16), ``layers``, Linear(16, 1): the reference has ``_own_norm(), nn.Tanh()`` in between, and each
    variant below changes one thing of it."""
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), *layers, nn.Linear(HIDDEN, 1))


_ONLY_IN_DISTRIBUTION = (
    ", so k micro-batches are guaranteed to match the full batch only in distribution. An exact match on one seed "
    "(as with a single dropout layer on this CPU generator) is an accident of the draw order, which another device "
    "or PyTorch release may change. The exercise asks for an update that is equal by construction: leave dropout "
    "out (per-sample layers only)."
)

# Exercise 3's plausible mistakes, each a variant of the reference model (``_net(_own_norm(), nn.Tanh())``) that
# makes it; a model is told the first row whose variant departs from the reference as the model does (``_Seen``).
# The hints quote the model's own layers: ``after`` the first Linear, the misplaced ``norm``, the ``dropout``.
_MODEL_DIAGNOSES = (
    Diagnosis("a normalization of single values", lambda: _net(nn.GroupNorm(HIDDEN, HIDDEN), nn.Tanh()),
              lambda after, **_: f"your {after} turns every sample's {HIDDEN} hidden units into one constant "
              "(GroupNorm with one unit per group, or a normalization over a single value, normalizes each value "
              f"by itself to 0): nothing of the input gets through. Normalize over all {HIDDEN} units, or over "
              "groups of several."),
    Diagnosis("the output normalized", lambda: nn.Sequential(*_net(_own_norm(), nn.Tanh()), nn.LayerNorm(1)),
              "your model gives the same output for every sample: nothing of the input reaches the output."),
    Diagnosis("the inputs normalized", lambda: nn.Sequential(nn.LayerNorm(IN_FEATURES), *_net(nn.Tanh())),
              lambda norm, **_: f"your {norm} comes before the first Linear: it normalizes the inputs, and nothing "
              f"normalizes the {HIDDEN} hidden units. Normalize them, right after the first Linear."),
    Diagnosis("a normalization after the Tanh", lambda: _net(nn.Tanh(), nn.LayerNorm(HIDDEN)),
              lambda norm, **_: f"your {norm} does not undo a scaling of the first Linear's output (multiply it by "
              f"{_SCALE:g} and the model's output changes): put the normalization right after the first Linear, "
              "before the Tanh."),
    Diagnosis("a normalization never called", lambda: _Lambda(_net(nn.Tanh()), nn.LayerNorm(HIDDEN)),
              lambda norm, **_: f"your model holds a {norm}, but its forward pass never calls it: a layer that is "
              "defined but not used normalizes nothing. Put it between the first Linear and the Tanh."),
    Diagnosis("no normalization", lambda: _net(nn.Tanh()),
              f"nothing in your model normalizes the first Linear's {HIDDEN} outputs: multiply them by {_SCALE:g} and "
              "the model's output changes, which a normalization would undo. Bring each sample's hidden units to "
              "mean 0 and standard deviation 1 (over dim=1) between the first Linear and the Tanh."),
    Diagnosis("dropout", lambda: _net(_own_norm(), nn.Tanh(), nn.Dropout(0.5)),
              lambda dropout, **_: f"your model has an active {dropout} in training mode: its masks are random "
              "draws" + _ONLY_IN_DISTRIBUTION),
    Diagnosis("dropout written by hand",
              lambda: _net(_own_norm(), nn.Tanh(), _Lambda(lambda h: h * (torch.rand_like(h) < 0.5) * 2)),
              "your model's forward pass draws random numbers in training mode (dropout written by hand, or noise)"
              + _ONLY_IN_DISTRIBUTION),
    Diagnosis("BatchNorm in training mode", lambda: _net(nn.BatchNorm1d(HIDDEN), nn.Tanh()),
              "your model has a BatchNorm layer in training mode: it normalizes each micro-batch with that "
              "micro-batch's own mean and variance, so k micro-batches do not give the full-batch step. Normalize "
              "each sample over its own hidden units, or freeze the BatchNorm with .eval() so that it uses stored "
              "statistics."),
    Diagnosis("statistics over the batch", lambda: _net(_own_norm(dim=0), nn.Tanh()),
              "a sample's output changes with the other samples in its batch: your normalization takes its "
              "statistics over the batch (a mean or std over dim=0). Take them over each sample's own hidden units "
              "(dim=1)."),
)


def _departs_as(seen, variant, x) -> bool:
    """Does the model ``seen`` depart from the reference as the model ``variant()`` does, on the same probe?"""
    model = variant()
    reference, theirs = asdict(_Seen()), asdict(_observe(model, x, *_leaf_calls(model, x))[0])
    departures = {name: value for name, value in theirs.items() if value != reference[name]}
    return bool(departures) and departures.items() <= asdict(seen).items()


_NORM_FUNCTIONS = ("layer_norm", "group_norm", "rms_norm", "batch_norm", "instance_norm", "local_response_norm")


class _NormFunctions(torch.overrides.TorchFunctionMode):
    """Notes torch's normalization functions a forward pass calls (``F.layer_norm``, ``torch.group_norm``, ...):
    the ones torch's nn.*Norm layers call, and that a forward can call directly."""

    def __init__(self):
        super().__init__()
        self.called = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _NORM_FUNCTIONS and name not in self.called:
            self.called.append(name)
        return func(*args, **(kwargs or {}))


def _built_in_norm(model):
    """torch's own normalization in the model's forward pass: "nn.LayerNorm" (a layer, BatchNorm frozen in eval()
    included), "F.layer_norm" (a function called in a forward), or None: it normalizes with tensor operations."""
    calls, _, _ = _leaf_calls(model, _probe())
    layer = next((m for m, _, _ in calls if isinstance(m, _BUILT_IN_NORMS)), None)
    if layer is not None:
        frozen = " frozen in eval()" if isinstance(layer, _BATCH_NORMS) and not layer.training else ""
        return f"nn.{type(layer).__name__}{frozen}"
    functions, state = _NormFunctions(), torch.get_rng_state()
    try:
        with torch.enable_grad(), functions:
            model(_probe())
    finally:
        torch.set_rng_state(state)
    return f"F.{functions.called[0]}" if functions.called else None


def _explain_model(model, x):
    """Every mistake exercise 3's check can see before training the model both ways, or None: the form the
    exercise asks for, then the first row whose variant departs from the reference as the model does."""
    calls, out, draws = _leaf_calls(model, x)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (_PROBE, 1):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return wrong(f"the model should map (N, {IN_FEATURES}) to (N, 1); it gave {shape} for N = {_PROBE}.")
    first = next((m for m, _, _ in calls if isinstance(m, nn.Linear)), None)
    if first is None or (first.in_features, first.out_features) != (IN_FEATURES, HIDDEN):
        got = "no Linear layer" if first is None else f"{first}"
        return wrong(f"the model should start with nn.Linear({IN_FEATURES}, {HIDDEN}), a hidden layer of {HIDDEN} "
                     f"units; its first layer is {got}.")
    seen, facts = _observe(model, x, calls, out, draws)
    hint = hint_for(_MODEL_DIAGNOSES, lambda variant: _departs_as(seen, variant, x), **facts)
    return None if hint is None else wrong(hint)


@never_raises
def check_normalized_model(answer, *, tol: float = 1e-5) -> Feedback:
    """Exercise 3: ``answer()`` builds a model Linear(8, 16) -> a normalization -> ... -> 1 output whose
    accumulated update (k = 4, the model as ``answer`` returns it) equals the full-batch update.

    A normalization is recognised by what it does: scaling the first Linear's output leaves the model's output
    unchanged (one written by hand in ``forward``; torch's LayerNorm, GroupNorm and RMSNorm do too), or it is a
    BatchNorm frozen in eval mode, which normalizes with stored statistics. The exercise asks for the
    normalization written by hand, as its prompt says: a model that accumulates exactly through torch's own
    normalization (an nn.*Norm layer, a frozen BatchNorm included, or an F.*_norm function such as F.layer_norm)
    is refused with a hint saying so."""
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
        fb = _explain_model(model, _probe())
    except Exception as err:
        return wrong(f"building your model or running it on {_PROBE} samples of {IN_FEATURES} features raised "
                     f"{describe_error(err)}")
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

    try:
        diff = _run(answer, full, accumulated, 4)
    except Exception as err:
        return wrong(f"training your model raised {describe_error(err)}")
    library = _built_in_norm(model) if diff < tol else None
    if library is not None:
        return wrong(
            f"your model accumulates exactly, but its normalization is torch's own {library}: torch's "
            "normalizations are the fixes the notebook already named. This exercise asks you to write it yourself: "
            f"tensor operations in a forward of your own (such as a mean and a spread of the {HIDDEN} hidden units, "
            "over the right dimension), no nn.*Norm layer and no F.*_norm function."
        )
    if diff < tol:
        return correct(
            "k = 4 micro-batches give the full-batch update, up to rounding: no sample's output depends on the "
            "other samples in its micro-batch, and nothing is random."
        )
    return wrong(
        f"accumulating still changes the update (parameter difference {diff:.2g} of the step). Does some layer "
        "mix samples, or draw random numbers (dropout)? Use only per-sample layers."
    )


trust.record(__name__)  # last: every name above is defined (see .trust)
