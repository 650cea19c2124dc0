"""Notebook 05 (accumulation pitfalls): every row of its map, every rule it states with the second case that
bounds it (clipping inside the loop), the picture of BatchNorm against LayerNorm, every verdict of its exercise 1
and the facts its hints state, measured again, and the layout its exercises rely on.

The harness below is written independently of the notebook's (the same experiment: one model, copies F and A,
three batches, the same seed before each update, and F' with other seeds). If a PyTorch release changes a
verdict or a boundary (dropout's random order, BatchNorm, clipping's partial sums, ...), a test here
fails with the case's name.
"""

import copy
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.functional import mse_loss

from autograd_lab.exercises import accumulation_pitfalls as ex

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_accumulation_pitfalls.ipynb"

N, D, H, K = 48, 8, 16, 4
SAME, NOT_SAME = 1e-5, 1e-2
LAM, MAX_NORM = 0.05, 0.2


def make_batches():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(N, D, generator=gen), torch.randn(N, 1, generator=gen)) for _ in range(3)]


BATCHES = make_batches()

# ------------------------------------------------------------------ models and optimizers


def plain():
    return nn.Sequential(nn.Linear(D, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, 1))


def batchnorm():
    return nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.Tanh(), nn.Linear(H, 1))


def layernorm():
    return nn.Sequential(nn.Linear(D, H), nn.LayerNorm(H), nn.Tanh(), nn.Linear(H, 1))


def groupnorm():
    return nn.Sequential(nn.Linear(D, H), nn.GroupNorm(4, H), nn.Tanh(), nn.Linear(H, 1))


def frozen_batchnorm():
    model = batchnorm()
    model[1].eval()
    return model


def dropout_once():
    return nn.Sequential(nn.Linear(D, H), nn.Tanh(), nn.Dropout(0.5), nn.Linear(H, 1))


def dropout_twice():
    return nn.Sequential(
        nn.Linear(D, H), nn.Tanh(), nn.Dropout(0.5), nn.Linear(H, H), nn.Tanh(), nn.Dropout(0.5), nn.Linear(H, 1)
    )


OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),  # exercise 1's set-up E
}

# ------------------------------------------------------------------ one update, written as a loss + switches


def l2(model):
    return sum((p**2).sum() for p in model.parameters())


def full_update(model, opt, x, y, *, lam=0.0, max_norm=None, **_loop_only):
    opt.zero_grad()
    loss = mse_loss(model(x), y) + lam * l2(model)
    loss.backward()
    if max_norm:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()


def accumulated(model, opt, x, y, k, *, lam=0.0, max_norm=None, share=True, lam_every=False, clip_inside=False):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        w = len(xb) / len(x) if share else 1.0
        data = mse_loss(model(xb), yb) * w
        loss = data + lam * l2(model) * (1.0 if lam_every else w)
        loss.backward()
        if max_norm and clip_inside:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if max_norm and not clip_inside:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()


def relative(model, reference, start):
    with torch.no_grad():
        pf = torch.cat([p.flatten() for p in reference.parameters()])
        pm = torch.cat([p.flatten() for p in model.parameters()])
        return float((pm - pf).abs().max() / (pf - start).abs().max())


def measure(make_model, make_opt, k=K, full=full_update, acc=accumulated, **options):
    """(A against F, F' against F, model F, model A), both relative to how far F moved."""
    if isinstance(make_opt, str):
        make_opt = OPTIMIZERS[make_opt]
    torch.manual_seed(0)
    f = make_model()
    a, f2 = copy.deepcopy(f), copy.deepcopy(f)
    opt_f, opt_a, opt_f2 = make_opt(f.parameters()), make_opt(a.parameters()), make_opt(f2.parameters())
    start = torch.cat([p.detach().flatten().clone() for p in f.parameters()])
    ks = k if isinstance(k, list) else [k] * len(BATCHES)
    for i, ((x, y), k_i) in enumerate(zip(BATCHES, ks)):
        torch.manual_seed(i)
        full(f, opt_f, x, y, **options)
        torch.manual_seed(i)
        acc(a, opt_a, x, y, k_i, **options)
        torch.manual_seed(100 + i)
        full(f2, opt_f2, x, y, **options)
    return relative(a, f, start), relative(f2, f, start), f, a


def verdict(diff, other, tol=SAME):
    if diff < tol:
        return "the same step"
    if other > tol and diff < 2 * other:
        return "as far as other random numbers"
    return "nearly the same step" if diff < NOT_SAME else "NOT the same step"


# ------------------------------------------------------------------ the map


MAP = {  # case -> (model, optimizer, options, verdict)
    "plain MLP": (plain, "Adam", {}, "the same step"),
    "BatchNorm": (batchnorm, "SGD", {}, "NOT the same step"),
    "LayerNorm": (layernorm, "SGD", {}, "the same step"),
    "GroupNorm": (groupnorm, "SGD", {}, "the same step"),  # named in the text beside the map's LayerNorm row
    "BatchNorm frozen in eval()": (frozen_batchnorm, "SGD", {}, "the same step"),
    "two dropout layers": (dropout_twice, "SGD", {}, "as far as other random numbers"),
    "clipping inside the loop": (plain, "SGD", dict(max_norm=MAX_NORM, clip_inside=True), "NOT the same step"),
    "clipping after the loop": (plain, "SGD", dict(max_norm=MAX_NORM), "the same step"),
    "inside, max_norm never reached": (plain, "SGD", dict(max_norm=10.0, clip_inside=True), "the same step"),
    "penalty in every micro-batch loss": (plain, "SGD", dict(lam=LAM, lam_every=True), "NOT the same step"),
    "the penalty takes the share": (plain, "SGD", dict(lam=LAM), "the same step"),
}


@pytest.mark.parametrize("name", list(MAP))
def test_every_verdict_of_the_map(name):
    make_model, optimizer, options, expected = MAP[name]
    diff, other, _, _ = measure(make_model, optimizer, **options)
    assert verdict(diff, other) == expected, (name, diff, other)
    if expected != "as far as other random numbers":
        assert other == 0.0, (name, other)  # nothing random: F' is F


def test_the_verdicts_have_wide_margins():
    diffs = {name: measure(m, o, **opts)[0] for name, (m, o, opts, _) in MAP.items()}
    for name, (_, _, _, expected) in MAP.items():
        if expected == "the same step":
            assert diffs[name] < SAME / 4, (name, diffs[name])
        elif expected == "NOT the same step":
            assert diffs[name] > 10 * NOT_SAME, (name, diffs[name])


@pytest.mark.parametrize("k", [5, 7])
def test_uneven_micro_batches_stay_exact_with_the_share(k):
    assert measure(plain, "SGD", k=k)[0] < SAME


# ------------------------------------------------------------------ BatchNorm


def test_batchnorm_statistics_and_running_stats_differ_and_grow_with_k():
    _, _, f, a = measure(batchnorm, "SGD")
    assert int(a[1].num_batches_tracked) == K * int(f[1].num_batches_tracked) == K * len(BATCHES)
    rel = float((a[1].running_mean - f[1].running_mean).abs().max() / f[1].running_mean.abs().max())
    assert rel > NOT_SAME
    diffs = {k: measure(batchnorm, "SGD", k=k)[0] for k in (1, 2, 4, 16)}
    assert diffs[1] < SAME
    assert diffs[16] > diffs[4] > diffs[2] > NOT_SAME


# ------------------------------------------------------------------ clipping and the penalty


def partial_sum_norms(batch, k=K):
    torch.manual_seed(0)
    model = plain()
    norms = []
    for xb, yb in zip(batch[0].tensor_split(k), batch[1].tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(batch[0])).backward()
        norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
    return norms


def test_clipping_at_0_2_acts_from_the_first_micro_batch_and_10_is_never_reached():
    assert partial_sum_norms(BATCHES[0])[0] > MAX_NORM
    assert max(n for batch in BATCHES for n in partial_sum_norms(batch)) < 10.0 / 4
    # never reached: the same as no clipping at all
    def unclipped(model, opt, x, y, **options):
        full_update(model, opt, x, y)

    assert measure(plain, "SGD", max_norm=10.0, clip_inside=True, full=unclipped)[0] < SAME


def clip_inside_and_after(grads, max_norm):
    """``.grad`` after summing ``grads`` into one parameter with clip_grad_norm_ after every piece, and the full sum
    clipped once, and the norms of the partial sums clip_grad_norm_ saw."""
    p = torch.zeros_like(grads[0], requires_grad=True)
    seen = []
    for g in grads:
        p.grad = g.clone() if p.grad is None else p.grad + g
        seen.append(float(nn.utils.clip_grad_norm_([p], max_norm)))
    inside = p.grad.clone()
    p.grad = sum(grads).clone()
    nn.utils.clip_grad_norm_([p], max_norm)
    return inside, p.grad.clone(), seen


def test_clipping_inside_the_loop_is_exact_exactly_when_no_partial_sum_before_the_last_is_above_max_norm():
    """The rule the notebook states, on random micro-batch gradients that often cancel, with random bounds: exact
    (to float rounding) whenever no partial sum before the last is above max_norm, off whenever one is."""
    gen = torch.Generator().manual_seed(5)
    exact = off = 0
    for _ in range(400):
        k = int(torch.randint(2, 6, (1,), generator=gen))
        grads = [torch.randn(20, generator=gen) * float(torch.rand(1, generator=gen) * 3) for _ in range(k)]
        partial = [float(sum(grads[: i + 1]).norm()) for i in range(k)]
        max_norm = float(torch.rand(1, generator=gen)) * 1.2 * max(partial)
        if any(abs(n - max_norm) < 1e-3 for n in partial):
            continue  # a bound on a partial sum's norm: the 1e-6 in clip_grad_norm_'s factor decides, not the rule
        inside, after, _ = clip_inside_and_after(grads, max_norm)
        gap = float((inside - after).norm() / after.norm())
        if max(partial[:-1]) > max_norm:
            assert gap > 1e-4, (partial, max_norm, gap)
            off += 1
        else:
            assert gap < 1e-6, (partial, max_norm, gap)
            exact += 1
    assert exact > 50 and off > 50


def test_clipping_inside_the_loop_the_issues_two_counterexamples():
    """Both ways of the old claim ("it changes exactly the updates in which clipping matters") fail: targets +3 then
    -3 at k = 2 (a partial sum above max_norm, the full batch below it), and a growing sum clipped only at the end."""
    torch.manual_seed(0)
    model = plain()
    x = BATCHES[0][0]
    y = torch.cat([torch.full((24, 1), 3.0), torch.full((24, 1), -3.0)])
    grads = []
    for xb, yb in zip(x.tensor_split(2), y.tensor_split(2)):
        model.zero_grad()
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    first, total = float(grads[0].norm()), float(sum(grads).norm())
    assert total < first
    max_norm = (first + total) / 2  # the full batch does not clip, the first partial sum is clipped
    inside, after, _ = clip_inside_and_after(grads, max_norm)
    assert torch.equal(after, sum(grads)) and float((inside - after).norm() / after.norm()) > 0.5
    growing = [torch.full((4,), 0.1), torch.full((4,), 0.1), torch.full((4,), 0.1)]  # norms 0.2, 0.4, 0.6
    inside, after, seen = clip_inside_and_after(growing, 0.5)
    assert seen[-1] > 0.5 > max(seen[:-1])
    assert float((after - sum(growing)).norm() / sum(growing).norm()) > 0.1  # clipping matters
    torch.testing.assert_close(inside, after, rtol=0, atol=1e-7)  # and inside the loop it is exact


def notebook_clipping(batch, max_norm, k=K):
    """The notebook's clipping_inside, measured here: (the norms clip_grad_norm_ saw in the loop, the full batch's
    norm, how much clipping changes the full batch's gradient, how far clipping inside lands from it)."""
    x, y = BATCHES[batch]
    torch.manual_seed(0)
    model = plain()
    params = list(model.parameters())

    def grad():
        return torch.cat([p.grad.flatten() for p in params])

    mse_loss(model(x), y).backward()
    g = grad()
    nn.utils.clip_grad_norm_(params, max_norm)
    g_clipped = grad()
    model.zero_grad()
    seen = []
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        seen.append(float(nn.utils.clip_grad_norm_(params, max_norm)))
    change = float((g_clipped - g).norm() / g.norm())
    return seen, float(g.norm()), change, float((grad() - g_clipped).norm() / g_clipped.norm())


def test_clipping_in_the_notebook_batch_0_the_full_batch_does_not_clip_and_inside_is_off():
    seen, full, change, off = notebook_clipping(0, 0.5)
    assert full < 0.5 and change == 0.0
    assert max(seen[:-1]) > 0.5 and seen.index(max(seen[:-1])) == 2  # the sum of three micro-batches
    assert off > 0.05


def test_clipping_in_the_notebook_batch_1_clipping_matters_and_inside_is_exact():
    seen, full, change, off = notebook_clipping(1, 1.4)
    assert full > 1.4 and change > 0.05
    assert max(seen[:-1]) < 1.4 < seen[-1]  # only the finished sum is above max_norm
    assert off < 1e-6


def test_clipping_widget_starts_with_nothing_clipped_and_answers_fast():
    seen, full, change, off = notebook_clipping(2, 2.0)  # the widget's first view: the function's defaults
    assert max(seen) < 2.0 and change == 0.0 and off < 1e-6


def test_penalty_in_every_micro_loss_is_the_full_batch_with_k_times_lambda():
    def full_k_lam(model, opt, x, y, **options):
        full_update(model, opt, x, y, lam=K * LAM)

    assert measure(plain, "SGD", full=full_k_lam, lam=LAM, lam_every=True)[0] < SAME


# ------------------------------------------------------------------ a forgotten share (exercise 1's F and its hint)


def test_without_the_share_the_gradient_is_k_times_the_full_batch_gradient():
    torch.manual_seed(0)
    model = plain()
    x, y = BATCHES[0]
    mse_loss(model(x), y).backward()
    g_full = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    for xb, yb in zip(x.tensor_split(K), y.tensor_split(K)):
        mse_loss(model(xb), yb).backward()
    g_acc = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.testing.assert_close(g_acc, K * g_full, rtol=1e-5, atol=1e-6)


def test_without_the_share_unequal_micro_batches_give_another_gradient_not_a_multiple():
    """The boundary of 'k times the full-batch gradient': k = 5 cuts 48 samples 10, 10, 10, 9, 9."""
    torch.manual_seed(0)
    model = plain()
    x, y = BATCHES[0]
    assert [len(xb) for xb in x.tensor_split(5)] == [10, 10, 10, 9, 9]
    mse_loss(model(x), y).backward()
    g_full = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    for xb, yb in zip(x.tensor_split(5), y.tensor_split(5)):
        mse_loss(model(xb), yb).backward()
    g_acc = torch.cat([p.grad.flatten() for p in model.parameters()])
    best = (g_acc @ g_full) / (g_full @ g_full)  # the closest multiple of the full-batch gradient
    assert float((g_acc - best * g_full).norm() / g_acc.norm()) > 1e-3


def test_exercise_1_f_lr_over_k_holds_for_its_equal_micro_batches_only():
    assert "48 samples" in ex.SETUPS["F"] and N == 48 and N % K == 0
    assert measure(plain, "SGD", k=K, share=False, acc=lr_over_k)[0] < SAME
    assert measure(plain, "SGD", k=5, share=False, acc=lr_over_k)[0] > 1e-3


def test_model_train_unfreezes_a_frozen_batchnorm():
    model = frozen_batchnorm().train()
    assert model[1].training
    diff, other, _, _ = measure(lambda: frozen_batchnorm().train(), "SGD")
    assert verdict(diff, other) == "NOT the same step"


# ------------------------------------------------------------------ dropout


def test_dropout_masks_one_layer_lines_up_two_layers_do_not():
    drop, ones = nn.Dropout(0.5), torch.ones(N, H)
    torch.manual_seed(1)
    whole = drop(ones)
    torch.manual_seed(1)
    pieces = torch.cat([drop(p) for p in ones.tensor_split(K)])
    assert torch.equal(whole, pieces)
    torch.manual_seed(1)
    layer1 = drop(ones)
    torch.manual_seed(1)
    layer1_micro = torch.cat([(drop(p), drop(p))[0] for p in ones.tensor_split(K)])
    agree = (layer1 == layer1_micro).float().tensor_split(K)
    assert agree[0].mean() == 1 and all(0.25 < a.mean() < 0.75 for a in agree[1:])


def test_one_dropout_layer_matches_by_draw_order_and_another_seed_still_moves_it():
    diff, other, _, _ = measure(dropout_once, "SGD")
    assert diff < SAME < NOT_SAME < other


def first_update_grads(make_model, k, seeds, noise=lambda t: t):
    """The first update's gradient over k micro-batches, for each seed (``noise`` applied to each x and y)."""
    torch.manual_seed(0)
    model = make_model()
    x, y = BATCHES[0]
    out = []
    for seed in range(seeds):
        model.zero_grad()
        torch.manual_seed(seed)
        for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
            (mse_loss(model(noise(xb)), noise(yb)) * len(xb) / len(x)).backward()
        out.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return torch.stack(out)


def test_two_dropout_layers_agree_on_average():
    gf, ga = first_update_grads(dropout_twice, 1, 128), first_update_grads(dropout_twice, K, 128)
    one = float((ga[0] - gf[0]).abs().max())
    averaged = float((ga.mean(0) - gf.mean(0)).abs().max())
    assert one > NOT_SAME and averaged < 0.25 * one


# ------------------------------------------------------------------ exercise 1's answer key: every set-up measured


def worst_error_full(model, opt, x, y, **_):
    opt.zero_grad()
    (model(x) - y).abs().max().backward()
    opt.step()


def worst_error_accumulated(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        ((model(xb) - yb).abs().max() * len(xb) / len(x)).backward()
    opt.step()


def mix(t):
    return 0.5 * (t + t.roll(1, dims=0))


def mixed_full(model, opt, x, y, **_):
    opt.zero_grad()
    mse_loss(model(mix(x)), mix(y)).backward()
    opt.step()


def mixed_accumulated(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(mix(xb)), mix(yb)) * len(xb) / len(x)).backward()
    opt.step()


def random_cut(model, opt, x, y, k, **_):
    opt.zero_grad()
    for idx in torch.randperm(len(x)).tensor_split(k):
        (mse_loss(model(x[idx]), y[idx]) * len(idx) / len(x)).backward()
    opt.step()


def penalty_once(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
    (LAM * l2(model)).backward()
    opt.step()


def noisy(t):
    return t + 0.1 * torch.randn_like(t)


def noise_grads(k, seeds):
    """The first update's gradient with set-up E's noise, for each seed: k = 1 is the full batch."""
    return first_update_grads(plain, k, seeds, noise=noisy)


def noise_full(model, opt, x, y, **_):
    opt.zero_grad()
    xn = noisy(x)
    mse_loss(model(xn), noisy(y)).backward()
    opt.step()


def noise_accumulated(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        xn = noisy(xb)
        (mse_loss(model(xn), noisy(yb)) * len(xb) / len(x)).backward()
    opt.step()


def setup_verdict(letter):
    """Measure set-up ``letter`` of ex.SETUPS (k = 4) and return its verdict in the exercise's words."""
    if letter == "A":
        diff = measure(plain, "SGD", full=worst_error_full, acc=worst_error_accumulated)[0]
    elif letter == "B":
        diff = measure(plain, "SGD", full=mixed_full, acc=mixed_accumulated)[0]
    elif letter == "C":
        diff = measure(plain, "SGD", acc=random_cut)[0]
    elif letter == "D":
        diff = measure(plain, "SGD", full=lambda m, o, x, y: full_update(m, o, x, y, lam=LAM), acc=penalty_once)[0]
    elif letter == "E":
        diff, other, _, _ = measure(plain, "AdamW", full=noise_full, acc=noise_accumulated)
        gf, ga = noise_grads(1, 128), noise_grads(K, 128)
        one = float((ga[0] - gf[0]).abs().max() / gf[0].abs().max())
        averaged = float((ga.mean(0) - gf.mean(0)).abs().max() / gf[0].abs().max())
        if verdict(diff, other) == "as far as other random numbers" and one > NOT_SAME and averaged < 0.25 * one:
            return "only in distribution"
    elif letter == "F":
        diff = measure(plain, "SGD", share=False, acc=lr_over_k)[0]
    else:
        raise KeyError(letter)
    return {"the same step": "equivalent", "NOT the same step": "not equivalent"}.get(verdict(diff, 0.0), "?")


@pytest.mark.parametrize("letter", list(ex.SETUPS))
def test_exercise_1_answer_key_matches_measurement(letter):
    assert setup_verdict(letter) == ex.ANSWERS[letter]


def lr_over_k(model, opt, x, y, k, base_lr=0.1, **options):
    """The accumulated update with the learning rate divided by k."""
    for group in opt.param_groups:
        group["lr"] = base_lr / k
    accumulated(model, opt, x, y, k, **options)


def test_exercise_1_lr_over_k_also_holds_with_momentum_and_not_with_weight_decay_or_adam():
    # the hint of set-up F says so
    sgd = lambda **kw: lambda p: torch.optim.SGD(p, lr=0.1, **kw)  # noqa: E731
    assert measure(plain, sgd(momentum=0.9), share=False, acc=lr_over_k)[0] < SAME
    assert measure(plain, sgd(momentum=0.9, weight_decay=0.1), share=False, acc=lr_over_k)[0] > NOT_SAME

    def adam_lr_over_k(model, opt, x, y, k, **options):
        lr_over_k(model, opt, x, y, k, base_lr=0.01, **options)

    assert measure(plain, "Adam", share=False, acc=adam_lr_over_k)[0] > NOT_SAME


# ------------------------------------------------------------------ the picture: BatchNorm joins the samples


@pytest.mark.parametrize("norm, others_move", [(nn.BatchNorm1d, True), (nn.LayerNorm, False)])
def test_sample_1s_output_moves_with_the_other_samples_only_through_batchnorm(norm, others_move):
    for seed in range(3):  # the notebook's seed, and others
        torch.manual_seed(seed)
        batch = torch.randn(3, 2)
        model = nn.Sequential(nn.Linear(2, 3), norm(3), nn.Linear(3, 1)).requires_grad_(False)
        samples = batch.clone().requires_grad_()
        model(samples)[0].backward()
        rows = samples.grad.abs().sum(dim=1)
        assert rows[0] > 0
        assert bool((rows[1:] > 1e-4).all()) if others_move else bool((rows[1:] == 0).all()), (seed, rows)


# ------------------------------------------------------------------ the notebook's layout: predictions, exercises


def cells():
    return json.loads(NOTEBOOK.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def test_no_label_above_the_maps_predict_gives_a_verdict_away():
    """From the experiment to the map's rows: no label calls a row a fix, a mistake or a bug."""
    ids = [c["id"] for c in cells()]
    text = "\n".join(source(c) for c in cells()[ids.index("exp-md"):ids.index("summary") + 1])
    for word in ("fix", "wrongly", "never reached", "mistake", "bug"):
        assert word not in text.lower(), word


def test_the_clipping_widget_comes_after_its_predict_and_before_the_cells_that_answer_it():
    ids = [c["id"] for c in cells()]
    predict = next(i for i, c in enumerate(cells()) if c["id"] == "clip-md")
    assert "Predict" in source(cells()[predict])
    order = [ids.index(name) for name in ("widget-clip", "twin-clip", "clip-exact", "clip-after")]
    assert predict < order[0] and order == sorted(order)
    meta = cells()[ids.index("widget-clip")]["metadata"]["autograd_lab"]
    assert meta == {"twin": "twin-clip", "set": {"batch": 0, "max_norm": 0.5}}
    assert source(cells()[ids.index("twin-clip")]).strip() == "clipping_inside(batch=0, max_norm=0.5)"


def test_every_exercise_has_a_heading_and_a_prompt_and_exercise_3_states_its_rule():
    all_cells = cells()
    for i, c in enumerate(all_cells):
        if c["cell_type"] == "code" and re.search(r"\bex\.check_\w+\(", source(c)) and "%load" not in source(c):
            prompt = next(source(p) for p in reversed(all_cells[:i]) if p["cell_type"] == "markdown")
            assert re.search(r"^### Exercise \d", prompt, re.M), c["id"]
    ex3 = next(source(p) for p in all_cells if p["id"] == "ex3-md")
    for rule in ("yourself", "nn.LayerNorm", "frozen in `eval()`", "F.layer_norm", "refused"):
        assert rule in ex3, rule


def test_the_notebook_no_longer_says_what_the_issue_found_wrong():
    text = "\n".join(source(c) for c in cells() if c["cell_type"] == "markdown")
    assert "exactly the updates in which clipping matters" not in text
    assert "three things" not in text  # the conditions of Adam's hiding, cut with it (the count left no room)
    assert "does not hide it at all" not in text


# ------------------------------------------------------------------ the prompts say what the checks run


def prompt(cell_id):
    return " ".join(source(next(c for c in cells() if c["id"] == cell_id)).split())


def stated_ks(text):
    """The k values a prompt names after "k = " (e.g. "k = 2, 3, 4 and 5")."""
    found = re.search(r"k = (\d+(?:(?:, | and )\d+)*)", text)
    return {int(n) for n in re.findall(r"\d+", found.group(1))}


def test_exercise_2s_prompt_names_the_ks_its_check_runs():
    namespace = {"nn": nn, "torch": torch, "mse_loss": mse_loss, "ex": ex}
    exec((NOTEBOOK.parent / "solutions" / "05_accumulated_update.py").read_text(), namespace)
    seen = set()

    def recorded(model, opt, x, y, k):
        seen.add(k)
        return namespace["my_accumulated_update"](model, opt, x, y, k)

    assert ex.check_accumulated_update(recorded).passed
    assert seen == stated_ks(prompt("ex2-md")) == {2, 3, 4, 5}
    assert "unequal micro-batches" in prompt("ex2-md") and 24 % 5 != 0  # the check's batch: 24 samples


class RecordingModel(nn.Module):
    """Exercise 3's worked solution, noting how many samples each forward pass gets."""

    sizes: list = []

    def __init__(self):
        super().__init__()
        self.first, self.last = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x):
        RecordingModel.sizes.append(len(x))
        h = self.first(x)
        h = (h - h.mean(dim=1, keepdim=True)) / (h.std(dim=1, correction=0, keepdim=True) + 1e-5)
        return self.last(torch.tanh(h))


def test_exercise_3s_prompt_names_the_k_its_check_runs_against_the_full_batch():
    RecordingModel.sizes = []
    assert ex.check_normalized_model(RecordingModel).passed
    sizes = RecordingModel.sizes
    (k,) = stated_ks(prompt("ex3-md"))
    full = max(sizes)
    assert full in sizes and sizes.count(full // k) >= k  # full-batch passes, and passes of micro-batches of 1/k
    assert "scales the first Linear's output" in prompt("ex3-md")


def test_exercise_1s_prompt_the_check_names_why_for_each_wrong_verdict():
    assert "names, for each one it finds wrong, why" in prompt("ex1-md")
    assert "each of the six letters" in prompt("ex1-md") and len(ex.SETUPS) == 6
    fb = ex.check_predictions({letter: "only in distribution" for letter in ex.SETUPS})
    wrong_letters = [letter for letter, verdict in ex.ANSWERS.items() if verdict != "only in distribution"]
    assert fb.status == "wrong" and all(f"- {letter} is" in fb.message for letter in wrong_letters)


# ------------------------------------------------------------------ the promise names what Going deeper holds


def test_the_promise_names_what_going_deeper_holds_and_the_core_points_to_the_picture():
    ids = [c["id"] for c in cells()]
    deeper = ids.index("deeper-md")
    assert "Going deeper (optional)" in source(cells()[deeper])
    assert deeper < ids.index("bn-graph") < ids.index("ex3")  # the picture and exercise 3 are optional
    intro = prompt("intro")
    assert "*Going deeper* draws where, in the graph, BatchNorm joins the samples" in intro
    assert "write a normalization that accumulates exactly" in intro
    assert "Adam hides" not in intro and "forgotten" not in intro  # cut: the count left no room for it
    assert "*Going deeper* draws where, in the graph, the samples meet" in prompt("bn-md")


def test_exercise_2s_prompt_asks_for_no_penalty_form_the_check_does_not_enforce():
    """The check passes the penalty taking its share in every micro-batch loss (cell 7's loop) and a penalty
    backward() of its own alike, so the prompt prescribes neither."""
    assert "once per update" not in prompt("ex2-md")


def test_the_dropout_section_says_one_layer_can_match_by_the_draw_order():
    text = prompt("drop-md")
    assert "With one dropout layer" in text and "accident" in text
    assert measure(dropout_once, "SGD")[0] < SAME and measure(dropout_twice, "SGD")[0] > NOT_SAME


def test_adam_can_turn_a_gradient_entry_cancelled_to_rounding_into_a_step_of_about_lr():
    """The takeaway's advice: compare gradients (or SGD steps), since Adam divides by the gradient's size."""
    torch.manual_seed(0)
    f = plain()
    a = copy.deepcopy(f)
    x = torch.randn(48, D)
    with torch.no_grad():
        out = f(x)
    r = torch.randn(48, 1)
    y = out - (r - r.mean())  # residuals sum to ~0: the last bias's full-batch gradient is rounding
    of, oa = torch.optim.Adam(f.parameters(), lr=0.01), torch.optim.Adam(a.parameters(), lr=0.01)
    start = float(f[-1].bias.detach())
    full_update(f, of, x, y)
    accumulated(a, oa, x, y, K)
    gf, ga = f[-1].bias.grad, a[-1].bias.grad
    assert float((gf - ga).abs()) < 1e-6  # the gradients agree to rounding
    moved_f, moved_a = float(f[-1].bias.detach()) - start, float(a[-1].bias.detach()) - start
    assert abs(moved_f - moved_a) > 0.002  # the steps do not: a sizeable fraction of lr 0.01
