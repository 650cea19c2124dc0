"""Notebook 06's exercise checks (accumulation across processes) against answers a learner could plausibly write.

For every exercise: wrong answers, each of which must not pass and must get a hint naming its actual
mistake; right answers in any number type, which must pass; odd answers, which must not make a check raise.
Each exercise asks for a case the notebook never ran (exercise 1: k = 6 and 3 buckets; exercise 2: k = 5 and
2 buckets; exercise 3: 4 ranks and summed losses), so the answers printed in the notebook must fail. The counts
and the divisor are checked against real processes in tests/notebooks/test_accumulation_across_processes.py.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch

from autograd_lab.exercises import accumulation_across_processes as ex06


def _is_wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


def test_expected_calls_follow_the_forward():
    placements = ["no_sync() but for the last", "without no_sync()", "no_sync() on backward only",
                  "every forward in no_sync()", "no_sync() but for the first"]
    assert [ex06._expected_calls(4, p) for p in placements] == [1, 4, 4, 0, 1]
    assert ex06._expected_calls(6, "no_sync() on backward only", buckets=3) == 18
    assert ex06._expected_calls(5, "no_sync() but for the first", buckets=2) == 2
    with pytest.raises(ValueError, match="unknown placement"):
        ex06._expected_calls(4, "sometimes")


def test_loss_divisor():
    assert ex06._loss_divisor(4) == 4 and ex06._loss_divisor(2, 16) == 32


# ---------------------------------------------------------------- exercise 1: backward only, k = 6, 3 buckets


@pytest.mark.parametrize("answer", [18, np.int64(18), torch.tensor(18), 18.0, Fraction(18), torch.tensor([18]),
                                    6 * 3])
def test_06_backward_only_count_right_in_any_number_type(answer):
    assert ex06.check_backward_only_count(answer).passed


@pytest.mark.parametrize("answer, words", [
    (3, "what the author hoped for"),        # one synchronizing backward
    (1, "one call carries one bucket"),      # the notebook's printed count, one bucket
    (6, "one all-reduce call per bucket"),   # k, forgetting the buckets
    (8, "count the backward passes"),        # the notebook's k = 8 answer of before
    (15, "synchronizes as well"),            # the quiet backward passes only
    (36, "one rank"),                        # both ranks counted
    (16, "the very first update"),           # 1 + 5 x 3: the first update, one bucket until the rebuild
    (np.int64(3), "what the author hoped for"),
])
def test_06_backward_only_count_wrong_get_their_hint(answer, words):
    fb = ex06.check_backward_only_count(answer)
    assert _is_wrong_with(fb, words), fb


@pytest.mark.parametrize("answer", ["18", True, float("nan"), 18.5, torch.tensor([18, 18]), [18], 1j,
                                    torch.zeros(1, device="meta")])
def test_06_backward_only_count_malformed_never_raises(answer):
    assert ex06.check_backward_only_count(answer).status == "malformed"


def test_06_backward_only_count_unanswered():
    assert ex06.check_backward_only_count(...).status == "unanswered"


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


def test_06_first_sync_unanswered():
    assert ex06.check_first_sync(...).status == "unanswered"


# ---------------------------------------------------------------- exercise 3: summed losses, 4 ranks, k = 2 of 16


@pytest.mark.parametrize("answer", [32, 32.0, np.int64(32), torch.tensor(32.0), Fraction(32), np.float32(32),
                                    2 * 16])
def test_06_loss_divisor_right_in_any_number_type(answer):
    assert ex06.check_loss_divisor(answer).passed


@pytest.mark.parametrize("answer, words", [
    (128, "already divides by the world size"),   # every sample of every rank
    (2, "right for a mean loss"),                  # k, the notebook's rule for mean losses
    (4, "DDP's job"),                              # the world size
    (16, "2 times too large"),                     # the micro-batch size only
    (8, "world x k"),                              # world x k, the notebook's wrong divisor
    (1, "32 times the mean"),
    (1 / 32, "1 / 32"),
    (Fraction(1, 32), "1 / 32"),
    (64, "Which divisor"),
])
def test_06_loss_divisor_wrong_get_their_hint(answer, words):
    fb = ex06.check_loss_divisor(answer)
    assert _is_wrong_with(fb, words), fb


@pytest.mark.parametrize("answer", ["32", float("nan"), float("inf"), True, [32], torch.zeros(1, device="meta")])
def test_06_loss_divisor_malformed_never_raises(answer):
    assert ex06.check_loss_divisor(answer).status == "malformed"


def test_06_loss_divisor_unanswered():
    assert ex06.check_loss_divisor(...).status == "unanswered"


# ---------------------------------------------------------------- the worked solutions


@pytest.mark.parametrize("name", ["06_backward_only_count", "06_first_sync", "06_loss_divisor"])
def test_the_worked_solutions_pass_their_checks(name):
    from pathlib import Path

    code = (Path(__file__).resolve().parents[2] / "notebooks" / "solutions" / f"{name}.py").read_text()
    *body, last = code.strip().splitlines()
    namespace = {"ex": ex06}
    exec("\n".join(body), namespace)
    assert eval(last, namespace).passed
