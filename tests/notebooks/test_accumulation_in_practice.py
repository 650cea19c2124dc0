"""Notebook 07: the facts it states, re-derived here on cases of our own, and its script on two real processes.

The two-process part runs the training script that notebooks/07_accumulation_in_practice.ipynb writes with its
%%writefile cells, once, and checks what the ranks recorded against references computed here: the token-count
divisor that gives the single-process gradient, the places where accelerate's accumulate() synchronizes, its
division by k in a short last group, and its scheduler stepping once per process.
"""

from __future__ import annotations

import itertools
import math
import runpy
import warnings
from pathlib import Path

import ddp_probe
import pytest
import torch
import torch.nn.functional as F

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_accumulation_in_practice.ipynb"
SCRIPT_NAME = "train_accum.py"  # the script the notebook writes (the conftest's `script` fixture reads it)


# --------------------------------------------------------------------------- schedules


def _used_lrs(n, k, per_micro_batch, factor):
    """The learning rate each update used, with the scheduler stepped per update or per micro-batch."""
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    used = []
    for i in range(n):
        p.grad = torch.ones(2)
        if (i + 1) % k == 0 or i + 1 == n:
            used.append(opt.param_groups[0]["lr"])
            opt.step()
            if not per_micro_batch:
                sched.step()
        if per_micro_batch:
            sched.step()
    return used


@pytest.mark.parametrize("n, k", [(22, 4), (50, 8), (9, 3), (5, 1)])
def test_a_scheduler_stepped_per_update_follows_the_schedule_and_per_micro_batch_runs_k_times_faster(n, k):
    def factor(step):
        return 1 / (1 + step)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        right, fast = _used_lrs(n, k, False, factor), _used_lrs(n, k, True, factor)
    updates = math.ceil(n / k)
    assert right == [factor(u) for u in range(updates)]
    assert fast == [factor(min(u * k + k - 1, n - 1)) for u in range(updates)]
    assert (fast == right) == (k == 1)


def test_pytorch_warns_only_about_the_order_of_the_first_scheduler_step():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _used_lrs(12, 4, True, lambda step: 1.0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "lr_scheduler.step()" in messages[0] and "before" in messages[0]


# --------------------------------------------------------------------------- token counts


def _padded(seed, sequences=12, length=7, vocab=9):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (sequences, length), generator=g)
    labels = torch.randint(vocab, (sequences, length), generator=g)
    labels[torch.arange(length) >= torch.randint(1, length + 1, (sequences, 1), generator=g)] = -100
    return tokens, labels


def _token_grad(model, tokens, labels, divisor):
    model.zero_grad()
    loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    (loss / divisor).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _lm():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Embedding(9, 5), torch.nn.Linear(5, 9))


def test_streamed_groups_divided_by_their_prefetched_token_count_give_the_one_batch_gradient():
    tokens, labels = _padded(seed=4)
    model = _lm()
    full = _token_grad(model, tokens, labels, (labels != -100).sum())
    stream = iter(torch.utils.data.DataLoader(list(zip(tokens, labels)), batch_size=3))
    group = list(itertools.islice(stream, 4))                  # prefetched: the whole update, 4 micro-batches
    n = sum(int((lab != -100).sum()) for _, lab in group)
    summed = sum(_token_grad(model, t, lab, n) for t, lab in group)
    naive = sum(_token_grad(model, t, lab, (lab != -100).sum() * len(group)) for t, lab in group)
    assert torch.allclose(summed, full, atol=1e-6)
    assert (naive - full).norm() / full.norm() > 0.01


def test_ddp_mean_of_rank_gradients_needs_the_all_rank_count_times_the_world_size():
    tokens, labels = _padded(seed=5)
    model, world = _lm(), 3
    full = _token_grad(model, tokens, labels, (labels != -100).sum())
    shares = [torch.arange(r, len(tokens), world) for r in range(world)]
    n_all = int((labels != -100).sum())

    def ddp(divisor_of):                                        # each rank's gradient, then DDP's mean
        return torch.stack([_token_grad(model, tokens[s], labels[s], divisor_of(s)) for s in shares]).mean(0)

    right = ddp(lambda s: n_all / world)
    per_rank = ddp(lambda s: (labels[s] != -100).sum())
    assert len({int((labels[s] != -100).sum()) for s in shares}) > 1
    assert torch.allclose(right, full, atol=1e-6)
    assert (per_rank - full).norm() / full.norm() > 1e-3


# --------------------------------------------------------------------------- bfloat16 sums


def test_bfloat16_sums_lose_precision_with_k_and_float32_buffers_do_not():
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(1024, 96, generator=g), torch.randn(96, 40, generator=g)
    per_sample = (x[:, :, None] * w[None]).double()            # exact per-sample "gradients"
    exact = per_sample.mean(0)
    errors = {}
    for k in (1, 16, 256):
        parts = [chunk.mean(0).mul(len(chunk) / len(x)).bfloat16() for chunk in per_sample.chunk(k)]
        in_bf16 = torch.zeros_like(parts[0])
        in_fp32 = torch.zeros(exact.shape)
        for part in parts:
            in_bf16 += part
            in_fp32 += part.float()
        errors[k] = [((s.double() - exact).norm() / exact.norm()).item() for s in (in_bf16, in_fp32)]
    assert errors[1][0] < errors[16][0] < errors[256][0] and errors[256][0] > 3 * errors[1][0]
    assert errors[256][1] < 1.5 * errors[1][1] and errors[256][1] < errors[256][0] / 3


# --------------------------------------------------------------------------- the notebook's script, 2 processes


@pytest.fixture(scope="module")
def run(script, probed):
    return ddp_probe.torchrun(script, probed, nproc=2, timeout=180)


def test_the_script_frees_every_ddp_model_before_it_ends_training(run, probed):
    assert ddp_probe.alive_at_destroy(probed, 2) == [0, 0]


@pytest.fixture(scope="module")
def train(script):
    return runpy.run_path(str(script))


def _flat(grads):
    return torch.cat([g.flatten() for g in grads])


@pytest.mark.slow
def test_token_counts_all_reduced_and_times_world_give_the_single_process_gradient(run, train):
    tokens, labels = train["make_tokens"]()
    model = train["make_lm"]()
    loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    full = _flat(torch.autograd.grad(loss / (labels != -100).sum(), list(model.parameters())))
    for divisor, exact in (("N of all ranks", True), ("N of this rank", False), ("own mean / k", False)):
        grads = [torch.tensor(r["tokens"][divisor]) for r in run.ranks]
        assert torch.equal(grads[0], grads[1]), divisor
        assert torch.allclose(grads[0], full, atol=1e-6) == exact, divisor


def _group_gradient(model, train, x, y, groups):
    """The mean over ranks of each rank's group gradient, weighted by the group's real sizes (what DDP gives)."""
    per_rank = []
    for batches in groups:
        idx = torch.cat(batches)
        loss = F.mse_loss(model(x[idx]), y[idx])
        per_rank.append(_flat(torch.autograd.grad(loss, list(model.parameters()))))
    return torch.stack(per_rank).mean(0)


@pytest.mark.slow
def test_accelerate_syncs_where_the_own_loop_does_and_divides_a_short_last_group_by_k(run, train):
    k = train["K_ACC"]
    x, y = train["make_data"]()
    batches = [[torch.tensor(b) for b in r["loops"]["accelerate constant"]["batches"]] for r in run.ranks]
    n = len(batches[0])
    assert n % k != 0, "the setting must leave a short last group"
    model = train["make_model"]()
    for update, start in enumerate(range(0, n, k)):
        expected = _group_gradient(model, train, x, y, [b[start:start + k] for b in batches])
        assert expected.norm() < 10.0                               # the clipping threshold does not act
        for r in run.ranks:
            own = torch.tensor(r["loops"]["own constant"]["grads"][update])
            acc = torch.tensor(r["loops"]["accelerate constant"]["grads"][update])
            short = n - start < k
            assert torch.allclose(own, expected, atol=1e-6)
            assert torch.allclose(acc, expected * (n - start) / k if short else expected, atol=1e-6)
        with torch.no_grad():                                       # the SGD step both loops take, lr 0.1
            offset = 0
            for p in model.parameters():
                p -= 0.1 * expected[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
    for r in run.ranks:
        ends = [(i + 1) % k == 0 or i + 1 == n for i in range(n)]
        assert r["loops"]["own constant"]["sync"] == r["loops"]["accelerate constant"]["sync"] == ends


@pytest.mark.slow
def test_accelerate_steps_its_scheduler_once_per_process_per_update(run, train):
    world = run.world_size
    for r in run.ranks:
        own, acc = r["loops"]["own warmup"]["lr"], r["loops"]["accelerate warmup"]["lr"]
        assert own == pytest.approx([0.1 * train["warmup"](u) for u in range(len(own))])
        assert acc == pytest.approx([0.1 * train["warmup"](world * u) for u in range(len(acc))])


@pytest.mark.slow
def test_grad_norms_agree_across_ranks_exactly_on_synchronizing_micro_batches(run):
    for loop in ("own constant", "accelerate constant"):
        a, b = (r["loops"][loop] for r in run.ranks)
        assert [math.isclose(x, y, rel_tol=1e-6) for x, y in zip(a["norm"], b["norm"])] == a["sync"]
    own, acc = run.ranks[0]["loops"]["own constant"], run.ranks[0]["loops"]["accelerate constant"]
    group = sum(own["logged"][:2])                                  # the scaled losses add up to the group mean
    assert group == pytest.approx((acc["logged"][0] + acc["logged"][1]) / 2, rel=1e-5)
