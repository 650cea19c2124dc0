"""Notebook 06: where its rules stop holding, each limit as the notebook states it.

- a backward all-reduces when the most recent forward before it ran outside no_sync(), whichever graph it runs
  through (cells pitfall-after-md and outro);
- FSDP2's reduce-scatter averages the gradient over the ranks (deeper-md);
- rule 1, n_i / n, gives the full-batch gradient only when every rank holds as many samples; with unequal ranks
  N / world does (ddp-md, scale, scale-after, outro, exercise 1's prompt and check);
- FSDP gathers for every forward and backward only at its defaults; the knobs it names exist (fsdp-md);
- on a cluster the data moves to the GPU too (scale-out-md);
- beside one GPU the two ranks stay on the CPU: NCCL refuses two ranks on one device (intro; checked on a GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_accumulation_across_processes import group_of_one

from autograd_lab import AllReduceLog
from autograd_lab.exercises import accumulation_across_processes as ex

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_accumulation_across_processes.ipynb"


def source(cell_id: str) -> str:
    cell = next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if c.get("id") == cell_id)
    return " ".join("".join(cell["source"]).split())


def output(cell_id: str) -> str:
    cell = next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if c.get("id") == cell_id)
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def _calls_after_each_backward(order):
    """All-reduce calls made by each backward, for forwards and backwards in ``order`` on a one-process DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    log = AllReduceLog(model)
    x = torch.randn(8, 16)
    model(x).sum().backward()  # update 0 forms the buckets
    log.take()
    model.zero_grad()
    losses, calls = {}, {}
    for step, name in order:
        if step == "forward inside":
            with model.no_sync():
                losses[name] = model(x).sum()
        elif step == "forward outside":
            losses[name] = model(x).sum()
        else:
            losses[name].backward()
            calls[name] = len(log.take())
    return calls


def test_the_most_recent_forward_decides_the_next_backward_not_the_forward_of_its_graph():
    with group_of_one():
        interleaved = _calls_after_each_backward(
            [("forward inside", "A"), ("forward outside", "B"), ("backward", "A"), ("backward", "B")])
        together = _calls_after_each_backward([("forward inside", "A"), ("backward", "A"),
                                               ("forward outside", "B"), ("backward", "B")])
    assert interleaved == {"A": 1, "B": 0}  # A's forward was inside no_sync(), yet A's backward all-reduces
    assert together == {"A": 0, "B": 1}
    told = source("pitfall-after-md")
    assert "wherever that backward runs" not in told and "**most recent** forward" in told
    assert "`A.backward()` all-reduces and `B.backward()` does not" in told
    outro = source("outro")
    assert "keeps it local even when the backward runs outside" not in outro
    assert "the most recent forward before it ran outside `no_sync()`" in outro


def test_fsdp2_reduce_scatter_averages_over_the_ranks():
    from torch.distributed import ReduceOp
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    class TwoRanks:
        def size(self):
            return 2

    for dtype in (torch.float32, torch.bfloat16):
        _, _, reduce_scatter_op, _ = _fsdp_collectives._get_gradient_divide_factors(TwoRanks(), None, dtype)
        assert reduce_scatter_op == ReduceOp.AVG
    told = source("deeper-md")
    assert "the sum over the ranks" not in told and "the mean over the ranks (`ReduceOp.AVG`" in told


def _ddp_gradient(per_rank: list, divide: list) -> torch.Tensor:
    """DDP's result for a summed loss: each rank's per-sample gradients summed / its divisor, averaged over ranks."""
    return torch.stack([g.sum(dim=0) / d for g, d in zip(per_rank, divide)]).mean(dim=0)


@pytest.mark.parametrize("counts", [(40, 24), (5, 11, 20)])
def test_rule_1_needs_equal_ranks_and_n_over_world_fixes_unequal_ones(counts):
    g = torch.Generator().manual_seed(sum(counts))
    per_sample = torch.randn(sum(counts), 7, generator=g)
    full = per_sample.mean(dim=0)
    ranks = list(per_sample.split(list(counts)))
    world, total = len(counts), sum(counts)
    own = _ddp_gradient(ranks, list(counts))
    assert (own - full).norm() / full.norm() > 0.05
    torch.testing.assert_close(_ddp_gradient(ranks, [total / world] * world), full)
    even = torch.randn(16 * world, 7, generator=g)  # the boundary: equal ranks, each rank's own n is exact
    torch.testing.assert_close(_ddp_gradient(list(even.split(16)), [16] * world), even.mean(dim=0))


def test_the_notebook_states_rule_1s_condition_and_measures_both_divisors():
    assert "every rank to hold the same number of samples" in source("ddp-md")
    assert "`n_i x world / N`" in source("ddp-md") and "notebook 07" in source("ddp-md")
    assert "ranks holding unequal numbers of samples" in source("intro")
    assert "Only when every rank holds as many samples" in source("outro")
    lines = [line for line in output("scale").splitlines() if line.startswith("ranks of 40 and 24")]
    own, fixed = (float(line.split()[-2].rstrip("%")) for line in lines)
    assert own > 5 and fixed == 0.0


def test_exercise_1_gives_every_rank_the_same_samples_as_its_prompt_says():
    for sizes in ex._LOOP_SIZES:
        _, batches = ex._loop_problem(1, sizes)
        assert len({sum(len(x) for x, _ in rank) for rank in batches}) == 1
    assert "every rank with the same sizes, so the same number of samples" in source("ex1-md")


def test_fsdp_gathers_every_time_only_at_its_defaults_and_the_knobs_it_names_exist():
    import inspect

    from torch.distributed.fsdp import FSDPModule, fully_shard

    assert "reshard_after_forward" in inspect.signature(fully_shard).parameters
    assert hasattr(FSDPModule, "set_reshard_after_backward")
    told = source("fsdp-md")
    assert "at its defaults FSDP gathers" in told
    assert "`fully_shard(layer, reshard_after_forward=False)`" in told and "`set_reshard_after_backward(False)`" in told


def test_on_a_cluster_the_data_moves_to_the_gpu_too():
    told = source("scale-out-md")
    assert "Nothing in the accumulation loop changes" not in told
    assert "`x.cuda(local_rank)`, `y.cuda(local_rank)`" in told


def test_the_notebook_keeps_its_two_ranks_on_the_cpu_beside_one_gpu_and_says_why():
    told = source("intro")
    assert "two processes on the CPU (the gloo backend)" in told
    assert "On a machine with one GPU, keep the two ranks on the CPU" in told
    assert "NCCL gives each rank a GPU of its own and refuses two ranks on one device" in told


TWO_RANKS_ON_ONE_GPU = '''
import torch
import torch.distributed as dist

torch.cuda.set_device(0)                 # both ranks on the first GPU
dist.init_process_group("nccl")
t = torch.ones(1, device="cuda:0")
dist.all_reduce(t)                       # NCCL sets up its communicator here
torch.cuda.synchronize()
dist.destroy_process_group()
'''


def test_nccl_refuses_two_ranks_on_one_gpu(gpu, tmp_path):
    """The fact the intro states, on a GPU: two NCCL ranks on one device fail, with NCCL's reason."""
    from autograd_lab import DistributedRunError, torchrun

    script = tmp_path / "two_ranks_one_gpu.py"
    script.write_text(TWO_RANKS_ON_ONE_GPU)
    with pytest.raises(DistributedRunError) as failed:
        torchrun(script, nproc=2, timeout=120)
    said = (str(failed.value) + failed.value.tail).lower()
    assert failed.value.reason == "rank failed" and ("duplicate gpu" in said or "invalid usage" in said), said
