"""Notebook 06's exercise checks (accumulation across processes) against answers a learner could plausibly write.

Exercise 1 (``check_ddp_accumulation``) runs the learner's loop on two real processes. Its tests run many loops in
one launch (``_run_on_ranks`` takes a list) and judge each as the check does; the check itself runs end to end for a
loop that ends its process here, and for the worked solution in tests/notebooks/test_reveal_cells.py. Right loops
written differently pass; the plausible wrong ones -- no no_sync() at all, no_sync() around backward() only,
no_sync() around the last micro-batch too, the sync at the first micro-batch, the loss not divided, divided by k, by
len(x), by every sample of every rank, the mean of the micro-batch means, one forward over the whole batch, .grad
zeroed on the way -- fail with a hint naming the mistake; odd answers never raise. How the learner's function
travels to the ranks (``_portable``) is tested here in one process.

Exercise 2 (``check_first_sync``) asks for a case the notebook never ran (k = 5 and 2 buckets, synchronized at the
first micro-batch); tests/notebooks/test_accumulation_across_processes.py runs it on real processes.
"""

import contextlib
import functools
import math
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from notebook_cells import run_cells

from autograd_lab.exercises import accumulation_across_processes as ex06

SHARE = 1.0  # a module-level value a right loop reads (sent to the ranks pickled)


def _is_wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


def test_expected_calls_follow_the_forward():
    placements = ["no_sync() but for the last", "without no_sync()", "no_sync() on backward only",
                  "every forward in no_sync()", "no_sync() but for the first"]
    assert [ex06._expected_calls(4, p) for p in placements] == [1, 4, 4, 0, 1]
    assert ex06._expected_calls(5, "no_sync() but for the first", buckets=2) == 2
    with pytest.raises(ValueError, match="unknown placement"):
        ex06._expected_calls(4, "sometimes")


def test_the_checks_placements_are_the_notebooks():
    """Every placement of no_sync() the notebook's script runs says, for each micro-batch, what the check's
    reference says (which forwards and backwards run inside no_sync()); the check adds the exercise's own."""
    notebook = run_cells("06_accumulation_across_processes", "script-1", "script-3")["PLACEMENTS"]
    assert set(ex06.PLACEMENTS) - set(notebook) == {"no_sync() but for the first"}
    for name, placement in notebook.items():
        assert all(ex06.PLACEMENTS[name](i, k) == placement(i, k) for k in range(1, 9) for i in range(k)), name


# ---------------------------------------------------------------- exercise 1: loops a learner could write


def right(model, loss_fn, micro_batches):  # the worked solution's loop
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else nullcontext():
            (loss_fn(model(x), y) / n).backward()


def right_two_branches(model, loss_fn, micro_batches):  # no context manager trick: two branches
    *first, last = micro_batches
    n = sum(x.shape[0] for x, _ in micro_batches)
    with model.no_sync():
        for x, y in first:
            loss = loss_fn(model(x), y) / n
            loss.backward()
    x, y = last
    (loss_fn(model(x), y) / n).backward()


def _scaled(loss_fn, output, y, n):  # a helper function of the notebook's, called by the loop
    return loss_fn(output, y) * (SHARE / n)


def right_with_a_helper_and_an_exit_stack(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.ExitStack() as stack:
            if i != len(micro_batches) - 1:
                stack.enter_context(model.no_sync())
            _scaled(loss_fn, model(x), y, n).backward()


def right_mean_loss_times_share(model, loss_fn, micro_batches):  # its own mean loss, weighted by n_i / n
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        quiet = i + 1 < len(micro_batches)
        with model.no_sync() if quiet else nullcontext():
            loss = F.mse_loss(model(x), y) * len(x) / n
        with model.no_sync() if quiet else nullcontext():
            loss.backward()


def no_no_sync(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / n).backward()


def backward_only(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model(x), y) / n
        with model.no_sync() if i < len(micro_batches) - 1 else nullcontext():
            loss.backward()


def around_the_last_too(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    with model.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / n).backward()


def sync_at_the_first(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i > 0 else nullcontext():
            (loss_fn(model(x), y) / n).backward()


def _scaled_loop(model, loss_fn, micro_batches, divisor):  # divisor(n, k, n_i) for micro-batch i's summed loss
    n, k = sum(len(x) for x, _ in micro_batches), len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < k - 1 else nullcontext():
            (loss_fn(model(x), y) / divisor(n, k, len(x))).backward()


def not_divided(model, loss_fn, micro_batches):
    _scaled_loop(model, loss_fn, micro_batches, lambda n, k, n_i: 1)


def divided_by_k(model, loss_fn, micro_batches):
    _scaled_loop(model, loss_fn, micro_batches, lambda n, k, n_i: k)


def divided_by_its_size(model, loss_fn, micro_batches):
    _scaled_loop(model, loss_fn, micro_batches, lambda n, k, n_i: n_i)


def divided_by_every_sample(model, loss_fn, micro_batches):
    _scaled_loop(model, loss_fn, micro_batches, lambda n, k, n_i: 2 * n)


def mean_of_the_means(model, loss_fn, micro_batches):
    _scaled_loop(model, loss_fn, micro_batches, lambda n, k, n_i: k * n_i)


def one_forward_for_everything(model, loss_fn, micro_batches):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    (loss_fn(model(x), y) / len(x)).backward()


def zeroing_on_the_way(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        model.zero_grad()
        with model.no_sync() if i < len(micro_batches) - 1 else nullcontext():
            (loss_fn(model(x), y) / n).backward()


def reads_a_name_it_never_gets(model, loss_fn, micro_batches):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / total_samples).backward()  # noqa: F821 -- the learner's slip


RIGHT = [right, right_two_branches, right_with_a_helper_and_an_exit_stack, right_mean_loss_times_share,
         lambda model, loss_fn, batches: right(model, loss_fn, batches)]
WRONG = [
    (no_no_sync, "all 4 micro-batches synchronized"),
    (backward_only, "around backward() alone comes too late"),
    (around_the_last_too, "the last micro-batch ran inside no_sync() too"),
    (sync_at_the_first, "the ranks hold different gradients"),
    (not_divided, "went into backward() as it is"),
    (divided_by_k, "dividing by k = 4 suits"),
    (divided_by_its_size, "makes it that micro-batch's mean"),
    (divided_by_every_sample, "already divides by the world size"),
    (mean_of_the_means, "micro-batches of 6, 2, 4 samples, dividing each sum by k x len(x)"),
    (one_forward_for_everything, "more than a micro-batch holds"),
    (zeroing_on_the_way, "keep every micro-batch's gradient in .grad"),
    (reads_a_name_it_never_gets, "NameError"),
]


@pytest.fixture(scope="module")
def judged():
    """Every loop above on two real processes, in one launch, judged as the check judges: {loop: Feedback}."""
    loops = RIGHT + [loop for loop, _ in WRONG]
    seed = ex06.trust.fresh_seed()
    runs = ex06._run_on_ranks([ex06._portable(loop) for loop in loops], seed)
    return {loop: ex06._verdict(problems, seed) for loop, problems in zip(loops, runs)}


@pytest.mark.slow
@pytest.mark.parametrize("number", range(len(RIGHT)))
def test_06_ddp_accumulation_right_loops_written_differently_pass(judged, number):
    fb = judged[RIGHT[number]]
    assert fb.passed and "3 all-reduce calls per update, one per bucket" in fb.message, fb


@pytest.mark.slow
@pytest.mark.parametrize("loop, words", WRONG, ids=[loop.__name__ for loop, _ in WRONG])
def test_06_ddp_accumulation_wrong_loops_get_the_hint_naming_their_mistake(judged, loop, words):
    assert _is_wrong_with(judged[loop], words), judged[loop]


@pytest.mark.parametrize("row", ex06._SCALING_DIAGNOSES, ids=lambda row: row.name)
@pytest.mark.parametrize("sizes", ex06._LOOP_SIZES)
def test_06_ddp_accumulation_every_scaling_diagnosis_is_the_hint_its_own_gradient_gets(row, sizes):
    """On every problem, the ranks' gradient that a row's scaling gives is told that row's hint -- unless the
    scaling is right there (the mean of the means, when the micro-batches are equal)."""
    seed = ex06.trust.fresh_seed()
    fb = ex06._scaling_mistake("On the ranks", sizes, seed, ex06._weighted_gradient(seed, sizes, row.variant))
    facts = {"n": sum(sizes), "k": len(sizes), "world": ex06._LOOP_WORLD}
    if all(math.isclose(row.variant(n_i, facts["n"], facts["k"], facts["world"]), 1 / facts["n"]) for n_i in sizes):
        assert fb is None and len(set(sizes)) == 1, fb
    else:
        assert fb.status == "wrong" and fb.message == "On the ranks, " + row.says(**facts), fb


def test_06_ddp_accumulation_judges_the_scaling_on_the_whole_gradient():
    """The ranks sum each entry in another order than one process: the entry nearest 0 may stray by a rounding of
    the largest terms, which is no mistake; a scaling off by a hundredth is one."""
    seed, sizes = ex06.trust.fresh_seed(), ex06._LOOP_SIZES[1]
    grad = ex06._weighted_gradient(seed, sizes, lambda n_i, n, k, world: 1 / n)
    nudged = grad.clone()
    nudged[grad.abs().argmin()] += 1e-6 * float(grad.norm())
    assert ex06._scaling_mistake("S", sizes, seed, nudged) is None
    assert ex06._scaling_mistake("S", sizes, seed, grad * 1.01) is not None


@pytest.mark.slow
def test_06_ddp_accumulation_end_to_end_a_loop_that_ends_its_process_fails_the_run():
    """The check's whole path, launch included: a loop that ends its process fails the run, and the check says so.
    A right loop's whole path is the worked solution's (tests/notebooks/test_reveal_cells.py runs it through the
    check); every other verdict is ``_verdict``'s on the ranks' results, judged above."""

    def exits(model, loss_fn, micro_batches):
        raise SystemExit(3)

    fb = ex06.check_ddp_accumulation(exits)
    assert fb.status == "wrong" and "failed" in fb.message, fb


@pytest.mark.slow
def test_06_ddp_accumulation_a_loop_that_never_ends_is_stopped():
    def sleeps(model, loss_fn, micro_batches):
        import time

        time.sleep(600)

    with pytest.raises(ex06.DistributedRunError) as failure:
        ex06._run_on_ranks([ex06._portable(sleeps)], seed=1, timeout=10)
    assert failure.value.reason == "timeout"


def test_06_ddp_accumulation_fresh_data_each_check():
    a, b = (ex06._loop_problem(ex06.trust.fresh_seed(), (3, 3)) for _ in range(2))
    assert not torch.equal(a[1][0][0][0], b[1][0][0][0])
    same = ex06._loop_problem(7, (3, 3)), ex06._loop_problem(7, (3, 3))
    assert torch.equal(same[0][1][1][0][0], same[1][1][1][0][0])  # the ranks and the reference agree on a seed


def test_06_ddp_accumulation_unanswered_and_malformed_never_raise():
    assert ex06.check_ddp_accumulation(...).status == "unanswered"
    for answer in (3, "accumulate", lambda model: None, functools.partial(right), torch.nn.Linear(2, 2)):
        fb = ex06.check_ddp_accumulation(answer)
        assert fb.status == "malformed", (answer, fb)


# ---------------------------------------------------------------- how a learner's function reaches the ranks


def test_portable_sends_the_code_modules_helpers_and_values_a_function_reads_and_rebuilds_it():
    portable = ex06._portable(right_with_a_helper_and_an_exit_stack)
    kinds = {name: kind for name, (kind, _) in portable["globals"].items()}
    assert kinds == {"contextlib": "module", "_scaled": "function"}
    assert ex06._portable(_scaled)["globals"] == {"SHARE": ("pickle", ex06.pickle.dumps(SHARE))}
    rebuilt = ex06._rebuild(ex06._portable(right))
    assert rebuilt.__code__.co_code == right.__code__.co_code and rebuilt.__globals__["nullcontext"] is nullcontext


class _NotebookThing:  # stands for a class defined in the notebook: another process does not have it
    pass


_NotebookThing.__module__ = "__main__"
THING = _NotebookThing()


def test_portable_refuses_what_another_process_cannot_have_and_says_what_to_do():
    def reads_a_notebook_object(model, loss_fn, micro_batches):
        return THING

    def outer():
        k = 3

        def closure(model, loss_fn, micro_batches):
            return k
        return closure

    with pytest.raises(ex06._CannotShip, match="Create it inside the function"):
        ex06._portable(reads_a_notebook_object)
    with pytest.raises(ex06._CannotShip, match="top level of a cell"):
        ex06._portable(outer())
    with pytest.raises(ex06._CannotShip, match="defined with def"):
        ex06._portable(functools.partial(right))


# ---------------------------------------------------------------- exercise 2: synced at the first, k = 5, 2 buckets


@pytest.mark.parametrize("answer", [(2, False), [2, False], (np.int64(2), np.bool_(False)),
                                    (torch.tensor(2), torch.tensor(False)), (2.0, False)],
                         ids=["tuple", "list", "numpy", "tensor", "float"])
def test_06_first_sync_right_in_any_type(answer):
    assert ex06.check_first_sync(answer).passed


@pytest.mark.parametrize("answer, words", [
    ((2, True), "micro-batches 2 to 5"),     # the count is right, the gradients are not
    ((1, False), "one call per bucket"),     # the notebook's one-bucket count
    ((1, False), "the very first update"),   # ... and the first update's true answer
    ((1, True), "one call per bucket"),
    ((5, False), "how many"),                # every backward
    ((10, True), "how many"),
    ((np.int64(2), np.bool_(True)), "micro-batches 2 to 5"),
])
def test_06_first_sync_wrong_get_their_hint(answer, words):
    fb = ex06.check_first_sync(answer)
    assert _is_wrong_with(fb, words), fb


@pytest.mark.parametrize("answer", [("2", False), (2, "False"), (2, 0), (2,), 2, (2, torch.tensor([True, False])),
                                    (torch.zeros(1, device="meta"), False)])
def test_06_first_sync_malformed_never_raises(answer):
    assert ex06.check_first_sync(answer).status == "malformed"


@pytest.mark.parametrize("row", ex06._FIRST_SYNC_DIAGNOSES, ids=lambda row: row.name)
def test_06_first_sync_every_diagnosis_is_the_hint_its_own_pair_gets(row):
    calls, agree = row.variant(5, 2)
    for ranks_agree in (True, False) if agree is None else (agree,):
        fb = ex06.check_first_sync((calls, ranks_agree))
        assert fb.status == "wrong" and fb.message == row.says(k=5, buckets=2), fb


def test_06_first_sync_unanswered():
    assert ex06.check_first_sync(...).status == "unanswered"


# ---------------------------------------------------------------- the worked solutions


# 06_ddp_loop (two processes) runs from the learner's copy in tests/notebooks/test_reveal_cells.py.
@pytest.mark.parametrize("name", ["06_first_sync"])
def test_the_worked_solutions_pass_their_checks(name):
    from pathlib import Path

    code = (Path(__file__).resolve().parents[2] / "notebooks" / "solutions" / f"{name}.py").read_text()
    *body, last = code.strip().splitlines()
    namespace = {"ex": ex06, "nullcontext": nullcontext}
    exec(compile("\n".join(body), f"solutions/{name}.py", "exec"), namespace)
    assert eval(last, namespace).passed
