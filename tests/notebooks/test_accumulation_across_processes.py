"""Notebook 06 (accumulation across processes): DDP accumulation on two real processes, and the facts around it.

The training script is the one written out in the notebook (its %%writefile cells); it runs here with two
processes, and the tests check the facts the notebook states against a reference computed here: the gradients
equal the single-process full-batch gradient, and the all-reduce counts are k without no_sync(), 1 with it.
In one process: one call per bucket, and DDP's bucket rebuild after the first update. Without DDP: padded
DistributedSampler shards and the zero weights that make a metric exact.
"""

from __future__ import annotations

import contextlib
import gc
import math
import re
import runpy
from pathlib import Path

import ddp_probe
import pytest
import torch
from torch.utils.data import DistributedSampler

from autograd_lab.distributed import free_port
from autograd_lab.exercises import accumulation_across_processes as ex
from autograd_lab.timeline import draw_update_timeline

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_accumulation_across_processes.ipynb"
SCRIPT_NAME = "train_ddp.py"  # the script the notebook writes (the conftest's `script` fixture reads it)
MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/|site-packages)")


@pytest.fixture(scope="module")
def run(script, probed):
    # A pinned port: the notebook uses --standalone, so this covers the other rendezvous path.
    return ddp_probe.torchrun(script, probed, nproc=2, timeout=120, port=free_port())


def test_the_script_frees_its_ddp_model_before_it_destroys_the_group(run, probed):
    assert ddp_probe.alive_at_destroy(probed, 2) == [0, 0]


@pytest.fixture(scope="module")
def full_batch(script):
    """One process, the whole batch, one backward: computed here, not read from the notebook."""
    train = runpy.run_path(str(script))
    model = train["make_model"]()
    x, y = train["make_data"]()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def variants(run, rank):
    return {(v["k"], v["mode"]): v for v in run.ranks[rank]["variants"]}


# --------------------------------------------------------------------------- the real script, 2 processes


@pytest.mark.slow
def test_two_ranks_each_with_half_the_samples(run):
    assert run.world_size == 2 and [r["rank"] for r in run.ranks] == [0, 1]
    assert run.ranks[0]["samples"] == list(range(0, 64, 2)) and run.ranks[1]["samples"] == list(range(1, 64, 2))
    assert run.command.startswith("torchrun ") and "train_ddp.py" in run.command
    assert not MACHINE_PATH.search(run.command)


@pytest.mark.slow
def test_accumulated_ddp_gradient_equals_the_full_batch_gradient(run, full_batch):
    for (k, mode), v0 in variants(run, 0).items():
        g0, g1 = torch.tensor(v0["grad"]), torch.tensor(variants(run, 1)[k, mode]["grad"])
        if mode == "no_sync() except the first" and k > 1:
            # synced at the first micro-batch: the rest never averaged, the ranks differ
            assert (g0 - full_batch).abs().max() > 1e-3 and (g0 - g1).abs().max() > 1e-3, (k, mode)
        else:
            torch.testing.assert_close(g0, full_batch, rtol=1e-5, atol=1e-6)
            assert torch.equal(g0, g1), (k, mode)


@pytest.mark.slow
def test_allreduce_count_is_k_without_no_sync_and_1_with_it(run, full_batch):
    grad_bytes = full_batch.numel() * 4
    for rank in (0, 1):
        v = variants(run, rank)
        for k in (1, 2, 4, 8):
            assert v[k, "every backward"]["calls"] == [k] * 5
            assert v[k, "no_sync()"]["calls"] == [1] * 5
            assert v[k, "no_sync() on backward only"]["calls"] == [k] * 5  # forward outside no_sync still syncs
            assert v[k, "no_sync() except the first"]["calls"] == [1] * 5
            for mode in ex_modes():
                assert v[k, mode]["calls"][0] == ex.expected_calls(k, mode)
                assert v[k, mode]["bytes"] == [c * grad_bytes for c in v[k, mode]["calls"]]
    assert run.ranks[0]["bucket_cap_bytes"] == 25 * 2**20 > grad_bytes  # one bucket holds this model


@pytest.mark.slow
def test_timeline_events_are_recorded_per_update(run):
    v = variants(run, 0)[4, "every backward"]
    kinds = [e[0] for e in v["events"]]
    assert kinds.count("forward") == 4 and kinds.count("backward") == 4 and kinds.count("all-reduce") == 4
    assert all(0 <= a <= b for _, a, b in v["events"])
    drawing = draw_update_timeline([variants(run, r)[4, "no_sync()"]["events"] for r in (0, 1)], title="t")
    assert drawing.texts("lane-label")[:2] == ["rank 0 compute", "rank 0 all-reduce"]
    assert len(drawing.of("all-reduce")) == 2 and len(drawing.of("backward")) == 8   # no_sync(): one per rank


def ex_modes():
    return ("every backward", "no_sync()", "no_sync() on backward only", "no_sync() except the first")


def test_one_call_per_bucket_and_no_sync_defers_all_of_them():
    """The notebook's claim for models larger than a bucket, in one process (world size 1, no launch)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    calls = []

    def hook(state, bucket):
        calls.append(bucket.buffer().numel())
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

    def counts():
        # The DDP model lives only in here: it must be freed (returned from, then collected) before
        # destroy_process_group(). A Reducer freed after it frees the last reference to the gloo group, whose
        # destructor then sometimes waits forever for its worker thread (rarely, and only under load).
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                  torch.nn.Tanh(), torch.nn.Linear(64, 1))
        model = DDP(net, bucket_cap_mb=0.01)  # 10 KiB buckets, 34 KiB of gradient
        model.register_comm_hook(None, hook)
        x = torch.randn(8, 64)
        for _ in range(2):  # DDP rebuilds its buckets after the first iteration
            calls.clear()
            model(x).sum().backward()
        per_backward = list(calls)
        calls.clear()
        for i in range(4):
            with model.no_sync() if i < 3 else contextlib.nullcontext():
                model(x).sum().backward()
        return per_backward, list(calls), sum(p.numel() for p in net.parameters())

    try:
        per_backward, per_update, numel = counts()
    finally:
        gc.collect()  # DDP objects sit in reference cycles: returning from counts() does not free the model
        dist.destroy_process_group()
    assert len(per_backward) > 1 and sum(per_backward) == numel
    assert len(per_update) == len(per_backward)  # one call per bucket, once per update


def test_ddp_rebuilds_its_buckets_after_the_first_update_with_a_small_first_bucket():
    """Notebook 06: its constant counts come from an 18 KiB gradient; past the first-bucket size they change."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        calls = []

        def hook(state, bucket):
            calls.append(bucket.buffer().numel() * bucket.buffer().element_size())
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

        def calls_per_update(width):
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.Tanh(), torch.nn.Linear(width, width),
                                      torch.nn.Tanh(), torch.nn.Linear(width, 1))
            model = DDP(net)
            model.register_comm_hook(None, hook)
            grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
            counts = []
            for _ in range(3):
                calls.clear()
                model(torch.randn(4, 16)).sum().backward()
                counts.append(len(calls))
                assert sum(calls) == grad_bytes
            return grad_bytes, counts

        first = dist._DEFAULT_FIRST_BUCKET_BYTES
        small_bytes, small = calls_per_update(64)
        assert small_bytes < first and small == [1, 1, 1]
        big_bytes, big = calls_per_update(768)  # above the first bucket, far below the cap
        assert first < big_bytes < 25 * 2**20 // 4
        assert big[0] == 1 and big[1] > 1 and big[2] == big[1]
    finally:
        gc.collect()  # the two DDP models, in reference cycles, go before the group (see the test above)
        dist.destroy_process_group()


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
