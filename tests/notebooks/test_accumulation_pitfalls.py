"""Notebook 05 (accumulation pitfalls): every verdict of its summary table, and of its exercise 1, measured again.

The harness below is written independently of the notebook's (same experiment: one model, two copies,
three batches, the same seed before each update; full batch against k accumulated micro-batches). If a
PyTorch release changes a verdict (dropout's random order, BatchNorm, GradScaler's overflow, ...), a test
here fails with the case's name.
"""

import copy

import pytest
import torch
from torch import nn
from torch.nn.functional import mse_loss

from autograd_lab.accumulation import check_accumulation
from autograd_lab.exercises import accumulation_pitfalls as ex

N, D, H, K = 48, 8, 16, 4
EQUIVALENT, NOT_EQUIVALENT = 1e-5, 1e-2
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
    "SGD momentum + weight decay": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "Adam + weight_decay (L2)": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
}

# ------------------------------------------------------------------ one update, written as a loss + hooks


def l2(model):
    return sum((p**2).sum() for p in model.parameters())


def make_full(*, lam=0.0, clip=False, autocast=None, scaler=None, max_norm=MAX_NORM):
    def update(model, opt, x, y):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = mse_loss(model(x), y)
        loss = loss + lam * l2(model) if lam else loss
        (scaler.scale(loss) if scaler else loss).backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()

    return update


def make_accumulated(
    *, lam=0.0, lam_every=False, clip=None, scaled=True, autocast=None, scaler=None, max_norm=MAX_NORM
):
    def update(model, opt, x, y, k):
        opt.zero_grad()
        for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
            share = len(xb) / len(x) if scaled else 1.0
            with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
                loss = mse_loss(model(xb), yb)
            if lam and lam_every:
                loss = loss * share + lam * l2(model)
            else:
                loss = (loss + lam * l2(model)) * share if lam else loss * share
            (scaler.scale(loss) if scaler else loss).backward()
            if clip == "inside":
                nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if clip == "after":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()

    return update


def measure(make_model, optimizer, full, accumulated, k=K, seed=0):
    """(gradient difference, parameter difference, model F, model A), both differences relative."""
    torch.manual_seed(seed)
    f = make_model()
    a = copy.deepcopy(f)
    opt_f, opt_a = OPTIMIZERS[optimizer](f.parameters()), OPTIMIZERS[optimizer](a.parameters())
    start = torch.cat([p.detach().flatten().clone() for p in f.parameters()])
    grad_diff = 0.0
    for x, y in BATCHES:
        torch.manual_seed(seed + 1)
        full(f, opt_f, x, y)
        torch.manual_seed(seed + 1)
        accumulated(a, opt_a, x, y, k)
        gf = torch.cat([p.grad.flatten() for p in f.parameters()])
        ga = torch.cat([p.grad.flatten() for p in a.parameters()])
        grad_diff = max(grad_diff, float((ga - gf).abs().max() / gf.abs().max()))
    with torch.no_grad():
        pf = torch.cat([p.flatten() for p in f.parameters()])
        pa = torch.cat([p.flatten() for p in a.parameters()])
        param_diff = float((pa - pf).abs().max() / (pf - start).abs().max())
    return grad_diff, param_diff, f, a


BF16_TOL = 4 * torch.finfo(torch.bfloat16).eps
FP16_TOL = 4 * torch.finfo(torch.float16).eps


def scalers(init_scale):
    return torch.amp.GradScaler("cpu", init_scale=init_scale), torch.amp.GradScaler("cpu", init_scale=init_scale)


def case(name):
    """The notebook's summary rows: name -> (model, optimizer, full update, accumulated update, tolerance)."""
    plain_pair = (make_full(), make_accumulated())
    if name.startswith("fp16"):
        sf, sa = scalers(2.0**16 if "fresh" in name else 2.0**10)
        full = make_full(autocast=torch.float16, scaler=sf)
        return plain, "SGD", full, make_accumulated(autocast=torch.float16, scaler=sa), FP16_TOL
    table = {
        "plain MLP|SGD": (plain, "SGD", *plain_pair, EQUIVALENT),
        "plain MLP|SGD momentum + weight decay": (plain, "SGD momentum + weight decay", *plain_pair, EQUIVALENT),
        "plain MLP|Adam": (plain, "Adam", *plain_pair, EQUIVALENT),
        "plain MLP|AdamW": (plain, "AdamW", *plain_pair, EQUIVALENT),
        "plain MLP|Adam + weight_decay (L2)": (plain, "Adam + weight_decay (L2)", *plain_pair, EQUIVALENT),
        "BatchNorm": (batchnorm, "SGD", *plain_pair, EQUIVALENT),
        "LayerNorm": (layernorm, "SGD", *plain_pair, EQUIVALENT),
        "GroupNorm": (groupnorm, "SGD", *plain_pair, EQUIVALENT),
        "BatchNorm frozen (eval)": (frozen_batchnorm, "SGD", *plain_pair, EQUIVALENT),
        "one dropout layer": (dropout_once, "SGD", *plain_pair, EQUIVALENT),
        "two dropout layers": (dropout_twice, "SGD", *plain_pair, EQUIVALENT),
        "clip after accumulation": (plain, "SGD", make_full(clip=True), make_accumulated(clip="after"), EQUIVALENT),
        "clip inside the loop": (plain, "SGD", make_full(clip=True), make_accumulated(clip="inside"), EQUIVALENT),
        "L2 in every micro-loss": (
            plain, "SGD", make_full(lam=LAM), make_accumulated(lam=LAM, lam_every=True), EQUIVALENT
        ),
        "L2 scaled with the loss": (plain, "SGD", make_full(lam=LAM), make_accumulated(lam=LAM), EQUIVALENT),
        "no loss scaling|SGD": (plain, "SGD", make_full(), make_accumulated(scaled=False), EQUIVALENT),
        "no loss scaling|Adam": (plain, "Adam", make_full(), make_accumulated(scaled=False), EQUIVALENT),
        "no loss scaling|Adam + weight_decay (L2)": (
            plain, "Adam + weight_decay (L2)", make_full(), make_accumulated(scaled=False), EQUIVALENT
        ),
        "no loss scaling|AdamW": (plain, "AdamW", make_full(), make_accumulated(scaled=False), EQUIVALENT),
        "bf16 autocast": (
            plain, "SGD", make_full(autocast=torch.bfloat16), make_accumulated(autocast=torch.bfloat16), BF16_TOL
        ),
    }
    return table[name]


def verdict(diff, tol):
    if diff < tol:
        return "equivalent"
    if diff > max(NOT_EQUIVALENT, 10 * tol):
        return "NOT equivalent"
    return "nearly equivalent"


EXPECTED = {
    "plain MLP|SGD": "equivalent",
    "plain MLP|SGD momentum + weight decay": "equivalent",
    "plain MLP|Adam": "equivalent",
    "plain MLP|AdamW": "equivalent",
    "plain MLP|Adam + weight_decay (L2)": "equivalent",
    "BatchNorm": "NOT equivalent",
    "LayerNorm": "equivalent",
    "GroupNorm": "equivalent",
    "BatchNorm frozen (eval)": "equivalent",
    "one dropout layer": "equivalent",
    "two dropout layers": "NOT equivalent",  # for one seed; in distribution: test_two_dropout_layers_agree_on_average
    "clip after accumulation": "equivalent",
    "clip inside the loop": "NOT equivalent",
    "L2 in every micro-loss": "NOT equivalent",
    "L2 scaled with the loss": "equivalent",
    "no loss scaling|SGD": "NOT equivalent",
    "no loss scaling|Adam": "nearly equivalent",
    "no loss scaling|Adam + weight_decay (L2)": "NOT equivalent",  # the L2 term in .grad is not scaled by k
    "no loss scaling|AdamW": "nearly equivalent",  # decoupled decay: the missing scale is hidden again
    "bf16 autocast": "equivalent",
    "fp16 + GradScaler, fresh scale": "NOT equivalent",
    "fp16 + GradScaler, settled scale": "equivalent",
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_verdict_of_the_summary_table(name):
    make_model, optimizer, full, accumulated, tol = case(name)
    grad_diff, param_diff, _, _ = measure(make_model, optimizer, full, accumulated)
    assert verdict(param_diff, tol) == EXPECTED[name], (name, grad_diff, param_diff)
    if EXPECTED[name] == "equivalent":
        assert grad_diff < tol, (name, grad_diff)
    else:  # the gradients differ in every case that is not equivalent, Adam's included
        assert grad_diff > NOT_EQUIVALENT, (name, grad_diff)


@pytest.mark.parametrize("k", [5, 7])
def test_uneven_micro_batches_stay_exact_with_the_share(k):
    assert measure(plain, "SGD", make_full(), make_accumulated(), k=k)[1] < EQUIVALENT


def test_adam_hides_the_missing_scale_only_up_to_eps():
    _, p_adam, _, _ = measure(plain, "Adam", make_full(), make_accumulated(scaled=False))
    _, p_sgd, _, _ = measure(plain, "SGD", make_full(), make_accumulated(scaled=False))
    assert 10 * EQUIVALENT < p_adam < NOT_EQUIVALENT / 10 < p_sgd  # wide margins on both sides


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


def test_batchnorm_statistics_and_running_stats_differ_and_grow_with_k():
    _, _, f, a = measure(batchnorm, "SGD", make_full(), make_accumulated())
    assert int(a[1].num_batches_tracked) == K * int(f[1].num_batches_tracked) == K * len(BATCHES)
    rel = float((a[1].running_mean - f[1].running_mean).abs().max() / f[1].running_mean.abs().max())
    assert rel > NOT_EQUIVALENT
    grads = {k: measure(batchnorm, "SGD", make_full(), make_accumulated(), k=k)[0] for k in (1, 2, 4, 16)}
    assert grads[1] < EQUIVALENT
    assert grads[16] > grads[4] > grads[2] > NOT_EQUIVALENT


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


def test_two_dropout_layers_agree_on_average():
    torch.manual_seed(0)
    model = dropout_twice()
    x, y = BATCHES[0]

    def grad(seed, k):
        model.zero_grad()
        torch.manual_seed(seed)
        for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
            (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    seeds = 128
    gf = torch.stack([grad(s, 1) for s in range(seeds)])
    ga = torch.stack([grad(s, K) for s in range(seeds)])
    one = float((ga[0] - gf[0]).abs().max())
    averaged = float((ga.mean(0) - gf.mean(0)).abs().max())
    assert one > NOT_EQUIVALENT and averaged < 0.25 * one


def test_clipping_acts_on_the_full_batch_gradient():
    torch.manual_seed(0)
    model = plain()
    mse_loss(model(BATCHES[0][0]), BATCHES[0][1]).backward()
    assert float(nn.utils.clip_grad_norm_(model.parameters(), float("inf"))) > MAX_NORM


def partial_sum_norms(batch, k=K):
    """The norm of .grad after each micro-batch's backward, on a fresh plain model."""
    torch.manual_seed(0)
    model = plain()
    norms = []
    for xb, yb in zip(batch[0].tensor_split(k), batch[1].tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(batch[0])).backward()
        norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
    return norms


def test_setup_c_clipping_bites_from_the_first_micro_batch():
    # exercise 1's set-up C is "not equivalent" because clipping acts on the partial sums: with max_norm 0.2
    # already the first micro-batch's share of the gradient is above it
    assert partial_sum_norms(BATCHES[0])[0] > MAX_NORM


def test_clipping_inside_the_loop_is_exact_when_no_partial_sum_reaches_max_norm():
    loose = 10.0
    assert max(n for batch in BATCHES for n in partial_sum_norms(batch)) < loose / 4  # far from it at the start
    full, inside = make_full(clip=True, max_norm=loose), make_accumulated(clip="inside", max_norm=loose)
    assert measure(plain, "SGD", full, inside)[1] < EQUIVALENT
    # and it never acted: the same as no clipping at all
    assert measure(plain, "SGD", make_full(), inside)[1] < EQUIVALENT
    # while at a max_norm the partial sums pass it is not equivalent (the summary row)
    tight = make_accumulated(clip="inside", max_norm=MAX_NORM)
    assert measure(plain, "SGD", make_full(clip=True), tight)[1] > NOT_EQUIVALENT


@pytest.mark.parametrize("weight_decay, hidden", [(0.0, True), (0.01, False), (0.1, False)])
def test_adam_hides_a_missing_scale_only_without_l2_weight_decay(weight_decay, hidden):
    OPTIMIZERS["Adam, this weight decay"] = lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=weight_decay)
    try:
        diff = measure(plain, "Adam, this weight decay", make_full(), make_accumulated(scaled=False))[1]
    finally:
        del OPTIMIZERS["Adam, this weight decay"]
    assert (diff < NOT_EQUIVALENT) == hidden, diff


def test_adamw_hides_a_missing_scale_whatever_its_weight_decay():
    for weight_decay in (0.01, 0.1, 1.0):
        OPTIMIZERS["AdamW, this weight decay"] = lambda p, wd=weight_decay: torch.optim.AdamW(
            p, lr=0.01, weight_decay=wd
        )
        try:
            diff = measure(plain, "AdamW, this weight decay", make_full(), make_accumulated(scaled=False))[1]
        finally:
            del OPTIMIZERS["AdamW, this weight decay"]
        assert EQUIVALENT < diff < NOT_EQUIVALENT, (weight_decay, diff)


def bf16_sum_error(k, dtype, n=1024, seed=1):
    """Relative error of the k-micro-batch gradient (autocast bfloat16, .grad in `dtype`) against float64."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, D, generator=gen), torch.randn(n, 1, generator=gen)
    torch.manual_seed(0)
    start = plain()
    exact = copy.deepcopy(start).double()
    mse_loss(exact(x.double()), y.double()).backward()
    model = copy.deepcopy(start).to(dtype)
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = mse_loss(model(xb.to(dtype)), yb.to(dtype)) * len(xb) / n
        loss.backward()
    got = torch.cat([p.grad.double().flatten() for p in model.parameters()])
    want = torch.cat([p.grad.flatten() for p in exact.parameters()])
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("seed", [1, 2])
def test_a_bfloat16_grad_adds_error_with_k_a_float32_grad_does_not(seed):
    f32 = [bf16_sum_error(k, torch.float32, seed=seed) for k in (1, 256)]
    b16 = [bf16_sum_error(k, torch.bfloat16, seed=seed) for k in (1, 256)]
    assert f32[1] < 1.5 * f32[0]
    assert b16[1] > 2.5 * b16[0] and b16[1] > 2.5 * f32[1]


def test_penalty_in_every_micro_loss_is_the_full_batch_with_k_times_lambda():
    _, param_diff, _, _ = measure(plain, "SGD", make_full(lam=K * LAM), make_accumulated(lam=LAM, lam_every=True))
    assert param_diff < EQUIVALENT


def test_bf16_accumulation_moves_results_about_as_far_as_bf16_itself():
    bf16 = torch.bfloat16
    g_acc, p_acc, _, _ = measure(plain, "SGD", make_full(autocast=bf16), make_accumulated(autocast=bf16))
    to_bf16 = make_full(autocast=torch.bfloat16)
    g_fmt, p_fmt, _, _ = measure(plain, "SGD", make_full(), lambda m, o, x, y, k: to_bf16(m, o, x, y))
    assert g_acc < 5 * g_fmt and p_acc < 5 * p_fmt


def test_fp16_fresh_scaler_skips_a_full_batch_step_the_accumulated_run_takes():
    fp16 = torch.float16
    sf, sa = scalers(2.0**16)
    measure(plain, "SGD", make_full(autocast=fp16, scaler=sf), make_accumulated(autocast=fp16, scaler=sa))
    assert sf.get_scale() < sa.get_scale()
    sf, sa = scalers(2.0**10)
    measure(plain, "SGD", make_full(autocast=fp16, scaler=sf), make_accumulated(autocast=fp16, scaler=sa))
    assert sf.get_scale() == sa.get_scale() == 2.0**10


def test_fp16_the_skipped_step_is_a_float16_sum_over_48_samples_that_overflows():
    """Notebook 05's explanation: at update 2 the last bias's scaled float16 gradient over 48 samples is inf,
    each 12-sample piece is finite, and only their float32 sum exceeds float16's range."""
    torch.manual_seed(0)
    model = plain()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scale, fp16_max = 2.0**16, torch.finfo(torch.float16).max

    def bias_grad(x, y, share):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = mse_loss(model(x), y) * share
        (loss * scale).backward()
        return model[4].bias.grad.item()

    x, y = BATCHES[0]
    assert abs(bias_grad(x, y, 1.0)) < fp16_max  # update 1: no overflow, so it steps and the scale stays
    with torch.no_grad():
        for p in model.parameters():
            p.grad /= scale  # what GradScaler.step does before opt.step()
    opt.step()
    x, y = BATCHES[1]
    whole = bias_grad(x, y, 1.0)
    pieces = [bias_grad(xb, yb, len(xb) / len(x)) for xb, yb in zip(x.tensor_split(K), y.tensor_split(K))]
    assert whole == float("inf") or whole == float("-inf")
    assert all(abs(p) < fp16_max for p in pieces) and abs(sum(pieces)) > fp16_max


def test_audit_names_batchnorm_and_dropout():
    x, y = BATCHES[0]
    torch.manual_seed(0)
    suspect = nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Linear(H, 1))
    report = check_accumulation(suspect, nn.MSELoss(), x, y, k=K)
    assert not report.agree and report.causes[0].startswith("BatchNorm")
    assert any("num_batches_tracked" in b for b in report.buffers_differ)
    torch.manual_seed(0)
    assert check_accumulation(layernorm(), nn.MSELoss(), x, y, k=K).agree
    torch.manual_seed(0)
    report = check_accumulation(dropout_twice(), nn.MSELoss(), x, y, k=K)
    assert not report.agree and report.causes[0].startswith("dropout")


# ------------------------------------------------------------------ exercise 1's answer key: every set-up measured


def setup_verdict(letter):
    """Measure set-up ``letter`` of ex.SETUPS (k = 4) and return its verdict in the exercise's words."""
    full, acc = make_full(), make_accumulated()
    if letter == "A":
        return verdict(measure(layernorm, "AdamW", full, acc)[1], EQUIVALENT)
    if letter == "B":
        return verdict(measure(batchnorm, "SGD", full, acc)[1], EQUIVALENT)
    if letter == "C":
        return verdict(measure(plain, "SGD", make_full(clip=True), make_accumulated(clip="inside"))[1], EQUIVALENT)
    if letter == "D":

        def summed(model, opt, x, y, k):
            opt.zero_grad()
            for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
                (mse_loss(model(xb), yb, reduction="sum") / len(x)).backward()
            opt.step()

        return verdict(measure(plain, "SGD", full, summed, k=5)[1], EQUIVALENT)  # unequal micro-batches too
    if letter == "E":
        single = verdict(measure(dropout_twice, "Adam", full, acc)[1], EQUIVALENT)
        return "only in distribution" if single == "NOT equivalent" else single
    if letter == "F":
        wd = lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)  # noqa: E731
        OPTIMIZERS["SGD weight decay"] = wd
        try:
            return verdict(measure(plain, "SGD weight decay", full, acc)[1], EQUIVALENT)
        finally:
            del OPTIMIZERS["SGD weight decay"]
    raise KeyError(letter)


WORDS = {"equivalent": "equivalent", "NOT equivalent": "not equivalent", "only in distribution": "only in distribution"}


@pytest.mark.parametrize("letter", list(ex.SETUPS))
def test_exercise_1_answer_key_matches_measurement(letter):
    assert WORDS[setup_verdict(letter)] == ex.ANSWERS[letter]
