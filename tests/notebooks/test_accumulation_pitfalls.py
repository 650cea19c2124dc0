"""Notebook 05 (accumulation pitfalls): every row of its map, every rule it states with the second case that
bounds it, and every verdict of its exercise 1, measured again.

The harness below is written independently of the notebook's (the same experiment: one model, copies F and A,
three batches, the same seed before each update, and F' with other seeds). If a PyTorch release changes a
verdict or a boundary (dropout's random order, BatchNorm, Adam's eps, GradScaler's overflow, ...), a test here
fails with the case's name.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import mse_loss

from autograd_lab.accumulation import check_accumulation
from autograd_lab.exercises import accumulation_pitfalls as ex

N, D, H, K = 48, 8, 16, 4
SAME, NOT_SAME = 1e-5, 1e-2
LAM, MAX_NORM = 0.05, 0.2
BF16_TOL = 4 * torch.finfo(torch.bfloat16).eps
FP16_TOL = 4 * torch.finfo(torch.float16).eps


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


def adam(**kw):
    return lambda p: torch.optim.Adam(p, lr=0.01, **kw)


OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
    "Adam": adam(),
    "Adam, L2 weight_decay": adam(weight_decay=0.1),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
}

# ------------------------------------------------------------------ one update, written as a loss + switches


def l2(model):
    return sum((p**2).sum() for p in model.parameters())


def full_update(model, opt, x, y, *, lam=0.0, max_norm=None, bf16=False, loss_scale=1.0, **_loop_only):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = (mse_loss(model(x), y) + lam * l2(model)) * loss_scale
    loss.backward()
    if max_norm:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()


def accumulated(model, opt, x, y, k, *, lam=0.0, max_norm=None, bf16=False, loss_scale=1.0, share=True,
                lam_every=False, clip_inside=False):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        w = len(xb) / len(x) if share else 1.0
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            data = mse_loss(model(xb), yb) * w
        loss = (data + lam * l2(model) * (1.0 if lam_every else w)) * loss_scale
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
    "share forgotten|SGD": (plain, "SGD", dict(share=False), "NOT the same step"),
    "share forgotten|Adam": (plain, "Adam", dict(share=False), "nearly the same step"),
    "share forgotten|Adam, L2 weight_decay": (plain, "Adam, L2 weight_decay", dict(share=False), "NOT the same step"),
    "share forgotten|AdamW": (plain, "AdamW", dict(share=False), "nearly the same step"),
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
    assert 10 * SAME < diffs["share forgotten|Adam"] < NOT_SAME / 10


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


def test_penalty_in_every_micro_loss_is_the_full_batch_with_k_times_lambda():
    def full_k_lam(model, opt, x, y, **options):
        full_update(model, opt, x, y, lam=K * LAM)

    assert measure(plain, "SGD", full=full_k_lam, lam=LAM, lam_every=True)[0] < SAME


# ------------------------------------------------------------------ a forgotten share, and Adam's boundary


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


@pytest.mark.parametrize("eps, low, high", [(1e-8, 1e-5, 1e-3), (1e-6, 3e-3, 5e-2), (1e-4, 0.1, 0.3),
                                            (1e-2, 0.3, 0.6)])
def test_adam_hides_a_forgotten_share_only_while_the_gradients_are_much_larger_than_eps(eps, low, high):
    assert low < measure(plain, adam(eps=eps), share=False)[0] < high


@pytest.mark.parametrize("scale", [1e-4, 1e-6])
def test_a_larger_eps_is_exactly_a_smaller_loss(scale):
    by_eps = measure(plain, adam(eps=1e-8 / scale), share=False)[0]
    by_loss = measure(plain, "Adam", share=False, loss_scale=scale)[0]
    assert by_eps == pytest.approx(by_loss, rel=1e-3)
    assert by_loss > 0.1  # the figures: about 0.18 at 1e-4 and 0.40 at 1e-6


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
def test_adam_does_not_hide_a_forgotten_share_when_k_changes_between_updates(optimizer):
    assert measure(plain, optimizer, k=[4, 2, 4], share=False)[0] > 0.1
    assert measure(plain, optimizer, k=[4, 2, 4])[0] < SAME  # with the share, a varying k is exact


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


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
@pytest.mark.parametrize("k", [5, 7])
def test_adam_does_not_hide_a_forgotten_share_with_unequal_micro_batches(optimizer, k):
    assert measure(plain, optimizer, k=k, share=False)[0] > 0.3
    assert measure(plain, optimizer, k=K, share=False)[0] < NOT_SAME  # the equal case beside it: hidden


def test_exercise_1_f_lr_over_k_holds_for_its_equal_micro_batches_only():
    assert "48 samples" in ex.SETUPS["F"] and N == 48 and N % K == 0
    assert measure(plain, "SGD", k=K, share=False, acc=lr_over_k)[0] < SAME
    assert measure(plain, "SGD", k=5, share=False, acc=lr_over_k)[0] > 1e-3


def test_model_train_unfreezes_a_frozen_batchnorm():
    model = frozen_batchnorm().train()
    assert model[1].training
    diff, other, _, _ = measure(lambda: frozen_batchnorm().train(), "SGD")
    assert verdict(diff, other) == "NOT the same step"


@pytest.mark.parametrize("weight_decay, hidden", [(0.0, True), (0.01, False), (0.1, False)])
def test_adam_hides_a_forgotten_share_only_without_l2_weight_decay(weight_decay, hidden):
    diff = measure(plain, adam(weight_decay=weight_decay), share=False)[0]
    assert (diff < NOT_SAME) == hidden, diff


@pytest.mark.parametrize("weight_decay", [0.01, 0.1, 1.0])
def test_adamw_hides_a_forgotten_share_whatever_its_weight_decay(weight_decay):
    diff = measure(plain, lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=weight_decay), share=False)[0]
    assert SAME < diff < NOT_SAME, (weight_decay, diff)


@pytest.mark.parametrize("foreach", [False, True])
def test_adam_l2_weight_decay_goes_into_its_own_gradient_not_into_grad(foreach):
    torch.manual_seed(0)
    model = plain()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1, foreach=foreach)
    mse_loss(model(BATCHES[0][0]), BATCHES[0][1]).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    params = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))  # .grad as it was
    beta1 = opt.param_groups[0]["betas"][0]
    for g, p0, p in zip(grads, params, model.parameters()):  # the first moment saw grad + weight_decay * p
        torch.testing.assert_close(opt.state[p]["exp_avg"], (1 - beta1) * (g + 0.1 * p0))


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


def first_update_grads(make_model, k, seeds):
    torch.manual_seed(0)
    model = make_model()
    x, y = BATCHES[0]
    out = []
    for seed in range(seeds):
        model.zero_grad()
        torch.manual_seed(seed)
        for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
            (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        out.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return torch.stack(out)


def test_two_dropout_layers_agree_on_average():
    gf, ga = first_update_grads(dropout_twice, 1, 128), first_update_grads(dropout_twice, K, 128)
    one = float((ga[0] - gf[0]).abs().max())
    averaged = float((ga.mean(0) - gf.mean(0)).abs().max())
    assert one > NOT_SAME and averaged < 0.25 * one


# ------------------------------------------------------------------ mixed precision


def test_bf16_autocast_accumulates_within_bf16_rounding_and_about_as_far_as_bf16_itself():
    diff, _, _, _ = measure(plain, "SGD", bf16=True)
    assert diff < BF16_TOL

    def bf16_full(model, opt, x, y, k, **options):
        full_update(model, opt, x, y, bf16=True)

    fmt, _, _, _ = measure(plain, "SGD", acc=bf16_full)
    assert diff < 5 * fmt


def test_bfloat16_underflows_about_where_float32_does_and_float16_much_earlier():
    tiny = torch.tensor([1e-8, 1e-30, 1e-41, 1e-46], dtype=torch.float64)
    kept = {dt: [bool(v != 0) for v in tiny.to(dt)] for dt in (torch.float32, torch.bfloat16, torch.float16)}
    assert kept[torch.float32] == [True, True, True, False]
    assert kept[torch.bfloat16] == [True, True, False, False]  # not never: below float32's normal range
    assert kept[torch.float16] == [False, False, False, False]
    assert torch.finfo(torch.bfloat16).smallest_normal == torch.finfo(torch.float32).smallest_normal


def fp16_update(model, opt, x, y, k, scaler):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = mse_loss(model(xb), yb) * len(xb) / len(x)
        scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def fp16_run(k, init_scale):
    torch.manual_seed(0)
    model, scaler = plain(), torch.amp.GradScaler("cpu", init_scale=init_scale)
    opt = OPTIMIZERS["SGD"](model.parameters())
    for x, y in BATCHES:
        fp16_update(model, opt, x, y, k, scaler)
    return model, scaler.get_scale()


def test_fp16_a_fresh_scaler_skips_a_full_batch_step_and_a_settled_one_matches():
    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten().clone() for p in plain().parameters()])
    (f, sf), (a, sa) = fp16_run(1, 2.0**16), fp16_run(K, 2.0**16)
    assert sf == 2.0**15 and sa == 2.0**16 and relative(a, f, start) > 1.0
    (f, sf), (a, sa) = fp16_run(1, 2.0**10), fp16_run(K, 2.0**10)
    assert sf == sa == 2.0**10 and relative(a, f, start) < FP16_TOL


def test_fp16_the_skipped_step_is_a_float16_sum_over_48_samples_that_overflows():
    """At update 2 the last bias's scaled float16 gradient over 48 samples is inf, each 12-sample piece is
    finite, and only their float32 sum exceeds float16's range."""
    torch.manual_seed(0)
    model, scaler = plain(), torch.amp.GradScaler("cpu", init_scale=2.0**16)
    fp16_update(model, OPTIMIZERS["SGD"](model.parameters()), *BATCHES[0], 1, scaler)
    assert scaler.get_scale() == 2.0**16  # update 1 stepped
    x, y = BATCHES[1]

    def bias_grad(xb, yb):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = mse_loss(model(xb), yb) * len(xb) / len(x)
        scaler.scale(loss).backward()
        return model[4].bias.grad.item()

    fp16_max = torch.finfo(torch.float16).max
    assert abs(bias_grad(x, y)) == float("inf")
    not_finite = [n for n, p in model.named_parameters() if not p.grad.isfinite().all()]
    assert not_finite == ["4.bias"]  # the notebook prints it: the last bias, and only it
    pieces = [bias_grad(xb, yb) for xb, yb in zip(x.tensor_split(K), y.tensor_split(K))]
    assert all(abs(p) < fp16_max for p in pieces) and abs(sum(pieces)) > fp16_max


# ------------------------------------------------------------------ the audit


def test_audit_names_batchnorm_and_dropout():
    x, y = BATCHES[0]
    torch.manual_seed(0)
    report = check_accumulation(batchnorm(), nn.MSELoss(), x, y, k=K)
    assert not report.agree and report.causes[0].startswith("BatchNorm")
    assert any("num_batches_tracked" in b for b in report.buffers_differ)
    torch.manual_seed(0)
    assert check_accumulation(layernorm(), nn.MSELoss(), x, y, k=K).agree
    torch.manual_seed(0)
    report = check_accumulation(dropout_twice(), nn.MSELoss(), x, y, k=K)
    assert not report.agree and report.causes[0].startswith("dropout")


# ------------------------------------------------------------------ exercise 1's answer key: every set-up measured


class Net(nn.Module):
    """Linear -> middle -> Tanh -> Linear -> Tanh -> Linear, with optional noise on both hidden layers."""

    def __init__(self, middle=lambda h: h, noise=False):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(D, H), nn.Linear(H, H), nn.Linear(H, 1)
        self.middle, self.noise = middle, noise

    def forward(self, x):
        h = torch.tanh(self.middle(self.fc1(x)))
        if self.noise and self.training:
            h = h + 0.1 * torch.randn_like(h)
        h = torch.tanh(self.fc2(h))
        if self.noise and self.training:
            h = h + 0.1 * torch.randn_like(h)
        return self.fc3(h)


def clip_value_full(model, opt, x, y, **_):
    opt.zero_grad()
    mse_loss(model(x), y).backward()
    nn.utils.clip_grad_value_(model.parameters(), 0.01)
    opt.step()


def clip_value_inside(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.01)
    opt.step()


def penalty_once(model, opt, x, y, k, **_):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
    (LAM * l2(model)).backward()
    opt.step()


def in_distribution(make_model):
    """'only in distribution' when one seed differs but the first update's gradient agrees on average."""
    gf, ga = first_update_grads(make_model, 1, 128), first_update_grads(make_model, K, 128)
    one = float((ga[0] - gf[0]).abs().max() / gf[0].abs().max())
    averaged = float((ga.mean(0) - gf.mean(0)).abs().max() / gf[0].abs().max())
    return one > NOT_SAME and averaged < 0.25 * one


def setup_verdict(letter):
    """Measure set-up ``letter`` of ex.SETUPS (k = 4) and return its verdict in the exercise's words."""
    sgd = "SGD"
    if letter == "A":
        diff = measure(lambda: Net(lambda h: F.normalize(h, dim=1)), sgd)[0]
    elif letter == "B":
        diff = measure(lambda: Net(lambda h: h - h.mean(dim=0)), sgd)[0]
    elif letter == "C":
        torch.manual_seed(0)
        model = plain()
        mse_loss(model(BATCHES[0][0]), BATCHES[0][1]).backward()
        entries = torch.cat([p.grad.abs().flatten() for p in model.parameters()])
        assert (entries > 0.01).float().mean() > 0.25  # "many entries of the gradient are larger than 0.01"
        diff = measure(plain, sgd, full=clip_value_full, acc=clip_value_inside)[0]
    elif letter == "D":
        diff = measure(plain, sgd, full=lambda m, o, x, y: full_update(m, o, x, y, lam=LAM), acc=penalty_once)[0]
    elif letter == "E":
        diff, other, _, _ = measure(lambda: Net(noise=True), "AdamW")
        if verdict(diff, other) == "as far as other random numbers" and in_distribution(lambda: Net(noise=True)):
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
