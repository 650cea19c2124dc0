"""Answer checks for notebook 06, accumulation across processes.

The training script (DDP, ``no_sync()``, the accumulation loop) is written out in the notebook. Each exercise asks
for what the notebook never ran:

- ``check_ddp_accumulation(accumulate)``: the learner's own DDP accumulation loop, for a loss that *sums* over a
  micro-batch and micro-batches of unequal sizes. It runs on two real processes (gloo, started by the course's
  ``torchrun``), on fresh data every time, on a model whose gradient DDP splits into several buckets; it passes
  when both ranks end with the full batch's gradient and DDP made one all-reduce call per bucket in the update.
  The learner's function travels to the ranks as its code and the globals it reads (``_portable``).
- ``check_first_sync((calls, ranks_agree))``: the count of a loop that synchronizes at the first micro-batch, and
  whether the ranks agree. It follows from how DDP decides to synchronize: at forward time it notes whether the
  coming backward synchronizes, and every backward that does all-reduces each bucket once.

tests/notebooks/test_accumulation_across_processes.py runs the second on real processes too.
"""

from __future__ import annotations

import builtins
import gc
import importlib
import json
import marshal
import math
import os
import pickle
import tempfile
import types
from pathlib import Path

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ..distributed import RESULTS_ENV, DistributedRunError, torchrun
from . import trust
from .answers import as_int, close, close_in_norm, is_unanswered, read_function
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .loops import pass_mistake, record_passes

__all__ = ["check_ddp_accumulation", "check_first_sync"]

# The placements of no_sync() in the notebook's script (tests/exercises runs the script's own table beside this one),
# and the slip of exercise 2: for micro-batch i of k, (is its forward inside no_sync()?, is its backward?).
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


def _as_bool(answer):
    """True or False from a bool, a numpy bool or a one-element bool tensor; None for anything else."""
    if isinstance(answer, bool):
        return answer
    if str(getattr(answer, "dtype", "")) not in ("bool", "torch.bool"):
        return None
    items = answer.reshape(-1).tolist()
    return bool(items[0]) if len(items) == 1 else None


_FIRST = "no_sync() but for the first"

# Misreadings of exercise 2, each the pair (calls, ranks_agree) that it gives for k micro-batches and ``buckets``
# buckets; None where it gives either.
_FIRST_SYNC_DIAGNOSES = (
    Diagnosis("one call per synchronizing backward", lambda k, buckets: (_expected_calls(k, _FIRST), None),
              lambda k, buckets: f"one synchronizing backward, right -- but it makes one call per bucket, and there "
                                 f"are {buckets}. (One call is the very first update's count, when DDP still has one "
                                 "bucket; the question is about the updates after it.)"),
    Diagnosis("the synchronization averages every micro-batch",
              lambda k, buckets: (_expected_calls(k, _FIRST, buckets), True),
              lambda k, buckets: "the synchronization happens at the first micro-batch. What does it average, and "
                                 f"what happens to the gradients of micro-batches 2 to {k}, added on each rank after "
                                 "it?"),
)


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
    right = _expected_calls(k, _FIRST, buckets)
    if calls == right and agree is False:
        return correct(f"{right} calls, one per bucket, as in a right no_sync() loop -- but at the first "
                       "micro-batch. They average only that micro-batch's gradient; the other "
                       f"{k - 1} are added on each rank afterwards and never averaged, so each rank steps with "
                       "its own gradient and the copies drift apart. The count is right and the training is "
                       "wrong: check gradients, not only counts.")

    def gives(variant):
        variant_calls, variant_agree = variant(k, buckets)
        return variant_calls == calls and variant_agree in (None, agree)

    return wrong(hint_for(_FIRST_SYNC_DIAGNOSES, gives, k=k, buckets=buckets)
                 or "only the first micro-batch's forward and backward run outside no_sync(): how many backward "
                 "passes synchronize, and how many calls does each make?")


# --------------------------------------------------------------------------- exercise 1: the loop, on two ranks
#
# The learner's accumulate(model, loss_fn, micro_batches) runs on two real processes (gloo, the course's torchrun
# launcher): three problems, fresh data every time, on a DDP model of several buckets. Each rank returns its
# gradient, how many all-reduce calls DDP made and what the loop's watcher saw; the check compares the gradient
# with the full batch's, recomputed here from the same seed after the ranks have finished.

_LOOP_SIGNATURE = "accumulate(model, loss_fn, micro_batches)"
_LOOP_WORLD = 2
_LOOP_SIZES = ((3, 3, 3, 3), (6, 2, 4), (2, 5))  # each rank's micro-batches (their sample counts), per problem
_LOOP_WIDTHS = (8, 32, 32, 32, 1)
_LOOP_CAP_MB = 32 * 32 * 4 / 2**20  # one hidden weight per bucket: DDP splits this model's gradient into 3
_LOOP_TIMEOUT_S = 120.0  # the whole run, process start included
_LOOP_GROUP_TIMEOUT_S = 20  # a collective that one rank never joins fails after this, not after 30 minutes
_SHIP_DEPTH = 3  # a learner's function may call functions of the notebook, which may call more: this deep


class _CannotShip(Exception):
    """A learner's function reads something the check cannot send to another process."""


def _names_read(code) -> set:
    """The global names a code object (and the functions and comprehensions inside it) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def _portable(fn, depth: int = 0) -> dict:
    """``fn`` as another Python process can rebuild it: its code (marshal) and the globals it reads -- modules by
    name, functions of the notebook in the same form, anything else pickled. Raises ``_CannotShip``."""
    if not isinstance(fn, types.FunctionType):
        raise _CannotShip(f"give a function defined with def (or a lambda), not {type(fn).__name__}: the check "
                          "sends its code to two other processes.")
    if fn.__closure__:
        raise _CannotShip(f"{fn.__name__} uses variables of an enclosing function; define it at the top level of "
                          "a cell, so that the check can send its code to two other processes.")
    shipped = {}
    for name in sorted(_names_read(fn.__code__)):
        if name not in fn.__globals__ or name == fn.__name__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            shipped[name] = ("module", value.__name__)
        elif isinstance(value, types.FunctionType) and value.__module__ in ("__main__", None, fn.__module__):
            if depth >= _SHIP_DEPTH:
                raise _CannotShip(f"{fn.__name__} calls functions nested more than {_SHIP_DEPTH} deep.")
            shipped[name] = ("function", _portable(value, depth + 1))
        else:
            try:
                data = pickle.dumps(value)
            except Exception as err:  # noqa: BLE001 -- anything a learner's global can raise when pickled
                raise _CannotShip(f"{fn.__name__} reads {name}, which cannot be sent to another process "
                                  f"({describe_error(err)}). Create it inside the function.") from None
            if b"__main__" in data:  # a class or object defined in the notebook: the other process lacks it
                raise _CannotShip(f"{fn.__name__} reads {name}, defined in this notebook, which another process "
                                  "does not have. Create it inside the function.")
            shipped[name] = ("pickle", data)
    return {"name": fn.__name__, "code": marshal.dumps(fn.__code__), "defaults": pickle.dumps(fn.__defaults__),
            "kwdefaults": pickle.dumps(fn.__kwdefaults__), "globals": shipped}


def _rebuild(portable: dict):
    """The function ``_portable`` packed, rebuilt in this process."""
    namespace = {"__builtins__": builtins, "__name__": "__main__"}
    for name, (kind, value) in portable["globals"].items():
        if kind == "module":
            namespace[name] = importlib.import_module(value)
        elif kind == "function":
            namespace[name] = _rebuild(value)
        else:
            namespace[name] = pickle.loads(value)
    fn = types.FunctionType(marshal.loads(portable["code"]), namespace, portable["name"],
                            pickle.loads(portable["defaults"]))
    fn.__kwdefaults__ = pickle.loads(portable["kwdefaults"])
    namespace[portable["name"]] = fn  # a function that calls itself finds itself
    return fn


def _loop_problem(seed: int, sizes: tuple, world: int = _LOOP_WORLD):
    """The model to start from (plain, not wrapped) and each rank's micro-batches, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    layers = []
    for a, b in zip(_LOOP_WIDTHS, _LOOP_WIDTHS[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    model = nn.Sequential(*layers[:-1])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    batches = [[(torch.randn(m, _LOOP_WIDTHS[0], generator=g), torch.randn(m, 1, generator=g)) for m in sizes]
               for _ in range(world)]
    return model, batches


def _summed_squared_error(output, target):
    """The exercise's loss: the sum of the squared errors over a micro-batch's samples."""
    return ((output - target) ** 2).sum()


class _SummedLoss:
    """The loss the learner's loop is given; it notes how many samples each call compares."""

    def __init__(self):
        self.sizes = []

    def __call__(self, output, target):
        self.sizes.append(len(output) if output.dim() else 1)
        return _summed_squared_error(output, target)


def _flat_grad(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                      for p in model.parameters()])


def _counted_all_reduce(calls: list, bucket):
    """A DDP communication hook: notes the call, then does what DDP does without a hook."""
    calls.append(bucket.buffer().numel())
    return default_hooks.allreduce_hook(None, bucket)


def _rank_problem(fn, seed: int, sizes: tuple) -> dict:
    """On this rank: a fresh DDP model with its buckets formed, then one update of the learner's loop, watched."""
    from torch.nn.parallel import DistributedDataParallel

    rank = torch.distributed.get_rank()
    plain, batches = _loop_problem(seed, sizes)
    model = DistributedDataParallel(plain, bucket_cap_mb=_LOOP_CAP_MB)
    calls: list = []
    model.register_comm_hook(calls, _counted_all_reduce)
    everything = torch.cat([x for x, _ in batches[rank]])
    for _ in range(2):  # update 0 all-reduces one bucket of everything; the next forward forms DDP's buckets
        model(everything).sum().backward()
    buckets = len(calls) - 1
    model.zero_grad(set_to_none=True)
    calls.clear()
    loss_fn = _SummedLoss()
    try:
        with record_passes(model.module) as passes:
            fn(model, loss_fn, [(x.clone(), y.clone()) for x, y in batches[rank]])
    except Exception as err:  # noqa: BLE001 -- the learner's code: reported, never raised
        return {"error": describe_error(err)}
    mistake = pass_mistake(_loop_setting(sizes), passes, micro_batches=len(sizes), largest=max(sizes),
                           forwards=len(passes.forward_sizes), loss_sizes=loss_fn.sizes)
    return {"error": None, "calls": len(calls), "buckets": buckets, "grad": _flat_grad(plain).tolist(),
            "passes": None if mistake is None else mistake.message}


def _rank_main(payload_path: str) -> None:
    """What each rank runs (the script ``_run_on_ranks`` writes): every function on every problem."""
    import datetime

    dist = torch.distributed
    with open(payload_path, "rb") as f:
        payload = pickle.load(f)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=_LOOP_GROUP_TIMEOUT_S))
    try:
        runs = []
        for portable in payload["functions"]:
            fn, problems = _rebuild(portable), []
            for sizes in _LOOP_SIZES:
                problems.append(_rank_problem(fn, payload["seed"], sizes))
                if problems[-1]["error"]:
                    break
            runs.append(problems)
        with open(os.path.join(os.environ[RESULTS_ENV], f"rank{dist.get_rank()}.json"), "w") as f:
            json.dump(runs, f)
    finally:
        gc.collect()  # the DDP models (in reference cycles) before the group they use
        dist.destroy_process_group()


_RANK_SCRIPT = """\
import sys

from autograd_lab.exercises.accumulation_across_processes import _rank_main

_rank_main(sys.argv[1])
"""


def _run_on_ranks(portables: list, seed: int, timeout: float = _LOOP_TIMEOUT_S) -> list:
    """Each function's results on two ranks: for function j, a list of (rank 0's, rank 1's) result per problem.
    Raises ``DistributedRunError`` when the run fails or runs out of time."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="autograd-lab-check-") as folder:
        script = Path(folder) / "accumulate_on_two_ranks.py"
        script.write_text(_RANK_SCRIPT)
        payload = Path(folder) / "payload.pickle"
        payload.write_bytes(pickle.dumps({"functions": portables, "seed": seed}))
        run = torchrun(script, payload.name, nproc=_LOOP_WORLD, timeout=timeout, env={"PYTHONPATH": path})
    return [list(zip(*problems)) for problems in zip(*run.ranks)]


def _loop_setting(sizes) -> str:
    return f"On {_LOOP_WORLD} ranks, each with micro-batches of {', '.join(map(str, sizes))} samples"


def _weighted_gradient(seed: int, sizes: tuple, weight) -> torch.Tensor:
    """What DDP ends with when each rank scales micro-batch i's summed loss by ``weight(n_i, n, k, world)``: the
    mean over the ranks of each rank's weighted sum."""
    model, batches = _loop_problem(seed, sizes)
    n, k = sum(sizes), len(sizes)
    for rank_batches in batches:
        for x, y in rank_batches:
            (_summed_squared_error(model(x), y) * weight(len(x), n, k, _LOOP_WORLD) / _LOOP_WORLD).backward()
    return _flat_grad(model)


# How a loop can scale its summed losses wrongly: each row's variant is the weight(n_i, n, k, world) it gives
# micro-batch i's summed loss, its hint quotes n, k and world.
_SCALING_DIAGNOSES = (
    Diagnosis("not divided", lambda n_i, n, k, world: 1.0,
              "each summed loss went into backward() as it is, so each rank's gradient is the sum over its {n} "
              "samples: {n} times their mean. Divide each micro-batch's loss by the rank's sample count.".format),
    Diagnosis("divided by k", lambda n_i, n, k, world: 1 / k,
              "dividing by k = {k} suits losses that are micro-batch means; loss_fn sums over a micro-batch's "
              "samples. Divide by the rank's sample count instead.".format),
    Diagnosis("divided by its size", lambda n_i, n, k, world: 1 / n_i,
              "dividing each sum by len(x) makes it that micro-batch's mean, and the {k} means then add up: {k} times "
              "too much. Divide by the rank's sample count.".format),
    Diagnosis("divided by every sample", lambda n_i, n, k, world: 1 / (n * world),
              "dividing by all the samples of all {world} ranks counts the ranks twice: DDP's all-reduce already "
              "divides by the world size. Divide by the rank's own sample count.".format),
    Diagnosis("mean of the means", lambda n_i, n, k, world: 1 / (k * n_i),
              "dividing each sum by k x len(x) averages the micro-batch means, which weighs a small micro-batch like a "
              "large one: its samples count more. Divide each sum by the rank's sample count.".format),
)


def _placement_mistake(setting: str, sizes: tuple, r0: dict, r1: dict):
    """A loop whose all-reduce calls, or whose ranks' disagreement, show where no_sync() sits: the hint, or None."""
    k, buckets, calls = len(sizes), r0["buckets"], r0["calls"]
    agree = close(torch.tensor(r0["grad"]), torch.tensor(r1["grad"]), rtol=1e-5, atol=1e-7)
    if calls == 0:
        return wrong(f"{setting}, DDP made no all-reduce call: the last micro-batch ran inside no_sync() too (or "
                     "its forward did), so every rank kept its own gradient and the ranks now differ. Run all but "
                     "the last micro-batch inside model.no_sync(), and the last one outside it.")
    if not agree:
        return wrong(f"{setting}, DDP made {calls} calls, one round, but the ranks hold different gradients: the "
                     "micro-batch that ran outside no_sync() was not the last, so the ones after it were added on "
                     "each rank and never averaged. Synchronize at the last micro-batch.")
    if calls == k * buckets and k > 1:
        return wrong(f"{setting}, DDP made {calls} all-reduce calls: all {k} micro-batches synchronized, one call "
                     f"per bucket ({buckets}) each. Run the forward and backward of every micro-batch but the last "
                     "inside model.no_sync(); DDP decides in the forward pass, so a no_sync() around backward() "
                     "alone comes too late.")
    if calls != buckets:
        return wrong(f"{setting}, DDP made {calls} all-reduce calls; one update needs one round: one call per "
                     f"bucket ({buckets}), at the last micro-batch.")
    return None


def _scaling_mistake(setting: str, sizes: tuple, seed: int, grad: torch.Tensor):
    """The hint for a gradient that is not the full batch's, naming the scaling it matches; None when right."""
    def gives(weight):  # on the whole vector: the ranks sum each entry's terms in another order than one process
        return close_in_norm(grad, _weighted_gradient(seed, sizes, weight), rtol=1e-4, atol=1e-6)

    if gives(lambda n_i, n, k, world: 1 / n):  # the rank's samples: right
        return None
    hint = hint_for(_SCALING_DIAGNOSES, gives, n=sum(sizes), k=len(sizes), world=_LOOP_WORLD)
    return wrong(f"{setting}, " + (hint or "the ranks agree, but their gradient is not that of the mean loss over all "
                                   "samples of all ranks. Each rank's micro-batches must add up to its own mean: scale "
                                   "each summed loss by 1 / (the rank's sample count), and keep every micro-batch's "
                                   "gradient in .grad."))


def _judge_loop(problems: list, seed: int):
    """The first mistake of one function's run on the ranks (a list of (rank 0, rank 1) results), or None."""
    for sizes, (r0, r1) in zip(_LOOP_SIZES, problems):
        setting = _loop_setting(sizes)
        error = r0.get("error") or r1.get("error")
        if error:
            extra = (" The check runs your function's code in two other processes: it brings the modules, "
                     "functions and values your function reads from the notebook; anything else, create inside "
                     "the function." if error.startswith("NameError") else "")
            return wrong(f"{setting}, your function raised {error}.{extra}")
        if r0["passes"] or r1["passes"]:
            return wrong(r0["passes"] or r1["passes"])
        mistake = _placement_mistake(setting, sizes, r0, r1)  # (a wrong Feedback is falsy: no `or` chain)
        if mistake is None:
            mistake = _scaling_mistake(setting, sizes, seed, torch.tensor(r0["grad"]))
        if mistake is not None:
            return mistake
    return None


@never_raises
def check_ddp_accumulation(accumulate) -> Feedback:
    """Exercise 1: the learner's DDP accumulation loop, run on two real processes against the full batch."""
    problem = read_function(accumulate, f"your function (answer = accumulate), {_LOOP_SIGNATURE}", _LOOP_SIGNATURE, 3)
    if problem is not None:
        return problem
    try:
        portable = _portable(accumulate)
    except _CannotShip as err:
        return malformed(str(err))
    seed = trust.fresh_seed()  # fresh data on every check: no loop can be fitted to it
    try:
        (problems,) = _run_on_ranks([portable], seed)
    except DistributedRunError as err:
        return wrong(f"the run on {_LOOP_WORLD} processes failed ({err.reason}): {err}")
    return _verdict(problems, seed)


def _verdict(problems: list, seed: int) -> Feedback:
    """The check's answer for one function's run on the ranks: its first mistake, or what the right loop did."""
    mistake = _judge_loop(problems, seed)
    if mistake is not None:
        return mistake
    buckets = problems[0][0]["buckets"]
    tried = "; ".join(", ".join(map(str, sizes)) for sizes in _LOOP_SIZES)
    return correct(f"on {_LOOP_WORLD} real processes and {len(_LOOP_SIZES)} fresh problems (micro-batches of {tried} "
                   f"samples per rank), both ranks ended with the full batch's gradient, and DDP made "
                   f"{buckets} all-reduce calls per update, one per bucket: one round of communication, at the "
                   "last micro-batch. Each summed loss divided by the rank's sample count makes the rank's mean; "
                   "DDP's average over the ranks makes the mean over all samples, because every rank held as many "
                   "samples. With unequal counts, divide by N / world instead, N all-reduced over the ranks.")


trust.record(__name__)  # last: every name above is defined (see .trust)
