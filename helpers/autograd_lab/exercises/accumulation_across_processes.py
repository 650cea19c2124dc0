"""Answer checks for notebook 06, accumulation across processes.

The training script (DDP, ``no_sync()``, the counting communication hook) is written
out in the notebook. The answers here follow from how DDP decides to synchronize:
at forward time it notes whether gradients must be synchronized; every backward
whose forward ran outside ``no_sync()`` all-reduces each bucket once.
tests/notebooks/test_accumulation_across_processes.py runs the notebook's script with two processes and checks
these counts against what the hook recorded.
"""

from __future__ import annotations

import math

from .answers import as_int, close, is_unanswered, read_number
from .feedback import Feedback, correct, malformed, never_raises, unanswered, wrong

__all__ = ["check_backward_only_count", "check_first_sync", "check_loss_divisor", "expected_calls"]


def expected_calls(k: int, mode: str, buckets: int = 1) -> int:
    """All-reduce calls per update per rank for ``k`` micro-batches, by where ``no_sync()`` sits.

    ``mode`` is one of the notebook script's modes: "every backward", "no_sync()",
    "no_sync() on backward only", "no_sync() except the first".
    """
    if mode in ("every backward", "no_sync() on backward only"):
        return k * buckets
    if mode in ("no_sync()", "no_sync() except the first"):
        return buckets
    raise ValueError(f"unknown mode {mode!r}")


def _as_bool(answer):
    """True or False from a bool, a numpy bool or a one-element bool tensor; None for anything else."""
    if isinstance(answer, bool):
        return answer
    if str(getattr(answer, "dtype", "")) not in ("bool", "torch.bool"):
        return None
    items = answer.reshape(-1).tolist()
    return bool(items[0]) if len(items) == 1 else None


@never_raises
def check_backward_only_count(answer, k: int = 8) -> Feedback:
    """Exercise 1: forward outside ``no_sync()``, backward inside it for all but the last micro-batch."""
    count, problem = read_number(answer, "a whole number: the all-reduce calls per update on one rank", "3",
                                 whole=True)
    if problem is not None:
        return problem
    right = expected_calls(k, "no_sync() on backward only")
    if count == right:
        return correct(f"{right}: DDP decides during the forward pass whether the coming backward synchronizes. "
                       "Every forward here ran outside no_sync(), so every backward all-reduced; the context "
                       "around backward() came too late. Put the forward inside no_sync() too.")
    if count == 1:
        return wrong("that is what the author hoped for. Look at where model(x) runs: outside the with block. "
                     "DDP prepares the gradient synchronization during the forward pass; does no_sync() "
                     "around backward() alone undo that? (Re-read the warning in no_sync's docstring.)")
    if count == 2 * k:
        return wrong("both ranks take part in the same all-reduce call: count the calls on one rank, "
                     "one per backward that synchronizes.")
    if count == k - 1:
        return wrong("the last micro-batch synchronizes in any case (it is outside no_sync()). "
                     "Which of the other backward passes skip the all-reduce here?")
    return wrong(f"count the backward passes whose forward ran outside no_sync(); with k = {k} micro-batches "
                 "how many are there?")


@never_raises
def check_first_sync(answer, k: int = 8) -> Feedback:
    """Exercise 2: ``no_sync()`` everywhere except the first micro-batch. Answer ``(calls, ranks_agree)``."""
    if is_unanswered(answer):
        return unanswered("a pair (calls, ranks_agree), e.g. (3, True)")
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return malformed("give a pair: (all-reduce calls per update on one rank, True or False), e.g. (3, True).")
    calls, agree = as_int(answer[0]), _as_bool(answer[1])
    if calls is None or agree is None:
        return malformed("the pair holds a whole number and a bool, e.g. (3, True).")
    if calls == 1 and agree is False:
        return correct("one all-reduce, as with a correct no_sync() loop -- but at the first micro-batch. It "
                       "averages only that micro-batch's gradient; the other k - 1 are added locally afterwards "
                       "and never averaged, so each rank steps with its own gradient and the replicas drift "
                       "apart. The count is right and the training is wrong: check gradients, not only counts.")
    if calls != 1:
        return wrong("only the first micro-batch's forward and backward run outside no_sync(), so how many "
                     "backward passes synchronize?")
    return wrong("the one all-reduce happens at the first micro-batch. What does it average, and what happens "
                 f"to the gradients of micro-batches 2 to {k}, added on each rank after it?")


@never_raises
def check_loss_divisor(answer, world: int = 2, k: int = 4) -> Feedback:
    """Exercise 3: what each micro-batch's mean loss is divided by under DDP, equal-sized micro-batches."""
    value, problem = read_number(answer, "a number: what each micro-batch's mean loss is divided by", "3")
    if problem is not None:
        return problem
    if not math.isfinite(value):
        return malformed(f"give a finite number such as 3, not {value}.")
    if close(value, 1 / k):
        return wrong(f"{value:g} is 1 / {k}: that is the factor each loss is multiplied by. The question asks for the "
                     "divisor: what do you divide each micro-batch's loss by?")
    answer = value
    if close(answer, k):
        return correct(f"divide by k = {k}: the sum of the k scaled micro-batch losses on a rank is that rank's "
                       f"mean, and DDP's all-reduce divides the sum over the {world} ranks by the world size. "
                       f"Together: the mean over all {world * k} equal micro-batches, the full-batch mean.")
    if close(answer, world * k):
        return wrong(f"DDP's all-reduce already divides by the world size ({world}); dividing by world * k "
                     f"as well makes the gradient {world} times too small.")
    if close(answer, 1):
        return wrong(f"without scaling, each rank sums k = {k} micro-batch means: the gradient is {k} times "
                     "the full-batch mean.")
    if close(answer, world):
        return wrong(f"dividing by the world size is DDP's job (its all-reduce averages). What is left to "
                     f"undo is the sum over the k = {k} micro-batches on each rank.")
    return wrong(f"the rank adds k = {k} micro-batch gradients; DDP then averages over {world} ranks. "
                 "Which divisor makes the result the mean over all micro-batches?")
