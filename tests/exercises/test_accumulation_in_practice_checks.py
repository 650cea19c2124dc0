"""Notebook 07's exercise checks (accumulation in practice) against answers a learner could plausibly write.

For each exercise: wrong answers that must not pass and must get a hint naming their mistake; right answers
written differently from the worked solution that must pass; odd answers that must not make a check raise.
"""

import copy
import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from notebook_cells import run_cells

from autograd_lab.exercises import accumulation_in_practice as ex

NOTEBOOK = "07_accumulation_in_practice"


def _wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


# =========================================================================== exercise 2: the loop, fixed


# The summed loss over the real tokens, as the notebook's script defines it: the answers below use it as a learner's do.
token_loss_sum = run_cells(NOTEBOOK, "script-1", "script-tokens")["token_loss_sum"]


def test_the_checks_losses_are_the_notebooks_on_fresh_padded_micro_batches():
    """The check's summed loss (on the weights as a list) and its token mean (a Hugging Face model's loss) are the
    notebook's token_loss_sum, and that divided by the real tokens."""
    g = ex.trust.fresh_generator()
    model = ex._model()
    for size in (1, 2, 3):
        tokens, labels = ex._padded(g, size)
        summed, real = ex._token_loss(list(model.parameters()), tokens, labels)
        torch.testing.assert_close(summed, token_loss_sum(model, tokens, labels))
        torch.testing.assert_close(ex._mean_loss(model, tokens, labels), token_loss_sum(model, tokens, labels) / real)


def _real(labels):
    return (labels != -100).sum()


def solution(model, optimizer, scheduler, micro_batches, k):
    n = len(micro_batches)
    for i, (tokens, labels) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        (token_loss_sum(model, tokens, labels) / sum(_real(lab) for _, lab in group)).backward()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def prefetching(model, optimizer, scheduler, micro_batches, k):
    """Written differently: groups taken from an iterator, as a streaming loader needs, counted with .ne()."""
    stream = iter(micro_batches)
    while group := list(itertools.islice(stream, k)):
        total = sum(int(lab.ne(-100).sum()) for _, lab in group)
        for tokens, labels in group:
            logits = model.forward(tokens)                   # model.forward rather than model(...)
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum",
                            ignore_index=-100).div(total).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        scheduler.step()


def weighted_means(model, optimizer, scheduler, micro_batches, k):
    """Written differently: each micro-batch's token mean weighted by its share of the group's tokens."""
    n = len(micro_batches)
    for i, (tokens, labels) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        logits = model(tokens)
        mean = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        (mean * (labels >= 0).sum() / sum((lab >= 0).sum() for _, lab in group)).backward()
        if i % k == k - 1 or i == n - 1:
            optimizer.step()
            scheduler.step()
            model.zero_grad()


def grad_per_micro_batch(model, optimizer, scheduler, micro_batches, k):
    """Written differently: torch.autograd.grad once per micro-batch, each result added into .grad."""
    params, n = list(model.parameters()), len(micro_batches)
    for i, (tokens, labels) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        loss = token_loss_sum(model, tokens, labels) / sum(_real(lab) for _, lab in group)
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g if p.grad is None else p.grad + g
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def logs_without_gradients(model, optimizer, scheduler, micro_batches, k):
    """Written differently: a gradient-free forward over each micro-batch, for a log, besides the solution's."""
    solution(model, optimizer, scheduler, micro_batches, k)
    with torch.no_grad():
        [token_loss_sum(model, t, lab).item() for t, lab in micro_batches]


@pytest.mark.parametrize("loop", [solution, prefetching, weighted_means, grad_per_micro_batch,
                                  logs_without_gradients])
def test_loop_right_answers_pass(loop):
    fb = ex.check_scheduled_loop(loop)
    assert fb.passed, fb


def make_loop(*, sched="update", step="group", scale="tokens", zero="after"):
    """The exercise's loop with one or two mistakes: where the scheduler and the optimizer step, how each
    micro-batch's loss is divided, where .grad is zeroed."""
    divide = {
        "tokens": lambda labels, group, k: sum(_real(lab) for _, lab in group),
        "mean of means": lambda labels, group, k: _real(labels) * len(group),
        "mean / k": lambda labels, group, k: _real(labels) * k,
        "mean": lambda labels, group, k: _real(labels),
        "sum": lambda labels, group, k: 1,
    }[scale]

    def train_epoch(model, optimizer, scheduler, micro_batches, k):
        n = len(micro_batches)
        for i, (tokens, labels) in enumerate(micro_batches):
            group = micro_batches[i // k * k:i // k * k + k]
            if zero == "before each backward":
                optimizer.zero_grad()
            (token_loss_sum(model, tokens, labels) / divide(labels, group, k)).backward()
            if sched == "micro-batch":
                scheduler.step()
            end = {"group": (i + 1) % k == 0 or i + 1 == n, "first": i % k == 0, "no tail": (i + 1) % k == 0,
                   "seed": (i - 1) % k == 0 or i + 1 == n, "never": False}[step]
            if end:
                if sched == "before":
                    scheduler.step()
                optimizer.step()
                if sched == "update" or (sched == "full groups" and (i + 1) % k == 0):
                    scheduler.step()
                if zero == "after":
                    optimizer.zero_grad()
        if sched == "epoch":
            scheduler.step()
    return train_epoch


@pytest.mark.parametrize("loop, words", [
    (make_loop(sched="micro-batch", scale="mean of means"), "once per micro-batch"),   # the exercise's loop
    (make_loop(sched="micro-batch"), "once per micro-batch"),                          # the loss fixed only
    (make_loop(scale="mean of means"), "Hugging Face"),                               # the schedule fixed only
    (make_loop(scale="mean / k"), "divided each micro-batch's token mean by k"),
    (make_loop(scale="mean"), "undivided"),
    (make_loop(scale="sum"), "summed token loss went into backward() undivided"),
    (make_loop(sched="before"), "before optimizer.step()"),
    (make_loop(sched="full groups"), "should step"),                                  # the tail's schedule step
    (make_loop(sched="epoch"), "should step"),
    (make_loop(step="first"), "very first micro-batch"),                               # LLMs-from-scratch#299
    (make_loop(step="no tail"), "never stepped after the epoch's last micro-batch"),
    (make_loop(step="seed"), "the groups end after"),                                 # (i - 1) % k
    (make_loop(step="never"), "never called optimizer.step()"),
    (make_loop(zero="before each backward"), "wipes what the group accumulated"),
    (make_loop(zero="never"), "look at how the loss is divided and at zero_grad()"),
])
def test_loop_wrong_answers_get_their_hint(loop, words):
    fb = ex.check_scheduled_loop(loop)
    assert _wrong_with(fb, words), fb


LOOP_OF_ROW = {  # each row of the check's weight diagnoses: the loop that makes its mistake
    "the mean of the micro-batch means": dict(scale="mean of means"),
    "each token mean over k": dict(scale="mean / k"),
    "the token means added up": dict(scale="mean"),
    "the summed loss undivided": dict(scale="sum"),
    ".grad zeroed before every backward()": dict(zero="before each backward"),
}


@pytest.mark.parametrize("row", ex._WEIGHT_DIAGNOSES, ids=lambda row: row.name)
def test_loop_every_weight_diagnosis_is_the_hint_a_loop_making_its_mistake_gets(row):
    fb = ex.check_scheduled_loop(make_loop(**LOOP_OF_ROW[row.name]))
    assert fb.status == "wrong" and fb.message == row.says(), fb


def test_a_scheduler_stepped_per_micro_batch_is_told_by_how_much_it_ran_too_fast():
    """n / ceil(n / k), not k: the first scenario has n = 7, k = 3, so 7 steps for 3 updates."""
    fb = ex.check_scheduled_loop(make_loop(sched="micro-batch"))
    assert _wrong_with(fb, "n = 7 micro-batches, k = 3), for 3 updates"), fb
    assert _wrong_with(fb, "n / ceil(n / k) = 2.33 times too fast"), fb


def _expected(n, k, sizes, seed):
    start, batches = ex._problem(n, sizes, seed)
    return ex._reference_weights(start, batches, k)


def test_the_scenarios_expose_the_mean_of_micro_batch_means():
    """The bug Hugging Face fixed in 2024 passes when every micro-batch holds as many real tokens: the check's
    micro-batches differ in size and padding inside a group, so its weights differ from the right ones."""
    loop = make_loop(scale="mean of means")
    exposed = []
    for seed, (n, k, sizes) in enumerate(ex._SCENARIOS):
        model, *_ = ex._run(loop, n, k, sizes, seed)
        exposed.append(not ex._same(model, _expected(n, k, sizes, seed)))
    assert exposed[0] and exposed[1] and not exposed[2]          # k = 1: one micro-batch per group, no bug


def _groups(micro_batches, k):
    return [micro_batches[s:s + k] for s in range(0, len(micro_batches), k)]


def full_batch(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: each group's padded sequences concatenated into one forward pass."""
    for group in _groups(micro_batches, k):
        tokens, labels = torch.cat([t for t, _ in group]), torch.cat([lab for _, lab in group])
        (token_loss_sum(model, tokens, labels) / _real(labels)).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def summed_losses(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: one backward() over the group's summed micro-batch losses."""
    for group in _groups(micro_batches, k):
        total = sum(_real(lab) for _, lab in group)
        sum(token_loss_sum(model, t, lab) / total for t, lab in group).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def grad_summed(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: one torch.autograd.grad over the group's summed losses, assigned to .grad."""
    params = list(model.parameters())
    for group in _groups(micro_batches, k):
        total = sum(_real(lab) for _, lab in group)
        grads = torch.autograd.grad(sum(token_loss_sum(model, t, lab) / total for t, lab in group), params)
        for p, g in zip(params, grads):
            p.grad = g
        optimizer.step()
        scheduler.step()


def grad_logging_forward(model, optimizer, scheduler, micro_batches, k):
    """A logging forward with gradients on builds a second graph per micro-batch."""
    n = len(micro_batches)
    for i, (tokens, labels) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        (token_loss_sum(model, tokens, labels) / sum(_real(lab) for _, lab in group)).backward()
        token_loss_sum(model, tokens, labels).item()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


NOT_ACCUMULATING = {
    "full batch": (full_batch, "ran on 6 samples at once"),
    "summed losses": (summed_losses, "one backward() went through the forward passes of 3 micro-batches"),
    "summed losses, autograd.grad": (grad_summed, "one torch.autograd.grad call went through the forward passes"),
}


@pytest.mark.parametrize("name", list(NOT_ACCUMULATING))
def test_loop_that_does_not_accumulate_fails_with_its_hint(name):
    loop, words = NOT_ACCUMULATING[name]
    fb = ex.check_scheduled_loop(loop)
    assert _wrong_with(fb, words), fb


@pytest.mark.parametrize("name", list(NOT_ACCUMULATING))
def test_loop_that_does_not_accumulate_has_the_right_schedule_and_weights(name):
    """Why it needs the pass checks: by its learning rates and weights alone, it is right."""
    loop, _ = NOT_ACCUMULATING[name]
    for seed, (n, k, sizes) in enumerate(ex._SCENARIOS):
        model, _, epochs = ex._run(loop, n, k, sizes, seed)
        for epoch, (events, _) in enumerate(epochs):
            assert ex._explain_schedule(events, n, k, epoch * math.ceil(n / k)) is None
        assert ex._same(model, _expected(n, k, sizes, seed))


def test_loop_with_a_logging_forward_on_gradients_is_told_so():
    fb = ex.check_scheduled_loop(grad_logging_forward)
    assert _wrong_with(fb, "ran the model 14 times with gradients on"), fb


def test_loop_that_calls_model_forward_is_counted():
    """model.forward(x) runs no hooks of the model itself; the check counts on the embedding inside it."""
    def forward_only(model, optimizer, scheduler, micro_batches, k):
        for group in _groups(micro_batches, k):
            tokens, labels = torch.cat([t for t, _ in group]), torch.cat([lab for _, lab in group])
            logits = model.forward(tokens)
            (F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum") / _real(labels)).backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    fb = ex.check_scheduled_loop(forward_only)
    assert _wrong_with(fb, "ran on 6 samples at once") and "0 times" not in fb.message, fb
    assert ex.check_scheduled_loop(prefetching).passed                      # right, and with model.forward


def test_loop_own_scheduler_is_caught():
    """A loop that builds its own scheduler (a constant one) follows no schedule it was given."""
    def own(model, optimizer, scheduler, micro_batches, k):
        mine = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: 1.0)
        solution(model, optimizer, mine, micro_batches, k)
    assert not ex.check_scheduled_loop(own).passed


def test_loop_odd_answers_never_raise():
    assert ex.check_scheduled_loop(...).status == "unanswered"
    assert ex.check_scheduled_loop(3).status == "malformed"
    assert ex.check_scheduled_loop(lambda model, optimizer: None).status == "malformed"

    def raises(model, optimizer, scheduler, micro_batches, k):
        raise ValueError("oops")
    fb = ex.check_scheduled_loop(raises)
    assert fb.status == "malformed" and "ValueError: oops" in fb.message

    def uses_len_of_a_tensor(model, optimizer, scheduler, micro_batches, k):
        len(torch.tensor(1.0))
    assert ex.check_scheduled_loop(uses_len_of_a_tensor).status == "malformed"


def test_lr_factor_warms_up_then_decays():
    factors = [ex.lr_factor(u) for u in range(6)]
    assert factors[0] < factors[1] == max(factors) and factors[2:] == sorted(factors[2:], reverse=True)


# =========================================================================== exercise 1: the token factor


def right_factor(n_micro, n_all, k, world, accelerate):
    return n_micro / n_all * world * (k if accelerate else 1)


def branches(n_micro, n_all, k, world, accelerate):
    """Written differently: a branch per backward, the all-rank count turned into tokens per rank first."""
    per_rank = n_all / world
    if accelerate:
        return k * n_micro / per_rank
    return n_micro / per_rank


def as_tensor(n_micro, n_all, k, world, accelerate):
    """Written differently: a tensor, with k raised to the power of a bool."""
    return torch.tensor(float(n_micro)) * world * k ** accelerate / n_all


def as_numpy(n_micro, n_all, k, world, accelerate):
    return np.float64(n_micro) * world * (k if accelerate else 1) / np.int64(n_all)


def as_fraction(n_micro, n_all, k, world, accelerate):
    return Fraction(n_micro * world * (k if accelerate else 1), n_all)


@pytest.mark.parametrize("factor", [right_factor, branches, as_tensor, as_numpy, as_fraction])
def test_factor_right_answers_pass(factor):
    fb = ex.check_token_factor(factor)
    assert fb.passed, fb


FACTOR_MISTAKES = {  # name: (factor, words of its hint)
    "divided by k": (lambda n_micro, n_all, k, world, accelerate: 1 / k, "your factor is 1 / k"),
    "summed-loss rule": (lambda n_micro, n_all, k, world, accelerate: world / n_all * (k if accelerate else 1),
                         "section 2's rule for a summed loss"),
    "own mean kept": (lambda n_micro, n_all, k, world, accelerate: 1, "does not depend on n_micro"),
    "own mean, x world x k": (lambda n_micro, n_all, k, world, accelerate: world * (k if accelerate else 1),
                              "does not depend on n_micro"),
    "accelerate's division forgotten": (lambda n_micro, n_all, k, world, accelerate: n_micro * world / n_all,
                                        "accelerator.backward() divides the loss by gradient_accumulation_steps"),
    "k in the own loop too": (lambda n_micro, n_all, k, world, accelerate: k * n_micro * world / n_all,
                              "loss.backward() divides by nothing"),
    "DDP's mean forgotten": (lambda n_micro, n_all, k, world, accelerate: n_micro / n_all * (k if accelerate else 1),
                             "DDP averages .grad over the world ranks"),
    "divided by k in accelerate": (lambda n_micro, n_all, k, world, accelerate:
                                   n_micro * world / n_all / (k if accelerate else 1),
                                   "the factor there is your loop's times k"),
    "tokens of this micro-batch over k": (lambda n_micro, n_all, k, world, accelerate: n_micro / n_all / k,
                                          "differs from the full batch's token mean"),
}


@pytest.mark.parametrize("name", list(FACTOR_MISTAKES))
def test_factor_wrong_answers_get_their_hint(name):
    factor, words = FACTOR_MISTAKES[name]
    fb = ex.check_token_factor(factor)
    assert _wrong_with(fb, words), fb


@pytest.mark.parametrize("row", ex._FACTOR_DIAGNOSES, ids=lambda row: row.name)
def test_factor_every_diagnosis_is_the_hint_its_own_factor_gets(row):
    fb = ex.check_token_factor(row.variant)
    assert fb.status == "wrong" and fb.message == row.says(), fb


def test_factor_the_summed_loss_rule_is_right_for_a_sum_and_wrong_for_the_mean():
    """Why the exercise transfers: section 2's factor, right for the summed loss the script uses, is wrong here."""
    start, updates = ex._factor_problem(5, 2)
    rule = ex._Factor(FACTOR_MISTAKES["summed-loss rule"][0])
    found = ex._by_hand(rule, start, updates)
    assert not all(torch.allclose(g, ex._full_batch(start, u), atol=1e-6) for g, u in zip(found, updates))
    summed = []
    for update in updates:
        n_all = sum(ex._real(lbl) for rank in update for _, lbl in rank)
        per_rank = []
        for micro_batches in update:
            model = copy.deepcopy(start)
            for tokens, labels in micro_batches:
                (ex._mean_loss(model, tokens, labels) * ex._real(labels) * len(update) / n_all).backward()
            per_rank.append(ex._flat_grad(model))
        summed.append(torch.stack(per_rank).mean(0))
    assert all(torch.allclose(g, ex._full_batch(start, u), atol=1e-6) for g, u in zip(summed, updates))


def test_factor_problems_hold_unequal_micro_batches_and_a_short_group():
    start, updates = ex._factor_problem(11, 3)
    assert [len(update[0]) for update in updates] == [ex._FACTOR_K, ex._FACTOR_K - 1]
    counts = {ex._real(lbl) for update in updates for rank in update for _, lbl in rank}
    assert len(counts) > 3 and min(counts) >= 1


def test_factor_problems_never_hold_an_update_whose_micro_batches_all_count_alike():
    """Where every micro-batch of an update held as many real tokens, n_micro / n_all would be one value there: a
    factor that ignores n_micro could not be told by its calls, and would get another hint than its own."""
    for seed in range(300):
        _, updates = ex._factor_problem(seed, 2)
        for update in updates:
            for rank in update:
                assert len({ex._real(lbl) for _, lbl in rank}) > 1, seed


def test_factor_odd_answers_never_raise():
    assert ex.check_token_factor(...).status == "unanswered"
    assert ex.check_token_factor(None).status == "unanswered"
    assert ex.check_token_factor(3).status == "malformed"
    assert ex.check_token_factor(lambda n_micro, n_all: 1).status == "malformed"
    for returned in (None, "0.5", float("nan"), float("inf"), torch.ones(2), [1.0], True):
        fb = ex.check_token_factor(lambda *args, _r=returned: _r)
        assert fb.status == "malformed" and "one finite number" in fb.message, (returned, fb)

    def raises(n_micro, n_all, k, world, accelerate):
        raise ValueError("oops")
    fb = ex.check_token_factor(raises)
    assert fb.status == "malformed" and "ValueError: oops" in fb.message, fb


def test_factor_draws_fresh_problems_for_every_check():
    seen = []

    def spy(n_micro, n_all, k, world, accelerate):
        seen.append((n_micro, n_all, world, accelerate))
        return right_factor(n_micro, n_all, k, world, accelerate)

    assert ex.check_token_factor(spy).passed
    first = list(seen)
    seen.clear()
    assert ex.check_token_factor(spy).passed
    assert first != seen
    assert {(w, a) for _, _, w, a in first} == {(1, False), (2, False), (3, False), (1, True), (2, True)}


def test_factor_that_changes_torch_modes_is_judged_right_and_the_kernel_is_left_as_found():
    def rude(n_micro, n_all, k, world, accelerate):
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1)
        warnings.simplefilter("error")
        return right_factor(n_micro, n_all, k, world, accelerate)

    before = (torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads(), list(warnings.filters))
    fb = ex.check_token_factor(rude)
    assert fb.passed, fb
    assert (torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads(),
            list(warnings.filters)) == before


def test_factor_check_puts_accelerate_s_state_back():
    """accelerate keeps one state per process: a learner's own Accelerator survives the check unchanged."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState, PartialState

    try:
        mine = Accelerator(gradient_accumulation_steps=7, cpu=True)
        before = [dict(s._shared_state) for s in (PartialState, AcceleratorState, GradientState)]
        assert ex.check_token_factor(right_factor).passed
        assert [dict(s._shared_state) for s in (PartialState, AcceleratorState, GradientState)] == before
        assert mine.gradient_accumulation_steps == 7
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


# The check averages each rank's .grad in one process, as DDP's all-reduce does. Here the right factor and the
# wrong ones run on two real gloo ranks, by hand (DDP, no_sync()) and in accelerate (prepare, backward(), no_sync()),
# and must give what the check found for them.
_ON_TWO_RANKS = {  # name: the factor's source, run by the script below and by the check here
    "right": "lambda n_micro, n_all, k, world, accelerate: n_micro / n_all * world * (k if accelerate else 1)",
    "summed-loss rule": "lambda n_micro, n_all, k, world, accelerate: world / n_all * (k if accelerate else 1)",
    "accelerate's division forgotten": "lambda n_micro, n_all, k, world, accelerate: n_micro * world / n_all",
    "DDP's mean forgotten": "lambda n_micro, n_all, k, world, accelerate: n_micro / n_all * (k if accelerate else 1)",
}
_TWO_RANKS = """
import copy, gc, json, os, sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from accelerate import Accelerator

from autograd_lab.exercises import accumulation_in_practice as ex

FACTORS = {name: eval(source) for name, source in json.loads(sys.argv[2]).items()}
accelerator = Accelerator(gradient_accumulation_steps=ex._FACTOR_K, cpu=True)
rank, world = dist.get_rank(), dist.get_world_size()
start, updates = ex._factor_problem(int(sys.argv[1]), world)
found = {}
for name, factor in FACTORS.items():
    for accelerate in (False, True):
        grads = []
        for update in updates:
            n_all = sum(ex._real(labels) for micro_batches in update for _, labels in micro_batches)
            model = (accelerator.prepare if accelerate else DDP)(copy.deepcopy(start))
            backward = accelerator.backward if accelerate else torch.Tensor.backward
            mine = update[rank]
            for i, (tokens, labels) in enumerate(mine):
                with model.no_sync() if i < len(mine) - 1 else nullcontext():
                    loss = ex._mean_loss(model, tokens, labels)
                    backward(loss * factor(ex._real(labels), n_all, ex._FACTOR_K, world, accelerate))
            grads.append(ex._flat_grad(model).tolist())
            del model
        found[f"{name}, accelerate={accelerate}"] = grads
with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{rank}.json"), "w") as f:
    json.dump(found, f)
accelerator.free_memory()
gc.collect()
accelerator.end_training()
"""


@pytest.mark.slow
def test_factor_check_finds_what_two_real_ranks_give_by_hand_and_in_accelerate(tmp_path):
    import json

    import autograd_lab as lab

    script = tmp_path / "factor_on_two_ranks.py"
    script.write_text(_TWO_RANKS)
    seed = 2024
    run = lab.torchrun(script, seed, json.dumps(_ON_TWO_RANKS), nproc=2, timeout=240)
    start, updates = ex._factor_problem(seed, 2)
    references = [ex._full_batch(start, u) for u in updates]
    for name, source in _ON_TWO_RANKS.items():
        for accelerate in (False, True):
            key = f"{name}, accelerate={accelerate}"
            real = [torch.tensor(g) for g in run.ranks[0][key]]
            assert run.ranks[1][key] == run.ranks[0][key], key
            simulated = (ex._in_accelerate if accelerate else ex._by_hand)(ex._Factor(eval(source)), start, updates)
            assert all(torch.allclose(r, s, atol=1e-6) for r, s in zip(real, simulated)), key
            right = all(torch.allclose(r, ref, atol=1e-6) for r, ref in zip(real, references))
            assert right == (name == "right" or (name == "accelerate's division forgotten" and not accelerate)), key
