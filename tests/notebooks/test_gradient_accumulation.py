"""Notebook 04 (gradient accumulation): the facts its prose relies on, and each general claim tried on the
boundary case that narrows it.

The facts are computed here independently of the notebook (the loops and models are re-written in this file).
"""

import copy
import json
from pathlib import Path

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import autograd_lab as lab
from autograd_lab.exercises import gradient_accumulation as ex

matplotlib.use("Agg")


# --------------------------------------------------------------------------- the seed's worked example


def _seed_model():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _seed_loss(model, x):
    return ((2 * x - model(x.unsqueeze(-1)).squeeze(-1)) ** 2).mean()


def test_seed_example_grads_minus_16_then_minus_20_and_weight_1_2():
    model, opt = _seed_model()
    batches = [torch.tensor([4.0]), torch.tensor([2.0])]
    seen = []
    for x in batches:
        (_seed_loss(model, x) / len(batches)).backward()
        seen.append(model.weight.grad.item())
        assert model.weight.item() == 1.0  # backward does not move the weight
    opt.step()
    assert seen == [-16.0, -20.0]
    assert model.weight.item() == pytest.approx(1.2)


def test_seed_example_full_batch_gives_the_same_grad_and_step():
    model, opt = _seed_model()
    _seed_loss(model, torch.tensor([4.0, 2.0])).backward()
    assert model.weight.grad.item() == -20.0
    opt.step()
    assert model.weight.item() == pytest.approx(1.2)


# --------------------------------------------------------------------------- equivalence with a real optimizer


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    lambda p: torch.optim.Adam(p, lr=0.01),
], ids=["sgd-momentum", "adam"])
def test_mlp_full_batch_and_accumulated_training_end_equal(make, device):
    torch.manual_seed(0)
    X, Y = torch.randn(64, 8).to(device), torch.randn(64, 1).to(device)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    a, b = copy.deepcopy(mlp), copy.deepcopy(mlp)
    oa, ob = make(a.parameters()), make(b.parameters())
    for _ in range(5):
        F.mse_loss(a(X), Y).backward()
        oa.step()
        oa.zero_grad()
        for x, y in zip(X.chunk(4), Y.chunk(4)):
            (F.mse_loss(b(x), y) / 4).backward()
        ob.step()
        ob.zero_grad()
    assert max((p - q).abs().max() for p, q in zip(a.parameters(), mlp.parameters())) > 1e-2  # it did train
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
        assert (p - q).abs().max() < 1e-6  # "agree to 1e-6" is an absolute 1e-6 (the notebook passes rtol=0)


def _centred_linear(seed):
    """A linear model on centred inputs and targets: its 16 biases have an exact gradient of 0 at zero."""
    torch.manual_seed(seed)
    X = torch.randn(64, 8)
    X -= X.mean(0)
    Y = X @ torch.randn(8, 16)
    model = nn.Linear(8, 16)
    nn.init.zeros_(model.bias)
    return model, X, Y


def _one_step(model, make, X, Y, k):
    model = copy.deepcopy(model)
    opt = make(model.parameters())
    for x, y in zip(X.chunk(k), Y.chunk(k)):
        (F.mse_loss(model(x), y) / k).backward()
    grad = model.bias.grad.clone()
    opt.step()
    return model, grad


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("seed", range(5))
def test_equal_gradients_give_equal_sgd_steps_but_adam_moves_zero_gradient_biases_by_a_fraction_of_lr(seed, k):
    """The boundary of "full batch and accumulation agree for SGD and Adam alike": with Adam a rounding-level
    gradient becomes an lr-sized step, so parameters whose exact gradient is 0 part. Why the promise says "the
    full-batch gradient, the same up to float rounding", not "exactly the full-batch step"."""
    model, X, Y = _centred_linear(seed)
    lr = 0.01
    (sgd_full, g_full), (sgd_acc, g_acc) = (_one_step(model, lambda p: torch.optim.SGD(p, lr=lr), X, Y, kk)
                                            for kk in (1, k))
    assert g_full.abs().max() < 1e-6 and g_acc.abs().max() < 1e-6  # rounding of an exact 0
    if seed == 0 and k == 4:  # the notebook's case: rounding "near eps in size", as its printed magnitudes say
        assert 1e-9 < g_full.abs().max() < 1e-7 and 1e-9 < g_acc.abs().max() < 1e-7
    assert (sgd_full.bias - sgd_acc.bias).abs().max() < 1e-9
    (adam_full, _), (adam_acc, _) = (_one_step(model, lambda p: torch.optim.Adam(p, lr=lr), X, Y, kk)
                                     for kk in (1, k))
    assert (adam_full.weight - adam_acc.weight).abs().max() < 1e-6  # gradients well above eps: equal steps
    assert (adam_full.bias - adam_acc.bias).abs().max() > lr / 10


def test_adams_first_step_is_the_formula_in_exact_arithmetic_and_only_to_rounding_in_float32():
    """"In exact arithmetic" its running averages are g and g² at the first step: in float32 the step differs from
    lr * g / (|g| + eps) in the last bits for many entries (about half), never by more than float32 rounding of lr."""
    g = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    lr = 0.01
    p = torch.zeros(10_000, requires_grad=True)
    p.grad = g.clone()
    torch.optim.Adam([p], lr=lr).step()
    diff = (-p.detach() - lr * g / (g.abs() + 1e-8)).abs()
    assert 0.2 < (diff == 0).float().mean() < 0.8  # bit for bit for some entries, not for all
    assert diff.max() < 4 * torch.finfo(torch.float32).eps * lr
    q = torch.zeros(10_000, dtype=torch.float64, requires_grad=True)
    q.grad = g.double()
    torch.optim.Adam([q], lr=lr).step()
    torch.testing.assert_close(-q.detach(), lr * g.double() / (g.double().abs() + 1e-8), rtol=1e-12, atol=0)


@pytest.mark.parametrize("g", [1e-3, 1e-7, 1e-8, 1e-9, 0.0])
def test_adams_first_step_is_lr_times_g_over_abs_g_plus_eps(g):
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    p.grad = torch.full_like(p, g)
    torch.optim.Adam([p], lr=1.0, eps=1e-8).step()
    assert -p.item() == pytest.approx(g / (abs(g) + 1e-8), rel=1e-9, abs=1e-15)


# --------------------------------------------------------------------------- memory


def test_saved_for_backward_memory_falls_exactly_as_one_over_k(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    X, Y = torch.randn(256, 16).to(device), torch.randn(256, 4).to(device)

    def peak(k):
        best = 0
        for x, y in zip(X.chunk(k), Y.chunk(k)):
            with lab.SavedTensors(exclude=[x, y, *model.parameters()]) as saved:
                loss = F.mse_loss(model(x), y) / k
            loss.backward()
            best = max(best, saved.bytes)
        return best

    peaks = {k: peak(k) for k in (1, 2, 4, 8, 16)}
    assert peaks[1] > 0
    for k, b in peaks.items():
        assert peaks[1] == k * b
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    assert grads == sum(p.numel() * p.element_size() for p in model.parameters())  # .grad does not shrink


def test_on_a_gpu_the_allocator_peak_of_the_notebooks_accumulation_falls_with_k_and_holds_more_than_it_saved(gpu):
    """04's line for a GPU (the CUDA allocator's peak beside the bytes saved), on its model and batch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(gpu)
    X, Y = torch.randn(512, 64, device=gpu), torch.randn(512, 10, device=gpu)
    saved = {}

    def accumulate(k):
        for x, y in zip(X.chunk(k), Y.chunk(k)):
            with lab.SavedTensors(exclude=[x, y, *model.parameters()]) as s:
                loss = F.mse_loss(model(x), y) / k
            loss.backward()
            saved[k] = max(saved.get(k, 0), s.bytes)
        model.zero_grad()

    accumulate(1)  # the libraries' workspaces, allocated once, before the measurements
    peaks = {k: lab.allocator_peak(lambda k=k: accumulate(k), gpu) for k in (1, 16)}
    assert peaks[16] < peaks[1] and all(peaks[k] > saved[k] for k in peaks), (peaks, saved)


def test_with_adam_the_total_for_the_notebooks_model_does_not_even_halve_at_k_16(device):
    """Notebook 04's model (64-256-256-10, batch 512): parameters + .grad + Adam state + saved tensors."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = model.to(device)
    X, Y = torch.randn(512, 64).to(device), torch.randn(512, 10).to(device)

    def saved(k):  # every micro-batch of an even split keeps the same bytes: measure the first one
        x, y = X[: len(X) // k], Y[: len(Y) // k]
        with lab.SavedTensors(exclude=[x, y, *model.parameters()]) as s:
            loss = F.mse_loss(model(x), y)
        loss.backward()
        return s.bytes

    peaks = {k: saved(k) for k in (1, 16)}
    opt = torch.optim.Adam(model.parameters())
    opt.step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if t.dim() > 0)
    assert state == 2 * params
    fixed = params + params + state  # parameters, .grad, Adam's two moments
    assert peaks[1] == 16 * peaks[16]
    assert fixed + peaks[1] < 2 * (fixed + peaks[16])


# --------------------------------------------------------------------------- the recipes


def _steps(condition, n, k):
    """Which micro-batches each step used, and which were never stepped, for a step condition."""
    groups, pending = [], []
    for i in range(n):
        pending.append(i)
        if condition(i, n, k):
            groups.append(pending)
            pending = []
    return groups, pending


SEED = lambda i, n, k: (i - 1) % k == 0  # noqa: E731
PLUS_ONE = lambda i, n, k: (i + 1) % k == 0  # noqa: E731
CORRECT = lambda i, n, k: (i + 1) % k == 0 or i + 1 == n  # noqa: E731


def test_seed_recipe_steps_at_1_11_21_and_leaves_22_to_24():
    groups, left = _steps(SEED, 25, 10)
    assert [g[-1] for g in groups] == [1, 11, 21]
    assert [len(g) for g in groups] == [2, 10, 10]
    assert left == [22, 23, 24]


def test_the_tail_left_in_grad_moves_the_next_epochs_first_step_by_lr_times_it():
    """Section 1's "the next epoch's first backward() adds to it": epoch 2's first step with epoch 1's tail in .grad,
    against the same from empty .grad, moves by -lr times the tail."""
    batches = _batches(25)
    model = _train(SEED, batches, 10)
    left, clean = model.weight.grad.clone(), copy.deepcopy(model)
    clean.zero_grad()
    assert left.abs().sum() > 0
    for m in (model, clean):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i, (x, y) in enumerate(batches[:2]):
            (F.mse_loss(m(x), y) / 10).backward()
            if SEED(i, 25, 10):
                opt.step()
                opt.zero_grad()
    torch.testing.assert_close(model.weight - clean.weight, -0.1 * left)
    assert (model.weight - clean.weight).abs().max() > 1e-3


def test_one_micro_batch_of_the_notebooks_model_saves_one_kth_including_its_loss():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    X, Y = torch.randn(512, 64), torch.randn(512, 10)
    saved = {}
    for k in (1, 8):
        with lab.SavedTensors(exclude=[X, Y, *model.parameters()]) as s:
            F.mse_loss(model(X[: 512 // k]), Y[: 512 // k])
        saved[k] = s.bytes
    assert saved[1] == 8 * saved[8] == 8 * 64 * (256 + 256 + 10) * 4  # two ReLU outputs and the output, float32


def test_plus_one_recipe_drops_the_tail_and_the_correct_one_steps_it():
    groups, left = _steps(PLUS_ONE, 25, 10)
    assert [g[-1] for g in groups] == [9, 19] and left == [20, 21, 22, 23, 24]
    groups, left = _steps(CORRECT, 25, 10)
    assert [g[-1] for g in groups] == [9, 19, 24] and left == []


def _held_at_each_step(condition, n, k, epochs):
    """Train-free: how many micro-batches' gradients .grad holds at each step, over epochs with no reset between."""
    held, counts = 0, []
    for _ in range(epochs):
        groups, left = _steps(condition, n, k)
        counts += [len(groups[0]) + held] + [len(g) for g in groups[1:]] if groups else []
        held = len(left) if groups else held + n
    return counts


def test_what_each_step_of_the_copied_loop_holds_over_two_epochs_for_the_exercise():
    """Exercise 2: the copied loop's steps over two epochs; the second epoch's first step adds the first's tail."""
    n, k = ex.STEP_COUNT_TASK["n"], ex.STEP_COUNT_TASK["k"]
    counts = _held_at_each_step(SEED, n, k, 2)
    assert counts == [2, 8, 8, 8, 8, 9, 8, 8, 8, 8]
    assert counts[5] == 2 + (n - 2) % k  # the printed formula gives the tail; the leak into the next epoch adds it
    assert ex.check_step_counts(counts).passed
    batches = _batches(n)  # the same by training: .grad at each step, against each micro-batch's own gradient
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the parameters stay, so each gradient is known alone
    alone = []
    for x, y in batches:
        model.zero_grad()
        (F.mse_loss(model(x), y) / k).backward()
        alone.append(model.weight.grad.clone())
    model.zero_grad()
    seen, held = [], []
    for _ in range(2):
        for i, (x, y) in enumerate(batches):
            (F.mse_loss(model(x), y) / k).backward()
            held.append(i)
            if SEED(i, n, k):
                torch.testing.assert_close(model.weight.grad, sum(alone[j] for j in held))
                seen.append(len(held))
                held = []
                opt.step()
                opt.zero_grad()
    assert seen == counts


def _batches(n, size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, 1, generator=g)
    out = []
    for _ in range(n):
        x = torch.randn(size, 3, generator=g)
        out.append((x, x @ w + 0.1 * torch.randn(size, 1, generator=g)))
    return out


def _train(condition, batches, k, divide_by_group=False):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = len(batches)
    for i, (x, y) in enumerate(batches):
        scale = min(k, n - (i // k) * k) if divide_by_group else k
        (F.mse_loss(model(x), y) / scale).backward()
        if condition(i, n, k):
            opt.step()
            opt.zero_grad()
    return model


def _full_batch(batches, k):
    return _train_with(lambda params: torch.optim.SGD(params, lr=0.1), batches, k, copied=False)


def test_seed_recipe_leaves_the_tail_gradient_in_grad():
    batches = _batches(25)
    model = _train(SEED, batches, 10)
    probe = copy.deepcopy(model)
    probe.zero_grad()
    for x, y in batches[22:]:
        (F.mse_loss(probe(x), y) / 10).backward()
    torch.testing.assert_close(model.weight.grad, probe.weight.grad)
    assert model.weight.grad.abs().sum() > 0


def test_only_the_correct_recipe_matches_full_batch_training():
    batches = _batches(25)
    ref = _full_batch(batches, 10)

    def err(m):
        return max((p - q).abs().max().item() for p, q in zip(m.parameters(), ref.parameters()))

    assert err(_train(CORRECT, batches, 10, divide_by_group=True)) < 1e-6
    assert err(_train(SEED, batches, 10)) > 1e-3
    assert err(_train(PLUS_ONE, batches, 10)) > 1e-3
    assert err(_train(CORRECT, batches, 10, divide_by_group=False)) > 1e-3  # tail divided by k: half weight


# --------------------------------------------------------------------------- scaling


def _split_grads(sizes):
    torch.manual_seed(1)
    X, Y = torch.randn(24, 3), torch.randn(24, 1)
    lin = nn.Linear(3, 1)
    N, k = sum(sizes), len(sizes)

    def grad(loss_of):
        m = copy.deepcopy(lin)
        for x, y in zip(X[:N].split(sizes), Y[:N].split(sizes)):
            loss_of(m, x, y).backward()
        return torch.cat([p.grad.reshape(-1) for p in m.parameters()])

    m = copy.deepcopy(lin)
    F.mse_loss(m(X[:N]), Y[:N]).backward()
    full = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    by_k = grad(lambda m, x, y: F.mse_loss(m(x), y) / k)
    by_share = grad(lambda m, x, y: F.mse_loss(m(x), y) * len(x) / N)
    by_sum = grad(lambda m, x, y: F.mse_loss(m(x), y, reduction="sum") / N)
    return full, by_k, by_share, by_sum


@pytest.mark.parametrize("identical", [True, False], ids=["identical samples", "samples that differ"])
def test_dividing_by_k_is_off_for_an_unequal_split_only_for_samples_that_differ(identical):
    """The boundary of "dividing by k is off for every unequal split": with identical samples every micro-batch
    mean is the same, and any weights that sum to 1 give it; for samples that differ, a 4 + 6 split is off."""
    torch.manual_seed(3)
    lin = nn.Linear(3, 1)
    if identical:
        x, y = torch.randn(1, 3).expand(10, 3), torch.randn(1, 1).expand(10, 1)
    else:
        x, y = torch.randn(10, 3), torch.randn(10, 1)

    def flat(m):
        return torch.cat([p.grad.reshape(-1) for p in m.parameters()])

    full, by_k = copy.deepcopy(lin), copy.deepcopy(lin)
    F.mse_loss(full(x), y).backward()
    for xs, ys in zip(x.split([4, 6]), y.split([4, 6])):
        (F.mse_loss(by_k(xs), ys) / 2).backward()
    error = (flat(by_k) - flat(full)).abs().max()
    assert error < 1e-6 if identical else error > 1e-2


def test_dividing_by_k_is_wrong_for_a_7_3_split_and_both_fixes_are_exact():
    full, by_k, by_share, by_sum = _split_grads([7, 3])
    assert (by_k - full).abs().max() > 0.05
    torch.testing.assert_close(by_share, full)
    torch.testing.assert_close(by_sum, full)
    full, by_k, _, _ = _split_grads([5, 5])
    torch.testing.assert_close(by_k, full)  # equal sizes: / k is right


def _divide_at_step(model, micro_batches, summed_loss, count):
    seen = 0
    for x, y in micro_batches:
        summed_loss(model(x), y).backward()
        seen += count(y)
    for p in model.parameters():
        p.grad /= seen


@pytest.mark.parametrize("sizes", [[7, 3], [1, 9], [2, 3, 5], [4, 4, 4, 1]])
def test_summing_and_dividing_once_at_the_step_needs_no_count_in_advance(sizes):
    """The boundary of "both fixes need N before the loop starts": counting as the micro-batches stream is exact."""
    full, by_k, _, _ = _split_grads(sizes)
    torch.manual_seed(1)
    X, Y = torch.randn(24, 3), torch.randn(24, 1)
    lin = nn.Linear(3, 1)
    N = sum(sizes)
    _divide_at_step(lin, list(zip(X[:N].split(sizes), Y[:N].split(sizes))),
                    lambda out, y: F.mse_loss(out, y, reduction="sum"), len)
    at_step = torch.cat([p.grad.reshape(-1) for p in lin.parameters()])
    assert (at_step - full).abs().max() < 1e-6
    assert (by_k - full).abs().max() > 0.05  # while dividing by k is off for each of these splits


def test_the_equal_size_recipe_is_right_only_for_equal_micro_batches():
    """What the notebook's repaired recipe (divide by the group's size in micro-batches) assumes."""
    def recipe(batches, k):
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        n = len(batches)
        for i, (x, y) in enumerate(batches):
            (F.mse_loss(model(x), y) / min(k, n - (i // k) * k)).backward()
            if CORRECT(i, n, k):
                opt.step()
                opt.zero_grad()
        return model

    def err(batches, k):
        ref = _full_batch(batches, k)
        return max((p - q).abs().max().item() for p, q in zip(recipe(batches, k).parameters(), ref.parameters()))

    assert err(_batches(25), 10) < 1e-6
    short_last = _batches(24) + _batches(1, size=1, seed=3)
    assert err(short_last, 10) > 1e-3


def test_token_level_padding_naive_scaling_is_wrong_num_items_in_batch_is_right():
    torch.manual_seed(2)
    vocab, length = 11, 8
    tokens = torch.randint(0, vocab, (2, length))
    labels = torch.randint(0, vocab, (2, length))
    labels[0, 2:] = -100
    lm = nn.Sequential(nn.Embedding(vocab, 16), nn.Linear(16, vocab))
    assert (labels != -100).sum(dim=1).tolist() == [2, 8]

    def ce(logits, lab_, reduction="mean"):
        return F.cross_entropy(logits.flatten(0, 1), lab_.flatten(), ignore_index=-100, reduction=reduction)

    def grad(batches, loss_of):
        m = copy.deepcopy(lm)
        for t, lab_ in batches:
            loss_of(m(t), lab_).backward()
        return torch.cat([p.grad.reshape(-1) for p in m.parameters()])

    full = grad([(tokens, labels)], ce)
    micro = list(zip(tokens.split(1), labels.split(1)))
    num_items = (labels != -100).sum()
    naive = grad(micro, lambda o, lab_: ce(o, lab_) / 2)
    fixed = grad(micro, lambda o, lab_: ce(o, lab_, reduction="sum") / num_items)
    assert ((naive - full).norm() / full.norm()).item() > 0.1
    torch.testing.assert_close(fixed, full)
    streamed = copy.deepcopy(lm)  # the same without counting first: real tokens counted as they come
    _divide_at_step(streamed, micro, lambda o, lab_: ce(o, lab_, reduction="sum"), lambda lab_: (lab_ != -100).sum())
    torch.testing.assert_close(torch.cat([p.grad.reshape(-1) for p in streamed.parameters()]), full)


# --------------------------------------------------------------------------- boundary: "saves 1/k of the saved tensors"


class LowRankMerged(nn.Module):
    """A frozen weight plus a trainable low-rank update, merged in every forward pass."""

    def __init__(self, n_in, n_out, rank=2):
        super().__init__()
        self.base = nn.Parameter(torch.randn(n_out, n_in), requires_grad=False)
        self.down = nn.Parameter(torch.randn(rank, n_in))
        self.up = nn.Parameter(torch.randn(n_out, rank))

    def forward(self, x):
        return x @ (self.base + self.up @ self.down).T


def peak_saved(model, x, k):
    peak = 0
    for xb in x.chunk(k):
        with lab.SavedTensors(exclude=[xb, *model.parameters()]) as saved:
            loss = model(xb).square().mean() / k
        loss.backward()
        peak = max(peak, saved.bytes)
    return peak


def test_plain_layers_save_exactly_one_over_k(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 4)).to(device)
    x = torch.randn(256, 32).to(device)
    full = peak_saved(model, x, 1)
    assert all(full == k * peak_saved(model, x, k) for k in (2, 4, 8, 16))


def test_a_merged_low_rank_weight_is_saved_again_by_every_micro_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), LowRankMerged(128, 128), nn.Tanh(), LowRankMerged(128, 4))
    x = torch.randn(256, 32)
    peaks = {k: peak_saved(model, x, k) for k in (1, 2, 4, 8, 16)}
    merged = (128 * 128 + 4 * 128) * 4  # the merged weights of both low-rank layers, float32
    activations = peaks[1] - merged
    for k, peak in peaks.items():
        assert peak == activations // k + merged, k  # the activations' 1/k plus the weights, whatever k
    assert peaks[1] / peaks[16] < 16 / 2


def test_weight_norm_also_keeps_a_part_that_does_not_shrink():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), weight_norm(nn.Linear(128, 128)), nn.Tanh(), nn.Linear(128, 4))
    x = torch.randn(256, 32)
    ratio = peak_saved(model, x, 1) / peak_saved(model, x, 16)
    assert 1 < ratio < 16 / 1.5


# --------------------------------------------------------------------------- the copied recipe's boundary


@pytest.mark.parametrize("k", range(1, 9))
def test_copied_recipe_is_full_batch_training_exactly_where_k_is_at_most_2_and_it_leaves_no_tail(k):
    """The boundary the notebook's Try it asks for: (i - 1) % k == (i + 1) % k for k <= 2, so there the copied
    recipe is the usual condition, and without a tail it is full-batch training; from k = 3 on it never is."""
    for n in range(1, 31):
        batches = _batches(n)
        ref = _full_batch(batches, k)
        copied = _train(SEED, batches, k)
        same = all(torch.allclose(p, q, rtol=0, atol=1e-6) for p, q in zip(copied.parameters(), ref.parameters()))
        assert same == (k <= 2 and (n - 2) % k == 0), (n, k)
        if k <= 2:
            assert all(SEED(i, n, k) == PLUS_ONE(i, n, k) for i in range(n))


def test_copied_recipe_leaves_n_minus_2_mod_k_micro_batches_for_n_of_at_least_2():
    for k in range(1, 13):
        for n in range(2, 41):
            assert len(_steps(SEED, n, k)[1]) == (n - 2) % k, (n, k)
    assert len(_steps(SEED, 1, 3)[1]) == 1 != (1 - 2) % 3  # why the notebook says "for n >= 2"


def test_no_tail_does_not_make_the_copied_recipe_right():
    """The twin cell's case: n = 12, k = 10 leaves nothing in .grad, and the parameters still differ."""
    groups, left = _steps(SEED, 12, 10)
    assert left == [] and [len(g) for g in groups] == [2, 10]
    batches = _batches(12)
    ref, copied = _full_batch(batches, 10), _train(SEED, batches, 10)
    assert max((p - q).abs().max().item() for p, q in zip(copied.parameters(), ref.parameters())) > 1e-3


def test_the_repaired_recipe_is_full_batch_training_on_every_n_and_k_of_the_grid():
    for k in range(1, 6):
        for n in range(2, 15):
            batches = _batches(n)
            ref, fixed = _full_batch(batches, k), _train(CORRECT, batches, k, divide_by_group=True)
            assert all(torch.allclose(p, q, rtol=0, atol=1e-6) for p, q in zip(fixed.parameters(), ref.parameters()))


# --------------------------------------------------------------------------- the notebook: order and wording

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_gradient_accumulation.ipynb"


def _cells():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _outputs(cell):
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for o in cell.get("outputs", []))


def _text(cell):
    """A cell's source and its text outputs."""
    return "".join(cell["source"]) + "\n" + _outputs(cell)


def test_the_boundary_predict_comes_before_anything_that_answers_it():
    """Nothing above the Try it's Predict names the boundary (k <= 2, (n - 2) % k) or a case of it, and the widget
    that helps answer it comes right after it."""
    cells = _cells()
    ids = [c["id"] for c in cells]
    ask = ids.index("try-md")
    assert "Predict" in "".join(cells[ask]["source"])
    before = "\n".join(_text(c) for c in cells[:ask])
    for answer in ("k <= 2", "k < 3", "n - 2", "does no harm", "same parameters as full-batch training: True"):
        assert answer not in before, answer
    assert ids[ask + 1] == "widget-timeline"
    widget = cells[ask + 1]
    assert widget["metadata"]["autograd_lab"]["set"] == {"n": 12, "k": 10, "recipe": "copied (i - 1)"}
    assert ids.index("boundary") > ask + 1


def test_no_exactly_the_full_batch_step_and_exercise_2_at_an_n_never_printed():
    cells = _cells()
    text = "\n".join(_text(c) for c in cells)
    assert "exactly the full-batch step" not in text
    assert "takes exactly" not in text
    n = ex.STEP_COUNT_TASK["n"]
    code = "\n".join(_text(c) for c in cells if c["cell_type"] == "code" and c["id"] != "ex2")
    assert f"n = {n}" not in code and f"n={n}" not in code  # never printed, never an argument
    widget = next(c for c in cells if c["id"] == "widget-timeline")
    assert "n=(1, 40)" in "".join(widget["source"]) and n > 40  # the widget cannot show it either
    ex2 = next(c for c in cells if c["id"] == "ex2")
    assert "e.g." not in "".join(ex2["source"]) and "e.g." not in _text(ex2)


def _core_and_optional():
    """The cells of the core path and those of "Going deeper", as the time count splits them."""
    cells = _cells()
    at = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Going deeper"))
    return cells[:at], cells[at:]


def test_the_core_keeps_the_boundary_predict_the_widget_the_grid_and_both_exercises():
    """What moved into "Going deeper" to fit the core in 50 minutes is what the promise does not need: the
    copied recipe's boundary (its Predict, the widget, the grid) and both exercises stay on the core path."""
    core, optional = _core_and_optional()
    core_ids = {c["id"] for c in core}
    assert {"try-md", "widget-timeline", "twin-timeline", "boundary", "boundary-end-md",
            "ex1", "ex1-reveal", "ex2", "ex2-reveal"} <= core_ids
    assert {"seed-md", "seed-loop", "seed-full"} <= {c["id"] for c in optional}  # the smallest case, by hand
    assert "Predict" in "".join(next(c for c in optional if c["id"] == "seed-md")["source"])


def test_each_exercise_prompt_says_what_its_check_runs():
    """Exercise 1's prompt counts the check's problems, lists and streams, and epochs as the check has them;
    exercise 2's names the n and k the check counts at."""
    cells = {c["id"]: "".join(c["source"]) for c in _cells()}
    words = {1: "one", 2: "two", 3: "three", 9: "nine", 12: "twelve"}
    streams = sum(stream for _, _, stream in ex._SCENARIOS)
    prompt = " ".join(cells["ex1-md"].split())
    assert f"on {words[len(ex._SCENARIOS)]} random problems" in prompt
    assert f"{words[len(ex._SCENARIOS) - streams]} handed as lists, then {words[streams]} as streams" in prompt
    assert f"each for {words[ex._EPOCHS]} epochs" in prompt
    assert all(not stream for _, _, stream in ex._SCENARIOS[:len(ex._SCENARIOS) - streams])  # lists first
    n, k = ex.STEP_COUNT_TASK["n"], ex.STEP_COUNT_TASK["k"]
    assert f"`n = {n}`, `k = {k}`" in " ".join(cells["ex2-md"].split())


def _cell(cell_id):
    return next(c for c in _cells() if c["id"] == cell_id)


def _run_cell(cell_id, **names):
    """Run one of the notebook's code cells as written, in a namespace with the setup's imports: what it defines."""
    namespace = {"torch": torch, "nn": nn, "F": F, "copy": copy, **names}
    exec("".join(_cell(cell_id)["source"]), namespace)
    return namespace


def test_the_title_line_follows_the_navigation_line_as_in_notebooks_01_to_03():
    lines = [line for line in "".join(_cell("intro")["source"]).splitlines() if line.strip()]
    assert lines[0].startswith("[Course map](00_start_here.ipynb) | Previous:")
    assert lines[1].startswith("# 04 Gradient accumulation: ")


# --------------------------------------------------------------------------- "written out once, for any k"


class _RecordingOptimizer:
    """An optimizer that only notes the gradient each step would use."""

    def __init__(self, params):
        self.params, self.grads = list(params), []

    def step(self):
        self.grads.append(torch.cat([p.grad.reshape(-1) for p in self.params]).clone())

    def zero_grad(self):
        for p in self.params:
            p.grad = None


@pytest.mark.parametrize("k", [1, 3, 4, 5, 9, 10, 63, 64])
def test_the_notebooks_update_uses_the_full_batch_gradient_also_for_k_that_does_not_divide_the_batch(k):
    """Its update() (cell equiv-loops, run as written) cuts the batch into exactly k pieces and weighs each by its
    share: the full-batch gradient for every k, not only for k that divide 64."""
    update = _run_cell("equiv-loops")["update"]
    torch.manual_seed(0)
    X, Y = torch.randn(64, 8), torch.randn(64, 1)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    full, accumulated = _RecordingOptimizer(mlp.parameters()), _RecordingOptimizer(mlp.parameters())
    update(mlp, full, X, Y, 1)
    update(mlp, accumulated, X, Y, k)
    assert len(X.tensor_split(k)) == k
    assert (accumulated.grads[0] - full.grads[0]).abs().max() < 1e-6


def test_chunk_and_one_over_k_are_what_the_update_must_not_do_for_k_that_does_not_divide_the_batch():
    """The mistake the update() of "for any k" once had: X.chunk(9) gives 8 pieces, and / k weighs them wrongly."""
    torch.manual_seed(0)
    X, Y = torch.randn(64, 8), torch.randn(64, 1)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    assert len(X.chunk(9)) == 8 and [len(x) for x in X.chunk(3)] == [22, 22, 20]

    def grad(k):
        model = copy.deepcopy(mlp)
        for x, y in zip(X.chunk(k), Y.chunk(k)):
            (F.mse_loss(model(x), y) / k).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    assert (grad(4) - grad(1)).abs().max() < 1e-6
    assert all((grad(k) - grad(1)).abs().max() > 1e-3 for k in (3, 5, 9, 10))
    source = "".join(_cell("equiv-loops")["source"])
    assert "chunk(" not in source and "/ k" not in source


@pytest.mark.parametrize("name, make", [
    ("SGD", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3)),
    ("Adam", lambda p: torch.optim.Adam(p, lr=0.01)),
])
def test_five_updates_in_5_unequal_micro_batches_end_where_the_full_batch_does(name, make):
    """The notebook's second case of "for any k": k = 5 cuts 64 samples into 13, 13, 13, 13, 12."""
    ns = _run_cell("equiv-loops")
    torch.manual_seed(0)
    X, Y = torch.randn(64, 8), torch.randn(64, 1)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    assert [len(x) for x in X.tensor_split(5)] == [13, 13, 13, 13, 12]
    full, five = (ns["trained"](mlp, make, X, Y, k, updates=5) for k in (1, 5))
    assert max((p - q).abs().max().item() for p, q in zip(full.parameters(), five.parameters())) < 1e-6


# --------------------------------------------------------------------------- "with SGD it never is"; Adam


def test_adams_first_step_hides_a_one_over_k_scale_of_the_gradient_and_sgds_does_not():
    """A first update scaled by 2 / k (the copied recipe's 2 micro-batches, each divided by k) against the mean: the
    same Adam step for every k, an SGD step 2 / k as long."""
    g = torch.randn(4, generator=torch.Generator().manual_seed(0))
    adam, sgd = (lambda p: torch.optim.Adam(p, lr=0.01)), (lambda p: torch.optim.SGD(p, lr=0.1))
    for k in range(3, 13):
        for make, same in ((adam, True), (sgd, False)):
            steps = []
            for scale in (1.0, 2 / k):
                p = torch.zeros(4, requires_grad=True)
                p.grad = g * scale
                make([p]).step()
                steps.append(p.detach().clone())
            assert torch.allclose(steps[0], steps[1], rtol=0, atol=1e-6) == same, (k, same)


def _train_with(make, batches, k, copied):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = make(model.parameters())
    if copied:
        for i, (x, y) in enumerate(batches):
            (F.mse_loss(model(x), y) / k).backward()
            if SEED(i, len(batches), k):
                opt.step()
                opt.zero_grad()
    else:
        for s in range(0, len(batches), k):
            group = batches[s:s + k]
            F.mse_loss(model(torch.cat([x for x, _ in group])), torch.cat([y for _, y in group])).backward()
            opt.step()
            opt.zero_grad()
    return model


def test_from_k_3_the_copied_recipe_is_never_full_batch_training_with_sgd_but_can_be_with_adam():
    """The boundary of "so with SGD it never is": at n = 2 its only update is micro-batches 0 and 1, the full
    batch's too, scaled 2 / k: SGD moves 2 / k as far, Adam the same."""
    sgd, adam = (lambda p: torch.optim.SGD(p, lr=0.1)), (lambda p: torch.optim.Adam(p, lr=0.01))
    batches = _batches(2)
    for k in range(3, 13):
        for make, same in ((sgd, False), (adam, True)):
            copied, ref = _train_with(make, batches, k, True), _train_with(make, batches, k, False)
            agree = all(torch.allclose(p, q, rtol=0, atol=1e-6) for p, q in zip(copied.parameters(), ref.parameters()))
            assert agree == same, (k, same)
    text = " ".join("".join(_cell("boundary-end-md")["source"]).split())
    assert "so with SGD, as here, it never is" in text and "hides the `1/k` of a first update" in text
    assert "torch.optim.SGD(model.parameters()" in "".join(_cell("recipe-data")["source"])  # the comparison uses SGD


def test_the_last_step_rule_is_written_so_that_it_holds_for_k_1_too():
    """"The last i below n with (i - 1) % k == 0" is the copied recipe's last step for every k (i % k == 1 is never
    true for k = 1), and it leaves (n - 2) % k micro-batches."""
    text = "\n".join(_text(c) for c in _cells())
    assert "i % k == 1" not in text and "with `(i - 1) % k == 0`, which" in " ".join(text.split())
    for k in range(1, 13):
        for n in range(2, 41):
            groups, left = _steps(SEED, n, k)
            last = max(i for i in range(n) if (i - 1) % k == 0)
            assert groups[-1][-1] == last and len(left) == n - 1 - last == (n - 2) % k


# --------------------------------------------------------------------------- the Try it: widget first, grid last


def test_the_predict_asks_about_the_twins_case_and_the_grid_comes_after_the_rule_is_explained():
    """The twin cell calls one of the cases the Predict names; the grid that prints the whole answer comes after the
    widget, the twin and the text that explains the rule, not between the widget and the learner's own rule."""
    cells = _cells()
    ids = [c["id"] for c in cells]
    predict = " ".join("".join(_cell("try-md")["source"]).split())
    twin = _cell("widget-timeline")["metadata"]["autograd_lab"]["set"]
    assert f"`n = {twin['n']}`" in predict and f"`k = {twin['k']}`" in predict
    assert f"n={twin['n']}, k={twin['k']}" in "".join(_cell("twin-timeline")["source"])
    assert ids.index("try-md") < ids.index("widget-timeline") < ids.index("twin-timeline") \
        < ids.index("boundary-end-md") < ids.index("boundary-md") < ids.index("boundary")


# --------------------------------------------------------------------------- dividing .grad at the step


class _WithAnUnusedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x):
        return self.used(x)


def test_divide_at_step_leaves_a_parameter_without_grad_alone():
    """Cell split-setup's divide_at_step, run as written, on a model with a layer the loss never reaches (as a frozen
    or unused layer is): no TypeError on its .grad of None, and the used layer gets the full-batch gradient."""
    divide_at_step = _run_cell("split-setup")["divide_at_step"]
    model = _WithAnUnusedLayer()
    full = copy.deepcopy(model)
    x, y = torch.randn(10, 3), torch.randn(10, 1)
    F.mse_loss(full(x), y).backward()
    divide_at_step(model, list(zip(x.split([7, 3]), y.split([7, 3]))),
                   lambda out, y: F.mse_loss(out, y, reduction="sum"), len)
    assert model.unused.weight.grad is None
    torch.testing.assert_close(model.used.weight.grad, full.used.weight.grad)
