"""Notebook 06's exercise checks (accumulation across processes) against answers a learner could plausibly write.

For every exercise: wrong answers, each of which must not pass and must get a hint naming its actual
mistake; right answers in any number type, which must pass; odd answers, which must not make a check raise.
The counts themselves are checked against two real processes in tests/notebooks/test_accumulation_across_processes.py.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch

from autograd_lab.exercises import accumulation_across_processes as ex06

MODES = ("every backward", "no_sync()", "no_sync() on backward only", "no_sync() except the first")


def _is_wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


def test_expected_calls():
    assert [ex06.expected_calls(8, m) for m in MODES] == [8, 1, 8, 1]
    assert ex06.expected_calls(4, "every backward", buckets=3) == 12
    with pytest.raises(ValueError):
        ex06.expected_calls(4, "sometimes")


def test_check_backward_only_count():
    assert ex06.check_backward_only_count(...).status == "unanswered"
    assert ex06.check_backward_only_count(8).passed
    assert "forward" in ex06.check_backward_only_count(1).message
    assert "one rank" in ex06.check_backward_only_count(16).message
    assert "last micro-batch" in ex06.check_backward_only_count(7).message
    assert not ex06.check_backward_only_count(3).passed
    assert ex06.check_backward_only_count("8").status == "malformed"
    assert ex06.check_backward_only_count(True).status == "malformed"


def test_check_first_sync():
    assert ex06.check_first_sync(...).status == "unanswered"
    assert ex06.check_first_sync((1, False)).passed and ex06.check_first_sync([1, False]).passed
    assert "micro-batches 2 to 8" in ex06.check_first_sync((1, True)).message
    assert "how many" in ex06.check_first_sync((8, False)).message
    for bad in (1, (1,), ("1", False), (1, "no")):
        assert ex06.check_first_sync(bad).status == "malformed", bad


def test_check_loss_divisor():
    assert ex06.check_loss_divisor(...).status == "unanswered"
    assert ex06.check_loss_divisor(4).passed and ex06.check_loss_divisor(4.0).passed
    assert "already divides" in ex06.check_loss_divisor(8).message
    assert "4 times" in ex06.check_loss_divisor(1).message
    assert "DDP's job" in ex06.check_loss_divisor(2).message
    assert not ex06.check_loss_divisor(3).passed
    assert ex06.check_loss_divisor("4").status == "malformed"


@pytest.mark.parametrize("answer", [8, np.int64(8), torch.tensor(8), 8.0, Fraction(8), torch.tensor([8])])
def test_06_backward_only_count_right_in_any_number_type(answer):
    assert ex06.check_backward_only_count(answer).passed


@pytest.mark.parametrize("answer, words", [(1, "forward"), (16, "one rank"), (7, "last micro-batch"),
                                           (np.int64(1), "forward"), (3, "how many are there")])
def test_06_backward_only_count_wrong_get_their_hint(answer, words):
    assert _is_wrong_with(ex06.check_backward_only_count(answer), words)


@pytest.mark.parametrize("answer", ["8", True, float("nan"), 8.5, torch.tensor([8, 8]), [8], 1j,
                                    torch.zeros(1, device="meta")])
def test_06_backward_only_count_malformed_never_raises(answer):
    assert ex06.check_backward_only_count(answer).status == "malformed"


@pytest.mark.parametrize("answer", [(1, False), [1, False], (np.int64(1), np.bool_(False)),
                                    (torch.tensor(1), torch.tensor(False)), (1.0, False)],
                         ids=["tuple", "list", "numpy", "tensor", "float"])
def test_06_first_sync_right_in_any_type(answer):
    assert ex06.check_first_sync(answer).passed


@pytest.mark.parametrize("answer, words", [((1, True), "micro-batches 2 to 8"), ((8, False), "how many"),
                                           ((np.int64(1), np.bool_(True)), "micro-batches 2 to 8")])
def test_06_first_sync_wrong_get_their_hint(answer, words):
    assert _is_wrong_with(ex06.check_first_sync(answer), words)


@pytest.mark.parametrize("answer", [("1", False), (1, "False"), (1, 0), (1,), 1, (1, torch.tensor([True, False])),
                                    (torch.zeros(1, device="meta"), False)])
def test_06_first_sync_malformed_never_raises(answer):
    assert ex06.check_first_sync(answer).status == "malformed"


@pytest.mark.parametrize("answer", [4, 4.0, np.int64(4), torch.tensor(4.0), Fraction(4), np.float32(4)])
def test_06_loss_divisor_right_in_any_number_type(answer):
    assert ex06.check_loss_divisor(answer).passed


@pytest.mark.parametrize("answer, words", [(8, "already divides"), (1, "4 times"), (2, "DDP's job"),
                                           (0.25, "1 / 4"), (Fraction(1, 4), "1 / 4"), (3, "Which divisor")])
def test_06_loss_divisor_wrong_get_their_hint(answer, words):
    assert _is_wrong_with(ex06.check_loss_divisor(answer), words)


@pytest.mark.parametrize("answer", ["4", float("nan"), float("inf"), True, [4], torch.zeros(1, device="meta")])
def test_06_loss_divisor_malformed_never_raises(answer):
    assert ex06.check_loss_divisor(answer).status == "malformed"
