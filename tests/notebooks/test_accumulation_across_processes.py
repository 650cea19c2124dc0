"""Notebook 06 (accumulation across processes): DDP accumulation on real processes, and the facts around it.

The training script is the one written out in the notebook (its %%writefile cells); it runs here with two
processes, and the tests check what the notebook states against a reference computed here: the gradients of
three placements of no_sync() equal the single-process full-batch gradient, the fourth (every forward inside
no_sync()) makes no all-reduce and leaves the ranks apart, and the counts are k, 1, k and 0 calls.

The second cases run too: the exercises' loops on four processes and a gradient in several buckets (another k,
another bucket count, another world size, a summed loss), which is also where the rule "divide by k, not by
world x k" is checked at a world size the notebook does not run; and, in one process, DDP's buckets: a single
bucket of unlimited size in the first update by default (and not with find_unused_parameters=True), then buckets
rebuilt in the order the gradients became ready, one of them above bucket_cap_mb. Without DDP: padded
DistributedSampler shards and the zero weights that make a metric exact.
"""

from __future__ import annotations

import contextlib
import gc
import math
import re
import runpy
import textwrap
from pathlib import Path

import ddp_probe
import pytest
import torch
from torch.utils.data import DistributedSampler

from autograd_lab import AllReduceLog, torchrun
from autograd_lab.distributed import free_port
from autograd_lab.exercises import accumulation_across_processes as ex

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_accumulation_across_processes.ipynb"
SCRIPT_NAME = "train_ddp.py"  # the script the notebook writes (the conftest's `script` fixture reads it)
MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/|site-packages)")
LOCAL = "every forward in no_sync()"  # the placement whose backward passes all stay local


@pytest.fixture(scope="module")
def run(script, probed):
    # A pinned port: the notebook uses --standalone, so this covers the other rendezvous path.
    return ddp_probe.torchrun(script, probed, nproc=2, timeout=120, port=free_port())


@pytest.fixture(scope="module")
def full_batch(script):
    """One process, the whole batch, one backward: computed here, not read from the notebook."""
    train = runpy.run_path(str(script))
    model = train["make_model"]()
    x, y = train["make_data"]()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def results(run, part="placements"):
    """(rank 0's result, rank 1's result) for each placement and k (or each weight at k = 5), in the script's order."""
    return list(zip(*(rank[part] for rank in run.ranks)))


# --------------------------------------------------------------------------- the notebook's script, 2 processes


@pytest.mark.slow
def test_the_script_frees_its_ddp_models_before_it_destroys_the_group(run, probed):
    assert ddp_probe.alive_at_destroy(probed, 2) == [0, 0]


@pytest.mark.slow
def test_two_ranks_each_with_half_the_samples(run):
    assert run.world_size == 2
    first = [rank["placements"][0]["samples"] for rank in run.ranks]
    assert first == [list(range(0, 64, 2)), list(range(1, 64, 2))]
    assert run.command.startswith("torchrun ") and "train_ddp.py" in run.command
    assert not MACHINE_PATH.search(run.command)


@pytest.mark.slow
def test_three_placements_give_the_full_batch_gradient_and_every_forward_inside_leaves_the_ranks_apart(
        run, full_batch):
    seen = set()
    for r0, r1 in results(run):
        g0, g1 = torch.tensor(r0["grad"]), torch.tensor(r1["grad"])
        seen.add((r0["placement"], r0["k"]))
        if r0["placement"] == LOCAL:
            # nothing averaged: each rank holds the mean over its own samples only
            assert (g0 - full_batch).abs().max() > 1e-2 and (g0 - g1).abs().max() > 1e-2, r0["k"]
        else:
            torch.testing.assert_close(g0, full_batch, rtol=1e-5, atol=1e-6)
            assert torch.equal(g0, g1), (r0["placement"], r0["k"])
    assert seen == {(p, k) for p in ex.PLACEMENTS if p != "no_sync() but for the first" for k in (2, 4)}


@pytest.mark.slow
def test_the_forward_decides_the_all_reduce_count_and_each_call_is_the_whole_gradient(run, full_batch):
    grad_bytes = full_batch.numel() * full_batch.element_size()
    counts = {}
    for rank in run.ranks:
        for r in rank["placements"]:
            assert len(r["calls"]) == ex._expected_calls(r["k"], r["placement"]), (r["placement"], r["k"])
            assert r["calls"] == [grad_bytes] * len(r["calls"])  # one bucket: the whole gradient
            counts[r["placement"], r["k"]] = len(r["calls"])
    assert counts == {("no_sync() but for the last", 2): 1, ("no_sync() but for the last", 4): 1,
                      ("without no_sync()", 2): 2, ("without no_sync()", 4): 4,
                      ("no_sync() on backward only", 2): 2, ("no_sync() on backward only", 4): 4,
                      (LOCAL, 2): 0, (LOCAL, 4): 0}


@pytest.mark.slow
def test_rule_1_the_share_n_i_over_n_is_exact_and_1_over_k_only_for_equal_micro_batches(run, full_batch):
    """The boundary of rule 1: at k = 5 the 32 samples of a rank split 7, 7, 7, 7, 4; 1 / k is then off, and a
    weight that also divides by the world size halves the gradient (2 ranks). The ranks agree in every case."""
    by_weight = {}
    for r0, r1 in results(run, "weights"):
        assert r0["k"] == 5 and r0["sizes"] == [7, 7, 7, 7, 4] and r0["placement"] == "no_sync() but for the last"
        g0, g1 = torch.tensor(r0["grad"]), torch.tensor(r1["grad"])
        assert torch.equal(g0, g1), r0["weight"]  # nothing looks wrong from the ranks
        by_weight[r0["weight"]] = g0
    assert list(by_weight) == ["n_i / n", "1 / k", "n_i / (n x world)"]
    torch.testing.assert_close(by_weight["n_i / n"], full_batch, rtol=1e-5, atol=1e-6)
    assert float((by_weight["1 / k"] - full_batch).norm() / full_batch.norm()) > 0.01
    torch.testing.assert_close(by_weight["n_i / (n x world)"], full_batch / run.world_size, rtol=1e-5, atol=1e-6)
    for r0, _ in results(run):  # at k = 2 and 4 the micro-batches are equal: n_i / n is 1 / k
        assert len(set(r0["sizes"])) == 1 and r0["weight"] == "n_i / n"


def test_the_notebook_prints_what_the_docstring_warns():
    from torch.nn.parallel import DistributedDataParallel as DDP

    warning = " ".join(DDP.no_sync.__doc__.split("warning::")[1].split())
    assert "forward pass should be included inside the context manager" in warning


# --------------------------------------------------------------------------- the exercises' cases, 4 processes

CASES_SCRIPT = textwrap.dedent('''
    import gc, json, os
    from contextlib import nullcontext

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DistributedSampler

    from autograd_lab import AllReduceLog

    WIDTH = 64  # each layer's weight is WIDTH * WIDTH float32 numbers: 16 KiB, one bucket of that cap


    def model_in(buckets):
        torch.manual_seed(1)
        layers = [torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(buckets)]
        model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=WIDTH * WIDTH * 4 / 2**20)
        return model, AllReduceLog(model)


    def data(n, generator_seed=0):
        g = torch.Generator().manual_seed(generator_seed)
        x = torch.randn(n, WIDTH, generator=g)
        return x, torch.randn(n, WIDTH, generator=g)


    def loss_fn(pred, y, reduction="mean"):
        return torch.nn.functional.mse_loss(pred, y, reduction=reduction)


    def warm_up(model, log, x):
        model(x).sum().backward()          # update 0: DDP rebuilds its buckets after it
        model.zero_grad()
        return log.take()


    def backward_only_loop(model, x, y, k):
        for i, (xb, yb) in enumerate(zip(x.chunk(k), y.chunk(k))):
            loss = loss_fn(model(xb), yb) / k
            with model.no_sync() if i < k - 1 else nullcontext():
                loss.backward()


    def exercise_1(k=6, buckets=3):
        x, y = data(4 * k)
        fresh, fresh_log = model_in(buckets)
        backward_only_loop(fresh, x, y, k)            # the loop as a fresh model's very first update
        first_loop = fresh_log.take()
        model, log = model_in(buckets)
        first = warm_up(model, log, x)
        backward_only_loop(model, x, y, k)
        return {"first loop": len(first_loop), "first update": len(first), "calls": len(log.take())}


    def first_sync_loop(model, x, y, k):
        for i, (xb, yb) in enumerate(zip(x.chunk(k), y.chunk(k))):
            with model.no_sync() if i != 0 else nullcontext():
                (loss_fn(model(xb), yb) / k).backward()


    def exercise_2(k=5, buckets=2):
        model, log = model_in(buckets)
        x, y = data(4 * k, generator_seed=dist.get_rank())   # each rank its own samples
        first_sync_loop(model, x, y, k)               # the loop as the very first update
        first_loop = log.take()
        model.zero_grad()
        first_sync_loop(model, x, y, k)
        grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        return {"first loop": len(first_loop), "calls": len(log.take()), "grad": grad.tolist()}


    def accumulated_gradient(k, micro_batch, reduction, divisor):
        """Each rank: its share of world * k * micro_batch samples, k micro-batches, each loss / divisor."""
        torch.manual_seed(1)
        model = DDP(torch.nn.Linear(WIDTH, 1, bias=False))   # one output: a summed loss sums over samples
        x, y = data(dist.get_world_size() * k * micro_batch)
        y = y[:, :1]
        mine = torch.tensor(list(DistributedSampler(range(len(x)), shuffle=False)))
        for i, idx in enumerate(mine.chunk(k)):
            with model.no_sync() if i < k - 1 else nullcontext():
                (loss_fn(model(x[idx]), y[idx], reduction) / divisor).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()]).tolist()


    def main():
        dist.init_process_group("gloo")
        out = {"exercise 1": exercise_1(), "exercise 2": exercise_2(), "divisors": {}}
        for reduction, divisors in (("sum", [2 * 16, 2, 4 * 2 * 16]), ("mean", [2, 4 * 2])):
            for d in divisors:
                out["divisors"][f"{reduction} / {d}"] = accumulated_gradient(2, 16, reduction, d)
        with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{dist.get_rank()}.json"), "w") as f:
            json.dump(out, f)
        gc.collect()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
''')


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("cases") / "exercise_cases.py"
    path.write_text(CASES_SCRIPT)
    return torchrun(path, nproc=4, timeout=180)


@pytest.mark.slow
def test_exercise_1_backward_only_makes_k_times_buckets_calls(cases):
    for rank in cases.ranks:
        assert rank["exercise 1"]["first update"] == 1  # one bucket in update 0, whatever the cap
        assert rank["exercise 1"]["calls"] == ex._expected_calls(6, "no_sync() on backward only", 3) == 6 * 3
        # as the very first update: the first backward has one bucket, the next forward rebuilds the 3
        assert rank["exercise 1"]["first loop"] == 1 + 5 * 3
    assert ex.check_backward_only_count(cases.ranks[0]["exercise 1"]["calls"]).passed
    fb = ex.check_backward_only_count(cases.ranks[0]["exercise 1"]["first loop"])
    assert not fb.passed and "very first update" in fb.message


@pytest.mark.slow
def test_exercise_2_syncing_at_the_first_micro_batch_makes_one_call_per_bucket_and_leaves_the_ranks_apart(cases):
    calls = {rank["exercise 2"]["calls"] for rank in cases.ranks}
    grads = [torch.tensor(rank["exercise 2"]["grad"]) for rank in cases.ranks]
    agree = all(torch.allclose(g, grads[0]) for g in grads[1:])
    assert calls == {ex._expected_calls(5, "no_sync() but for the first", 2)} == {2} and not agree
    assert ex.check_first_sync((calls.pop(), agree)).passed
    assert {rank["exercise 2"]["first loop"] for rank in cases.ranks} == {1}  # the first update: one bucket
    assert "very first update" in ex.check_first_sync((1, False)).message


def _full_batch_mean_gradient(n):
    """The single-process gradient of the mean loss over all n samples of the cases' data and model."""
    torch.manual_seed(1)
    model = torch.nn.Linear(64, 1, bias=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 64, generator=g)
    y = torch.randn(n, 64, generator=g)[:, :1]
    torch.nn.functional.mse_loss(model(x), y).backward()
    return model.weight.grad.flatten()


@pytest.mark.slow
def test_exercise_3_and_the_rule_divide_by_k_at_four_ranks(cases):
    """4 ranks, k = 2 micro-batches of 16: a summed loss / (k x 16), a mean loss / k give the full-batch mean."""
    full = _full_batch_mean_gradient(4 * 2 * 16)
    got = {name: torch.tensor(g) for name, g in cases.ranks[0]["divisors"].items()}
    right = ex._loss_divisor(2, 16)
    torch.testing.assert_close(got[f"sum / {right}"], full, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got[f"mean / {ex._loss_divisor(2)}"], full, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got["mean / 8"], full / 4, rtol=1e-4, atol=1e-6)  # world x k: 1 / world too small
    torch.testing.assert_close(got["sum / 2"], full * 16, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got["sum / 128"], full / 4, rtol=1e-4, atol=1e-6)
    assert ex.check_loss_divisor(right).passed and not ex.check_loss_divisor(128).passed


# --------------------------------------------------------------------------- DDP's buckets, in one process


@contextlib.contextmanager
def group_of_one():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        # DDP objects sit in reference cycles: collect them before the group goes. A Reducer freed after it frees
        # the last reference to the gloo group, whose destructor then sometimes waits forever for its worker thread.
        gc.collect()
        dist.destroy_process_group()


def _calls_per_update(widths, updates=3, **ddp_options):
    """Bytes of each all-reduce call, per update, for a stack of Linear layers under DDP; and the model's cap."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]), **ddp_options)
    log = AllReduceLog(model)
    sizes = []
    for _ in range(updates):
        model(torch.randn(8, widths[0])).sum().backward()
        sizes.append(log.take())
    for i in range(4):  # k = 4 with no_sync()
        with model.no_sync() if i < 3 else contextlib.nullcontext():
            model(torch.randn(8, widths[0])).sum().backward()
    sizes.append(log.take())
    return sizes, model.bucket_bytes_cap


NOTEBOOK_WIDTHS = [16, 1600, 1600, 1600, 1600, 1600, 1]  # the notebook's 39 MiB model


def test_by_default_update_0_is_one_bucket_and_later_ones_follow_the_ready_order_past_the_cap():
    with group_of_one() as dist:
        (first, second, third, deferred), cap = _calls_per_update(NOTEBOOK_WIDTHS)
        first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    assert len(first) == 1 and sum(second) == first[0] and first[0] > cap  # one bucket, larger than the cap
    assert len(second) > 1 and second == third
    assert second[0] >= first_cap and any(size > cap for size in second)  # a bucket closes once past its limit
    assert len(deferred) == len(second)  # with no_sync(): one call per bucket per update
    assert [round(s / 2**20, 1) for s in second] == [9.8, 29.3, 0.1] and cap == 25 * 2**20


def test_with_find_unused_parameters_the_first_update_is_already_split():
    """The boundary of 'one bucket in update 0': it holds for the default find_unused_parameters=False."""
    with group_of_one():
        (first, second, *_), cap = _calls_per_update(NOTEBOOK_WIDTHS, find_unused_parameters=True)
    assert len(first) > 1 and sum(first) == sum(second)


def test_a_gradient_below_the_first_bucket_size_stays_one_bucket():
    """The notebook's 18 KiB gradient: one call in every update, before and after the rebuild."""
    with group_of_one() as dist:
        sizes, _ = _calls_per_update([16, 256, 1])
        first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    assert [len(s) for s in sizes] == [1, 1, 1, 1] and sizes[0][0] == (16 * 256 + 256 + 256 + 1) * 4 < first_cap


def test_all_reduce_log_refuses_a_plain_model_and_a_second_hook():
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        AllReduceLog(torch.nn.Linear(2, 2))
    from torch.nn.parallel import DistributedDataParallel as DDP

    with group_of_one():
        model = DDP(torch.nn.Linear(2, 2))
        AllReduceLog(model)
        with pytest.raises(RuntimeError, match="one communication hook per model"):
            AllReduceLog(model)
        del model


# --------------------------------------------------------------------------- exact metrics with DistributedSampler


def repeat_weights(n, world, rank, length):
    """1 for a real sample, 0 for a repeat: rank r holds positions r, r + world, ... of the padded list."""
    return torch.tensor([float(rank + j * world < n) for j in range(length)])


def all_reduced_mean(values, n, world, shuffle, weighted, drop_last=False):
    total = count = 0.0
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=3,
                                     drop_last=drop_last)
        idx = list(sampler)
        w = repeat_weights(n, world, rank, len(idx)) if weighted else torch.ones(len(idx))
        total += float((w * values[idx]).sum())
        count += float(w.sum())
    return total / count


@pytest.mark.parametrize("n, world", [(5, 2), (7, 3), (10, 4), (13, 8)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_padding_counts_repeats_and_zero_weights_make_the_metric_exact(n, world, shuffle):
    values = torch.arange(1.0, n + 1) ** 2  # distinct per-sample errors, so a repeat always shows
    exact = float(values.mean())
    assert not math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=False), exact)
    assert not math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=False, drop_last=True), exact)
    assert math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=True), exact, rel_tol=1e-12)


def test_the_zero_weights_mark_exactly_one_copy_of_each_sample_as_real():
    n, world = 11, 4
    seen = []
    for rank in range(world):
        idx = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=1))
        seen += [i for i, w in zip(idx, repeat_weights(n, world, rank, len(idx)).tolist()) if w == 1.0]
    assert sorted(seen) == list(range(n))


def test_the_notebooks_five_samples():
    xs = torch.tensor([4.0, 2.0, 1.0, 3.0, 5.0])  # |y - w x| at w = 1 is x itself
    assert all_reduced_mean(xs, 5, 2, shuffle=False, weighted=False) == pytest.approx(19 / 6)
    assert all_reduced_mean(xs, 5, 2, shuffle=False, weighted=True) == pytest.approx(3.0)
