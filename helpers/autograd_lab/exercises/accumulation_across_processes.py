"""Answer checks for notebook 06, accumulation across processes.

The training script (DDP, ``no_sync()``, the accumulation loop) is written out in the notebook. The
answers here follow from how DDP decides to synchronize: at forward time it notes whether the coming
backward synchronizes, and every backward that does all-reduces each bucket once. Each exercise asks
for a case the notebook never ran (another ``k``, another bucket count, another world size, a summed
loss); tests/notebooks/test_accumulation_across_processes.py runs these cases on real processes and
checks them against what DDP did.
"""

from __future__ import annotations

import math

from . import trust
from .answers import as_int, close, is_unanswered, read_number
from .feedback import Feedback, correct, malformed, never_raises, unanswered, wrong

__all__ = ["check_backward_only_count", "check_first_sync", "check_loss_divisor", "_loss_divisor"]

# The placements of no_sync() in the notebook's script, and the slip of exercise 2: for micro-batch i of k,
# (is its forward inside no_sync()?, is its backward?).
PLACEMENTS = {
    "no_sync() but for the last": lambda i, k: (i < k - 1, i < k - 1),
    "without no_sync()": lambda i, k: (False, False),
    "no_sync() on backward only": lambda i, k: (False, i < k - 1),
    "every forward in no_sync()": lambda i, k: (True, i < k - 1),
    "no_sync() but for the first": lambda i, k: (i > 0, i > 0),
}


def _expected_calls(k: int, placement: str, buckets: int = 1) -> int:
    """All-reduce calls per update on one rank for ``k`` micro-batches, by where ``no_sync()`` sits.

    The forward decides: a micro-batch synchronizes exactly when its forward ran outside ``no_sync()``,
    and then it makes one call per bucket. ``placement`` is a key of ``PLACEMENTS``.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; one of {sorted(PLACEMENTS)}")
    return buckets * sum(not PLACEMENTS[placement](i, k)[0] for i in range(k))


def _loss_divisor(k: int, micro_batch: int | None = None) -> int:
    """What each micro-batch loss is divided by under DDP's averaging: ``k`` for a mean loss, and
    ``k * micro_batch`` for a loss summed over ``micro_batch`` samples (equal micro-batches)."""
    return k if micro_batch is None else k * micro_batch


def _as_bool(answer):
    """True or False from a bool, a numpy bool or a one-element bool tensor; None for anything else."""
    if isinstance(answer, bool):
        return answer
    if str(getattr(answer, "dtype", "")) not in ("bool", "torch.bool"):
        return None
    items = answer.reshape(-1).tolist()
    return bool(items[0]) if len(items) == 1 else None


@never_raises
def check_backward_only_count(answer, k: int = 6, buckets: int = 3) -> Feedback:
    """Exercise 1: forward outside ``no_sync()``, backward inside it for all but the last micro-batch."""
    count, problem = read_number(answer, "a whole number: the all-reduce calls per update on one rank", "3",
                                 whole=True)
    if problem is not None:
        return problem
    right = _expected_calls(k, "no_sync() on backward only", buckets)
    if count == right:
        return correct(f"{right} = {k} x {buckets}: DDP decides during the forward pass whether the coming backward "
                       "synchronizes. Every forward here ran outside no_sync(), so every backward all-reduced, once "
                       "per bucket; the context around backward() came too late. Put the forward inside it too.")
    hints = {
        buckets: "that is what the author hoped for: one synchronizing backward. Look at where model(x) runs: "
                 "outside the with block. DDP prepares the synchronization during the forward pass; does "
                 "no_sync() around backward() alone undo that?",
        1: f"one call carries one bucket, and this gradient is in {buckets} buckets. And look at where model(x) "
           "runs: outside the with block.",
        k: f"{k} backward passes synchronize, right -- and each makes one all-reduce call per bucket: "
           f"{buckets} of them.",
        (k - 1) * buckets: "those are the backward passes inside no_sync(), right: their forwards ran outside it. "
                           "The last micro-batch, outside it altogether, synchronizes as well.",
        2 * right: "both ranks take part in the same all-reduce call: count the calls on one rank.",
        1 + (k - 1) * buckets: "that is the very first update: its first backward all-reduces DDP's one starting "
                               f"bucket, and the next forward rebuilds the {buckets} buckets. The question is about "
                               f"the updates after it, where every synchronizing backward makes {buckets} calls.",
    }
    if count in hints:
        return wrong(hints[count])
    return wrong(f"count the backward passes whose forward ran outside no_sync() (k = {k} micro-batches), "
                 f"and the calls each makes: one per bucket.")


@never_raises
def check_first_sync(answer, k: int = 5, buckets: int = 2) -> Feedback:
    """Exercise 2: ``no_sync()`` everywhere except the first micro-batch. Answer ``(calls, ranks_agree)``."""
    if is_unanswered(answer):
        return unanswered("a pair (calls, ranks_agree), e.g. (3, True)")
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return malformed("give a pair: (all-reduce calls per update on one rank, True or False), e.g. (3, True).")
    calls, agree = as_int(answer[0]), _as_bool(answer[1])
    if calls is None or agree is None:
        return malformed("the pair holds a whole number and a bool, e.g. (3, True).")
    right = _expected_calls(k, "no_sync() but for the first", buckets)
    if calls == right and agree is False:
        return correct(f"{right} calls, one per bucket, as in a right no_sync() loop -- but at the first "
                       "micro-batch. They average only that micro-batch's gradient; the other "
                       f"{k - 1} are added on each rank afterwards and never averaged, so each rank steps with "
                       "its own gradient and the copies drift apart. The count is right and the training is "
                       "wrong: check gradients, not only counts.")
    if calls == 1:
        return wrong(f"one synchronizing backward, right -- but it makes one call per bucket, and there are "
                     f"{buckets}. (One call is the very first update's count, when DDP still has one bucket; the "
                     "question is about the updates after it.)")
    if calls != right:
        return wrong("only the first micro-batch's forward and backward run outside no_sync(): how many "
                     "backward passes synchronize, and how many calls does each make?")
    return wrong("the synchronization happens at the first micro-batch. What does it average, and what happens "
                 f"to the gradients of micro-batches 2 to {k}, added on each rank after it?")


@never_raises
def check_loss_divisor(answer, world: int = 4, k: int = 2, micro_batch: int = 16) -> Feedback:
    """Exercise 3: what each micro-batch's *summed* loss is divided by under DDP, equal micro-batches."""
    value, problem = read_number(answer, "a number: what each micro-batch's loss is divided by", "3")
    if problem is not None:
        return problem
    if not math.isfinite(value):
        return malformed(f"give a finite number such as 3, not {value}.")
    right = _loss_divisor(k, micro_batch)
    if close(value, right):
        return correct(f"divide by k x {micro_batch} = {right}: the {k} summed losses on a rank add up to the sum "
                       f"over its {right} samples, dividing by {right} makes that the rank's mean, and DDP's "
                       f"all-reduce averages the {world} ranks' means: the mean over all {world * right} samples.")
    if close(value, 1 / right):
        return wrong(f"{value:g} is 1 / {right}: that is the factor each loss is multiplied by. The question asks "
                     "for the divisor.")
    hints = {
        world * right: f"that is every sample of every rank. DDP's all-reduce already divides by the world size "
                       f"({world}); dividing by it as well makes the gradient {world} times too small.",
        k: f"dividing by k = {k} is right for a mean loss. These losses are sums over {micro_batch} samples each, "
           "so the gradient would still be that many times too large.",
        micro_batch: f"that turns each sum into a micro-batch mean, but a rank adds k = {k} of them: the gradient "
                     f"would be {k} times too large.",
        world * k: f"{world * k} = world x k divides by the world size, which DDP's all-reduce already does, and "
                   f"treats the losses as means; they are sums over {micro_batch} samples each.",
        1: f"without scaling, each rank's gradient is the sum over its {right} samples, {right} times the mean.",
        world: f"dividing by the world size is DDP's job. What is left is the sum over each rank's {right} "
               "samples.",
    }
    for wrong_value, hint in hints.items():
        if close(value, wrong_value):
            return wrong(hint)
    return wrong(f"each rank adds k = {k} losses, each a sum over {micro_batch} samples; DDP then averages over "
                 f"the {world} ranks. Which divisor makes the result the mean over all samples?")


trust.record(__name__)  # last: every name above is defined (see .trust)
