"""Instruments for gradient accumulation: a checker for your own model, and a timeline.

The accumulation loops themselves are written out in notebook 04; this module
only checks and draws.

``check_accumulation(model, loss_fn, inputs, targets, k)`` answers one question
about *your* model and loss: does accumulating over ``k`` micro-batches give the
gradient (and, with ``optimizer=``, the optimizer step) of the full batch? It
works on deep copies, so your model, its ``.grad`` and the global random state
are left as they were. When the two disagree it re-runs variants (other loss
scalings, BatchNorm or dropout switched to eval mode) to name the likely cause::

    report = check_accumulation(model, nn.MSELoss(), x, y, k=4)
    print(report)          # a short text report
    report.agree           # True when both steps match (also: bool(report))
    report.max_diff        # largest |accumulated - full| over all gradient entries
    report.causes          # likely causes, most likely first (empty when they agree)

How each micro-batch loss is scaled before ``backward()`` is ``scale``:
``"size"`` multiplies it by n_i / N (right for a mean-reduced loss, whatever the
split), ``"k"`` divides it by k (the common recipe, right only for equal
micro-batches), ``"none"`` leaves it alone (right only for a loss that already
divides by the full batch's count, e.g. ``reduction="sum"`` then ``/ N``).

``timeline_text(groups, n)`` and ``draw_timeline(groups, n)`` show which
micro-batches fed each optimizer step of an accumulation loop and which were
left behind in ``.grad``.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["AccumulationReport", "check_accumulation", "draw_timeline", "timeline_text", "SCALES"]

SCALES = ("size", "k", "none")
_SCALE_WORDS = {"size": "multiplied by n_i / N", "k": "divided by k", "none": "not scaled"}

# Module families whose training-mode forward pass mixes or randomises samples.
_FAMILIES = {
    "BatchNorm": (nn.modules.batchnorm._BatchNorm,),
    "dropout": (nn.modules.dropout._DropoutNd,),
}


# --------------------------------------------------------------------------- the report


def _fmt(x: float) -> str:
    return f"{x:.3g}"


@dataclass
class AccumulationReport:
    """What ``check_accumulation`` found. ``bool(report)`` is ``report.agree``."""

    agree: bool
    k: int
    sizes: tuple
    scale: str
    max_diff: float  # largest |accumulated - full| over all gradient entries
    worst: str  # the parameter where it occurs
    rel_diff: float  # ||accumulated - full|| / ||full|| over all gradients
    grads_agree: bool
    causes: list = field(default_factory=list)
    buffers_differ: list = field(default_factory=list)  # buffers (e.g. BatchNorm running stats) that differ
    optimizer: str | None = None
    params_agree: bool | None = None  # after one optimizer step; None without optimizer=
    params_max_diff: float | None = None
    grads_full: dict = field(default_factory=dict, repr=False)
    grads_accumulated: dict = field(default_factory=dict, repr=False)

    def __bool__(self):
        return self.agree

    def __str__(self):
        sizes = ", ".join(map(str, self.sizes))
        lines = [
            f"Accumulation check: k = {self.k} micro-batches of sizes ({sizes}), "
            f"each micro-batch loss {_SCALE_WORDS[self.scale]}"
        ]
        if self.grads_agree:
            lines.append("  gradients:  AGREE with the full batch (differences within float rounding)")
        else:
            lines.append(
                f"  gradients:  DIFFER -- largest difference {_fmt(self.max_diff)} in '{self.worst}' "
                f"(relative difference {_fmt(self.rel_diff)})"
            )
        if self.buffers_differ:
            lines.append(f"  buffers:    DIFFER -- {', '.join(self.buffers_differ)}")
        if self.optimizer is not None:
            if self.params_agree:
                lines.append(f"  after one {self.optimizer} step: parameters AGREE")
            else:
                lines.append(
                    f"  after one {self.optimizer} step: parameters DIFFER by up to {_fmt(self.params_max_diff)}"
                )
        for i, cause in enumerate(self.causes):
            lines.append(("  likely cause: " if i == 0 else "  and:          ") + cause)
        lines.append("  verdict:    " + ("the accumulated step IS the full-batch step" if self.agree
                                        else "the accumulated step is NOT the full-batch step"))
        return "\n".join(lines)

    __repr__ = __str__


# --------------------------------------------------------------------------- checking inputs


def _check_inputs(model, loss_fn, inputs, targets, k, sizes, scale):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model(inputs), targets), got {type(loss_fn).__name__}.")
    for name, t in (("inputs", inputs), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor holding the whole batch, got {type(t).__name__}.")
        if t.dim() == 0:
            raise ValueError(f"{name} is a 0-dimensional tensor; its first dimension must be the batch.")
    n = inputs.shape[0]
    if targets.shape[0] != n:
        raise ValueError(f"inputs hold {n} samples but targets hold {targets.shape[0]}; they must match.")
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k (the number of micro-batches) must be an int, got {type(k).__name__}.")
    if k < 1:
        raise ValueError(f"k = {k}: the number of micro-batches must be at least 1.")
    if k > n:
        raise ValueError(f"k = {k} micro-batches need at least {k} samples, but the batch holds {n}.")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(repr(s) for s in SCALES)}; got {scale!r}.")
    if sizes is None:
        sizes = tuple(len(chunk) for chunk in torch.arange(n).tensor_split(k))
    else:
        try:
            sizes = tuple(int(s) for s in sizes)
        except (TypeError, ValueError):
            raise TypeError(f"sizes must be a sequence of {k} ints (samples per micro-batch), got {sizes!r}.") from None
        if len(sizes) != k or any(s < 1 for s in sizes) or sum(sizes) != n:
            raise ValueError(
                f"sizes {sizes} must be {k} positive ints adding up to the batch size {n}."
            )
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no parameter that requires grad: there is no gradient to compare.")
    return sizes


def _scalar_loss(loss):
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"loss_fn must return a tensor, got {type(loss).__name__}.")
    if loss.numel() != 1:
        raise ValueError(
            f"loss_fn returned a tensor of shape {tuple(loss.shape)}, not a scalar: reduce it first "
            "(e.g. reduction='mean' or .mean()), since backward() needs one number."
        )
    if not loss.requires_grad:
        raise ValueError("the loss does not depend on any parameter that requires grad (it has no grad_fn).")
    return loss.reshape(())


# --------------------------------------------------------------------------- running both steps


def _devices(model, inputs):
    devs = {t.device for t in itertools.chain(model.parameters(), model.buffers(), [inputs])}
    return [d.index if d.index is not None else torch.cuda.current_device() for d in devs if d.type == "cuda"]


def _weights(scale, sizes):
    n = sum(sizes)
    return [s / n if scale == "size" else 1 / len(sizes) if scale == "k" else 1.0 for s in sizes]


def _run(model, loss_fn, inputs, targets, sizes, weights, eval_families, make_optimizer, seed, devices):
    """Backward every micro-batch of ``sizes`` with its weight on a copy of ``model``.

    Returns (gradients, buffers, parameters after one optimizer step or None, optimizer name or None).
    """
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.grad = None
    for fam in eval_families:
        for mod in m.modules():
            if isinstance(mod, _FAMILIES[fam]):
                mod.eval()
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for x, y, w in zip(inputs.split(list(sizes)), targets.split(list(sizes)), weights):
            loss = _scalar_loss(loss_fn(m(x), y))
            (loss * w).backward()
    names = [name for name, p in m.named_parameters() if p.requires_grad]
    params = dict(m.named_parameters())
    grads = {n: (params[n].grad.detach().clone() if params[n].grad is not None else torch.zeros_like(params[n]))
             for n in names}
    buffers = {n: b.detach().clone() for n, b in m.named_buffers()}
    stepped = opt_name = None
    if make_optimizer is not None:
        opt = make_optimizer([params[n] for n in names])
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"optimizer(params) must return a torch.optim.Optimizer, got {type(opt).__name__}.")
        opt.step()
        stepped = {n: params[n].detach().clone() for n in names}
        opt_name = type(opt).__name__
    return grads, buffers, stepped, opt_name


def _close(a, b, atol, rtol):
    return all(torch.allclose(a[n].float(), b[n].float(), atol=atol, rtol=rtol) for n in a)


def _buffers_differ(a, b, atol, rtol):
    out = []
    for n in a:
        x, y = a[n], b[n]
        if x.is_floating_point():
            same = torch.allclose(x, y, atol=atol, rtol=rtol)
        else:
            same = torch.equal(x, y)
        if not same:
            out.append(f"{n} (full batch {y.item()}, accumulated {x.item()})"
                       if x.numel() == 1 and not x.is_floating_point() else n)
    return out


def _flat(grads):
    return torch.cat([g.detach().float().reshape(-1).cpu() for g in grads.values()])


def _scale_cause(scale, fixed_by, sizes, ratio):
    k = len(sizes)
    equal = len(set(sizes)) == 1
    if scale == "none":
        return (
            f"missing /k scaling: each micro-batch loss went into backward() unscaled, so the k = {k} gradients "
            f"add up to about {_fmt(ratio)} times the full-batch gradient; divide each loss by k"
            + ("" if equal else " (or, as the micro-batches differ in size, multiply it by n_i / N)")
        )
    if scale == "k" and fixed_by == "size" and not equal:
        return (
            f"unequal micro-batches: dividing each micro-batch mean by k gives the samples of a small micro-batch "
            f"more weight than those of a large one (sizes {', '.join(map(str, sizes))}); multiply each "
            "micro-batch loss by n_i / N instead, or sum-reduce and divide by N"
        )
    if fixed_by == "none":
        return (
            "the loss is a sum over samples (reduction='sum'), or already divided by the whole batch's count: "
            f"it needs no scaling, and scaling it again makes the gradient about {_fmt(ratio)} times the "
            "full-batch one; use scale='none'"
        )
    return f"loss scaling: scale={fixed_by!r} instead of {scale!r} makes the micro-batch gradients add up right"


_FAMILY_CAUSE = {
    "BatchNorm": (
        "BatchNorm (batch statistics): in training mode each micro-batch is normalised with its own mean and "
        "variance, not the full batch's, and the running statistics are updated once per micro-batch"
    ),
    "dropout": (
        "dropout: the random masks drawn for the micro-batches are not the ones drawn for the full batch "
        "(the random numbers are consumed in another order)"
    ),
}


def check_accumulation(
    model: nn.Module,
    loss_fn,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    k: int,
    *,
    sizes=None,
    scale: str = "size",
    optimizer=None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
) -> AccumulationReport:
    """Compare one full-batch step with one step accumulated over ``k`` micro-batches.

    model, loss_fn: yours; the loss is ``loss_fn(model(x), y)`` and must be a scalar.
    inputs, targets: the whole batch (first dimension = samples).
    k: the number of micro-batches; by default the batch is cut into k nearly equal
        consecutive parts (``sizes=`` sets the parts, e.g. ``sizes=(7, 3)`` with k = 2).
    scale: how each micro-batch loss is scaled before ``backward()``: "size" (times n_i / N),
        "k" (divided by k) or "none".
    optimizer: optionally a factory such as ``lambda params: torch.optim.Adam(params, lr=1e-3)``;
        then one step is taken from the same state on both sides and the parameters compared too.
    atol, rtol: how close counts as equal (``torch.allclose``).
    seed: both runs start from this random seed (dropout then draws reproducibly); your
        global random state is restored afterwards.

    Works on deep copies: your model and its ``.grad`` are not touched. Raises TypeError or
    ValueError for bad input (k < 1, k larger than the batch, a loss that is not a scalar, ...).
    """
    sizes = _check_inputs(model, loss_fn, inputs, targets, k, sizes, scale)
    if optimizer is not None and not callable(optimizer):
        raise TypeError("optimizer must be a factory taking the parameters, e.g. lambda p: torch.optim.SGD(p, lr=0.1).")
    devices = _devices(model, inputs)
    n = inputs.shape[0]

    def run(split, weights, families=()):
        return _run(model, loss_fn, inputs, targets, split, weights, families, optimizer, seed, devices)

    def compare(families=(), scale_=scale):
        full = run((n,), [1.0], families)
        acc = run(sizes, _weights(scale_, sizes), families)
        return full, acc

    full, acc = compare()
    (g_full, b_full, p_full, opt_name), (g_acc, b_acc, p_acc, _) = full, acc
    grads_agree = _close(g_acc, g_full, atol, rtol)
    buffers_differ = _buffers_differ(b_acc, b_full, atol, rtol)
    params_agree = params_max = None
    if optimizer is not None:
        params_agree = _close(p_acc, p_full, atol, rtol)
        params_max = max(float((p_acc[n_] - p_full[n_]).abs().max()) for n_ in p_full)
    diffs = {name: float((g_acc[name].float() - g_full[name].float()).abs().max()) for name in g_full}
    worst = max(diffs, key=diffs.get)
    fa, ff = _flat(g_acc), _flat(g_full)
    denom = float(ff.norm())
    rel = float((fa - ff).norm()) / denom if denom > 0 else float("inf") if float(fa.norm()) > 0 else 0.0
    ratio = float(fa @ ff) / float(ff @ ff) if denom > 0 else float("nan")
    agree = grads_agree and not buffers_differ and params_agree is not False

    causes = []
    if not agree:
        causes = _diagnose(model, sizes, scale, compare, atol, rtol, ratio, grads_agree, buffers_differ)
    return AccumulationReport(
        agree=agree, k=k, sizes=sizes, scale=scale, max_diff=diffs[worst], worst=worst, rel_diff=rel,
        grads_agree=grads_agree, causes=causes, buffers_differ=buffers_differ, optimizer=opt_name,
        params_agree=params_agree, params_max_diff=params_max, grads_full=g_full, grads_accumulated=g_acc,
    )


def _diagnose(model, sizes, scale, compare, atol, rtol, ratio, grads_agree, buffers_differ):
    """Find the smallest change (loss scaling, families in eval mode) that makes both sides agree."""
    present = [fam for fam, types in _FAMILIES.items()
               if any(isinstance(m, types) and m.training for m in model.modules())]
    scales = [scale] + [s for s in SCALES if s != scale]
    if grads_agree:  # only buffers or the optimizer step differ: scaling is not the question
        scales = [scale]
    for r in range(len(present) + 1):
        for families in itertools.combinations(present, r):
            for s in scales:
                if not families and s == scale:
                    continue
                (g_full, b_full, p_full, _), (g_acc, b_acc, p_acc, _) = compare(families, s)
                ok = _close(g_acc, g_full, atol, rtol) and not _buffers_differ(b_acc, b_full, atol, rtol)
                if p_full is not None:
                    ok = ok and _close(p_acc, p_full, atol, rtol)
                if ok:
                    causes = [_FAMILY_CAUSE[f] for f in families]
                    if s != scale:
                        causes.append(_scale_cause(scale, s, sizes, ratio))
                    return causes
    if grads_agree and not buffers_differ:
        return [
            "the optimizer: the summed gradient is right, but the step differs (an optimizer whose step depends "
            "on more than the gradient at that moment, or on its own state)"
        ]
    causes = [_FAMILY_CAUSE[f] for f in present]
    causes.append(
        "something in the model or loss mixes the samples of a batch (a loss normalised by a batch statistic, "
        "a contrastive loss, a module that keeps state) or is random in a way this check cannot switch off"
    )
    return causes


# --------------------------------------------------------------------------- the timeline


def _check_groups(groups, n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be the number of micro-batches (an int >= 1), got {n!r}.")
    try:
        groups = [[int(i) for i in g] for g in groups]
    except TypeError:
        raise TypeError("groups must be a list of lists of micro-batch indices, one list per optimizer step.") from None
    seen = set()
    for g in groups:
        for i in g:
            if not 0 <= i < n:
                raise ValueError(f"micro-batch index {i} is outside 0..{n - 1}.")
            if i in seen:
                raise ValueError(f"micro-batch {i} appears in two updates; each belongs to one update.")
            seen.add(i)
    return groups, [i for i in range(n) if i not in seen]


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def timeline_text(groups, n: int) -> str:
    """One character per micro-batch: the letter of the update it fed (A, B, ...), '.' when left in ``.grad``.

    ``groups`` lists, for each optimizer step in order, the micro-batch indices whose
    gradient it used. A second line marks with '^' the micro-batch after which each step ran.
    """
    groups, _ = _check_groups(groups, n)
    row = ["."] * n
    marks = [" "] * n
    for u, g in enumerate(groups):
        for i in g:
            row[i] = _LETTERS[u % len(_LETTERS)]
        if g:
            marks[max(g)] = "^"
    return "".join(row) + "\n" + "".join(marks).rstrip()


def draw_timeline(groups, n: int, *, title: str | None = None, ax=None):
    """Draw which micro-batches fed each optimizer step, and which were left in ``.grad``.

    One box per micro-batch, coloured by the update it fed (numbered 1, 2, ... above
    the group); a triangle marks each ``optimizer.step()``; hatched red boxes were never
    stepped. Returns the matplotlib Figure (closed, so a notebook shows it once, as the
    cell's result). Drawn with a few collection calls, so a widget redraws it quickly.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    groups, left = _check_groups(groups, n)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 1.9), dpi=80)
        fig.subplots_adjust(left=0.02, right=0.74, bottom=0.3, top=0.8)
    else:
        fig = ax.figure
    colours = plt.get_cmap("tab10")
    xs = [i for g in groups for i in g]
    cs = [colours(u % 10) for u, g in enumerate(groups) for _ in g]
    if xs:
        ax.bar(xs, 1, width=0.9, align="edge", color=cs, alpha=0.85)
    ends = [max(g) for g in groups if g]
    ax.plot([e + 0.45 for e in ends], [1.2] * len(ends), "v", color="black", markersize=7)
    if len(groups) <= 12:
        for u, g in enumerate(groups):
            if g:
                ax.text((min(g) + max(g) + 0.9) / 2, 0.5, str(u + 1), ha="center", va="center", fontsize=11,
                        color="black", fontweight="bold")
    if left:
        ax.bar(left, 1, width=0.9, align="edge", facecolor="white", edgecolor="#b02a37", hatch="///")
    handles = [Line2D([], [], marker="v", color="black", linestyle="none", label="optimizer.step()")]
    if left:
        handles.append(Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="#b02a37", hatch="///",
                                 label="left in .grad"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.05), fontsize=9, frameon=False)
    ax.set_xlim(-0.3, n + 0.2)
    ax.set_ylim(-0.05, 1.45)
    ax.set_yticks([])
    step = 1 if n <= 15 else 5 if n <= 60 else 10
    ax.set_xticks([i + 0.45 for i in range(0, n, step)], [str(i) for i in range(0, n, step)])
    ax.set_xlabel("micro-batch index i (colour and number: the update it fed)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if title is None:
        title = f"{len(groups)} optimizer step{'s' * (len(groups) != 1)}; {len(left)} micro-batch" \
                f"{'es' * (len(left) != 1)} left in .grad"
    ax.set_title(title, fontsize=10, loc="left")
    if own:
        plt.close(fig)
    return fig
