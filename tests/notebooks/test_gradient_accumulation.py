"""Notebook 04, gradient accumulation: the facts its prose relies on, its instruments and its exercise checks.

The facts are computed here independently of the notebook (the loops are re-written in this file).
"""

import copy
import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autograd_lab as lab
from autograd_lab.accumulation import SCALES, check_accumulation, draw_timeline, timeline_text
from autograd_lab.exercises import gradient_accumulation as ex

matplotlib.use("Agg")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The models here are tiny: one CPU thread is fastest (as in the notebook); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
def test_mlp_full_batch_and_accumulated_training_end_equal(make):
    torch.manual_seed(0)
    X, Y = torch.randn(64, 8), torch.randn(64, 1)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
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


# --------------------------------------------------------------------------- memory


def test_saved_for_backward_memory_falls_exactly_as_one_over_k():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    X, Y = torch.randn(256, 16), torch.randn(256, 4)

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


def test_with_adam_the_total_for_the_notebooks_model_does_not_even_halve_at_k_16():
    """Notebook 04's model (64-256-256-10, batch 512): parameters + .grad + Adam state + saved tensors."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    X, Y = torch.randn(512, 64), torch.randn(512, 10)

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


def test_plus_one_recipe_drops_the_tail_and_the_correct_one_steps_it():
    groups, left = _steps(PLUS_ONE, 25, 10)
    assert [g[-1] for g in groups] == [9, 19] and left == [20, 21, 22, 23, 24]
    groups, left = _steps(CORRECT, 25, 10)
    assert [g[-1] for g in groups] == [9, 19, 24] and left == []


def test_step_counts_for_the_exercise():
    n, k = ex.STEP_COUNT_TASK["n"], ex.STEP_COUNT_TASK["k"]
    counts = tuple(len(_steps(c, n, k)[0]) for c in (SEED, PLUS_ONE, CORRECT))
    assert counts == (7, 6, 7) and counts[2] == math.ceil(n / k)


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
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for s in range(0, len(batches), k):
        group = batches[s:s + k]
        F.mse_loss(model(torch.cat([x for x, _ in group])), torch.cat([y for _, y in group])).backward()
        opt.step()
        opt.zero_grad()
    return model


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


def test_dividing_by_k_is_wrong_for_a_7_3_split_and_both_fixes_are_exact():
    full, by_k, by_share, by_sum = _split_grads([7, 3])
    assert (by_k - full).abs().max() > 0.05
    torch.testing.assert_close(by_share, full)
    torch.testing.assert_close(by_sum, full)
    full, by_k, _, _ = _split_grads([5, 5])
    torch.testing.assert_close(by_k, full)  # equal sizes: / k is right


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


# --------------------------------------------------------------------------- check_accumulation


@pytest.fixture
def data():
    torch.manual_seed(0)
    return torch.randn(32, 3), torch.randn(32, 1)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))


def test_check_accumulation_agrees_for_a_plain_mlp(data):
    X, Y = data
    for k in (1, 2, 3, 4, 32):
        report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, k)
        assert report.agree and bool(report) and report.causes == [], k
        assert sum(report.sizes) == 32 and len(report.sizes) == k
    assert "AGREE" in str(report) and "IS the full-batch step" in str(report)


def test_check_accumulation_names_unequal_micro_batches(data):
    X, Y = data
    report = check_accumulation(nn.Linear(3, 1), nn.MSELoss(), X[:10], Y[:10], 2, sizes=(7, 3), scale="k")
    assert not report.agree and report.causes[0].startswith("unequal micro-batches")
    assert report.max_diff > 1e-3 and "DIFFER" in str(report)
    assert check_accumulation(nn.Linear(3, 1), nn.MSELoss(), X[:10], Y[:10], 2, sizes=(7, 3)).agree


def test_check_accumulation_names_missing_scaling(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 4, scale="none")
    assert not report.agree and report.causes[0].startswith("missing /k scaling")
    assert "4 times" in report.causes[0]
    assert report.rel_diff == pytest.approx(3.0, rel=1e-4)


def test_check_accumulation_names_a_summed_loss_scaled_twice(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(reduction="sum"), X, Y, 2, scale="k")
    assert not report.agree and "scale='none'" in report.causes[0]
    assert check_accumulation(_mlp(), nn.MSELoss(reduction="sum"), X, Y, 2, scale="none").agree


def test_check_accumulation_names_batchnorm_and_its_running_stats(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2)
    assert not report.agree and report.causes[0].startswith("BatchNorm")
    assert any("num_batches_tracked (full batch 1, accumulated 2)" in b for b in report.buffers_differ)
    model.eval()  # in eval mode BatchNorm uses its running statistics: nothing mixes samples
    assert check_accumulation(model, nn.MSELoss(), X, Y, 2).agree


def test_check_accumulation_names_dropout(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 8), nn.Dropout(0.5),
                          nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2)
    assert not report.agree and report.causes[0].startswith("dropout")


def test_check_accumulation_names_two_causes_at_once(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2, scale="none")
    assert report.causes[0].startswith("BatchNorm") and report.causes[1].startswith("missing /k")


def test_check_accumulation_with_an_optimizer_step(data):
    X, Y = data
    sgd = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert sgd.agree and sgd.params_agree and sgd.optimizer == "SGD"
    # Adam divides by the gradient's own size: a missing / k changes the gradient, not (much) the step.
    adam = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, scale="none",
                              optimizer=lambda p: torch.optim.Adam(p, lr=1e-3))
    assert not adam.grads_agree and adam.params_agree and "parameters AGREE" in str(adam)


def test_check_accumulation_leaves_the_model_and_random_state_alone(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 1))
    model(X).sum().backward()
    before = copy.deepcopy(model.state_dict())
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    check_accumulation(model, nn.MSELoss(), X, Y, 4, scale="k")
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name]), name
    for p, g in zip(model.parameters(), grads):
        assert torch.equal(p.grad, g)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(k=0), ValueError, "at least 1"),
    (dict(k=-2), ValueError, "at least 1"),
    (dict(k=33), ValueError, "batch holds 32"),
    (dict(k=2.0), TypeError, "must be an int"),
    (dict(k=True), TypeError, "must be an int"),
    (dict(k=2, scale="mean"), ValueError, "scale must be one of"),
    (dict(k=2, sizes=(30, 3)), ValueError, "adding up to the batch size 32"),
    (dict(k=2, sizes=(32,)), ValueError, "2 positive ints"),
    (dict(k=2, sizes="ab"), TypeError, "sequence of 2 ints"),
    (dict(k=2, optimizer=3), TypeError, "factory"),
])
def test_check_accumulation_bad_arguments_get_clear_errors(data, kwargs, error, words):
    X, Y = data
    with pytest.raises(error, match=words):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, **kwargs)


def test_check_accumulation_bad_models_losses_and_batches(data):
    X, Y = data
    with pytest.raises(ValueError, match="not a scalar"):
        check_accumulation(_mlp(), nn.MSELoss(reduction="none"), X, Y, 2)
    with pytest.raises(TypeError, match="must return a tensor"):
        check_accumulation(_mlp(), lambda out, y: 1.0, X, Y, 2)
    with pytest.raises(ValueError, match="does not depend on any parameter"):
        check_accumulation(_mlp(), lambda out, y: y.sum(), X, Y, 2)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        check_accumulation(lambda x: x, nn.MSELoss(), X, Y, 2)
    with pytest.raises(TypeError, match="callable"):
        check_accumulation(_mlp(), "mse", X, Y, 2)
    with pytest.raises(ValueError, match="must match"):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y[:5], 2)
    with pytest.raises(TypeError, match="inputs must be a torch.Tensor"):
        check_accumulation(_mlp(), nn.MSELoss(), X.tolist(), Y, 2)
    frozen = _mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        check_accumulation(frozen, nn.MSELoss(), X, Y, 2)
    assert set(SCALES) == {"size", "k", "none"}


# --------------------------------------------------------------------------- the timeline


def test_timeline_text_marks_updates_steps_and_leftovers():
    groups, left = _steps(SEED, 25, 10)
    text = timeline_text(groups, 25)
    assert text == "AABBBBBBBBBBCCCCCCCCCC...\n" + " ^         ^         ^"
    assert timeline_text([], 3) == "...\n"


@pytest.mark.parametrize("groups, n, error", [
    ([[0, 1], [1, 2]], 3, ValueError),
    ([[0, 5]], 3, ValueError),
    ([[0]], 0, ValueError),
    ([3], 4, TypeError),
])
def test_timeline_rejects_bad_groups(groups, n, error):
    with pytest.raises(error):
        timeline_text(groups, n)


def test_draw_timeline_has_a_title_stating_the_finding():
    groups, _ = _steps(SEED, 25, 10)
    drawing = draw_timeline(groups, 25)
    assert drawing.texts("title") == ["3 optimizer steps; 3 micro-batches left in .grad"]
    assert len(drawing.of("left")) == 3 and len(drawing.of("step")) == 3
    drawing = draw_timeline(_steps(CORRECT, 40, 1)[0], 40, title="k = 1")
    assert drawing.texts("title") == ["k = 1"] and not drawing.of("left")


# --------------------------------------------------------------------------- exercise checks


def _loop(condition, scale="group", zero_grad=True):
    """A learner's train_epoch built from a step condition and a loss scaling."""

    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            start = (i // k) * k
            group = micro_batches[start:start + k]
            if scale == "samples":
                loss = loss_fn(model(x), y) * len(x) / sum(len(g) for g, _ in group)
            elif scale == "group":
                loss = loss_fn(model(x), y) / len(group)
            elif scale == "k":
                loss = loss_fn(model(x), y) / k
            else:
                loss = loss_fn(model(x), y)
            loss.backward()
            if condition(i, n, k):
                optimizer.step()
                if zero_grad:
                    optimizer.zero_grad()

    return train_epoch


def test_training_loop_check_passes_a_correct_loop():
    fb = ex.check_training_loop(_loop(CORRECT, "samples"))
    assert fb.passed, fb.message


@pytest.mark.parametrize("fn, words", [
    (_loop(SEED, "k"), "(i - 1) % k == 0"),
    (_loop(PLUS_ONE, "k"), "never reach an optimizer step"),
    (_loop(CORRECT, "k"), "group's real size"),
    (_loop(CORRECT, "none"), "10 times the full-batch one"),
    (_loop(CORRECT, "group", zero_grad=False), "zero_grad"),
    (_loop(CORRECT, "group"), "len(x) / (samples in its group)"),
    (_loop(lambda i, n, k: False, "group"), "never called optimizer.step()"),
])
def test_training_loop_check_explains_each_mistake(fn, words):
    fb = ex.check_training_loop(fn)
    assert fb.status == "wrong" and words in fb.message, fb.message


def test_training_loop_check_reports_a_crash_and_bad_forms():
    def boom(model, loss_fn, optimizer, micro_batches, k):
        raise RuntimeError("oops")

    fb = ex.check_training_loop(boom)
    assert fb.status == "wrong" and "RuntimeError: oops" in fb.message

    def whole_batch(model, loss_fn, optimizer, micro_batches, k):
        x = torch.cat([x for x, _ in micro_batches])
        y = torch.cat([y for _, y in micro_batches])
        loss_fn(model(x), y).backward()
        optimizer.step()

    assert "samples at once" in ex.check_training_loop(whole_batch).message
    assert ex.check_training_loop(...).status == "unanswered"
    assert ex.check_training_loop(None).status == "unanswered"
    assert ex.check_training_loop(42).status == "malformed"
    assert ex.check_training_loop(lambda model: None).status == "malformed"


def test_step_counts_check():
    assert ex.check_step_counts((7, 6, 7)).passed
    assert ex.check_step_counts(...).status == "unanswered"
    for bad in ([7, 6], (7.5, 6, 7), "7,6,7", (True, 6, 7)):
        assert ex.check_step_counts(bad).status == "malformed"
    fb = ex.check_step_counts((8, 6, 7))
    assert fb.status == "wrong" and "(i - 1) % 8 == 0 holds at i = 1, 9, 17" in fb.message
    fb = ex.check_step_counts((7, 7, 7))
    assert fb.status == "wrong" and "the last 2 micro-batches form no full group" in fb.message
    fb = ex.check_step_counts((7, 6, 6))
    assert fb.status == "wrong" and "ceil(50 / 8)" in fb.message


def test_token_weights_check():
    assert ex.check_token_weights([0.15, 0.6, 0.25]).passed
    assert ex.check_token_weights(torch.tensor([3.0, 12.0, 5.0]) / 20).passed
    assert ex.check_token_weights(...).status == "unanswered"
    for bad in ("0.15", [0.5, 0.5], [0.1, "a", 0.2]):
        assert ex.check_token_weights(bad).status == "malformed"
    assert "October 2024" in ex.check_token_weights([1 / 3] * 3).message
    assert "summed per micro-batch" in ex.check_token_weights([1 / 20] * 3).message
    assert "add up to 1.1" in ex.check_token_weights([0.2, 0.3, 0.6]).message
    assert "right proportion" in ex.check_token_weights([0.3, 0.3, 0.4]).message
