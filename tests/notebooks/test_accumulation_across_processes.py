"""Notebook 06 (accumulation across processes): DDP accumulation on real processes, and the facts around it.

The training scripts are the ones written out in the notebook (its %%writefile cells); they run here with two
processes, and the tests check what the notebook states against a reference computed here: the gradients of
three placements of no_sync() equal the single-process full-batch gradient, the fourth (every forward inside
no_sync()) makes no all-reduce and leaves the ranks apart, and the counts are k, 1, k and 0 calls. FSDP2's run
(train_fsdp.py) counts its all-gathers and reduce-scatters, and a probe of our own checks what it keeps between
micro-batches, on the notebook's model and on a second one (one launch: the probe runs the script's main() first).

The second cases run too: exercise 2's loop on three processes and a gradient in several buckets, where the rule
"divide by k, not by world x k" (and a summed loss divided by the rank's sample count) is also checked at a world
size the notebook does not run; and, in one process, DDP's buckets: the first bucket capped at 1 MiB only while
bucket_cap_mb is unset, on the notebook's model and on a 39 MiB one; one bucket of unlimited size in the first
update (not with find_unused_parameters=True); buckets that close past their cap.

Last, the notebook as a learner runs it: in a learner's copy of the course, cell after cell, each reveal cell
uncommented after the cells above it have run: its %load finds the worked solution, which passes its check.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import json
import re
import runpy
import textwrap
from pathlib import Path

import ddp_probe
import pytest
import torch

from autograd_lab import AllReduceLog, torchrun
from autograd_lab.distributed import free_port
from autograd_lab.exercises import accumulation_across_processes as ex

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "06_accumulation_across_processes.ipynb"
SCRATCH = "scratch-06"  # the folder beside the notebook that its %%writefile cells write into
MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/)")
LOCAL = "every forward in no_sync()"  # the placement whose backward passes all stay local


def cells() -> list:
    return json.loads(NOTEBOOK.read_text())["cells"]


def cell_source(cell_id: str) -> str:
    return next("".join(c["source"]) for c in cells() if c.get("id") == cell_id)


def written(name: str) -> str:
    """The script ``name`` as the notebook's %%writefile cells write it into its scratch folder: the first cell
    writes, the others append."""
    parts = []
    for cell in cells():
        magic, _, body = "".join(cell["source"]).partition("\n")
        if cell["cell_type"] == "code" and magic.startswith("%%writefile") and magic.split()[-1] == f"{SCRATCH}/{name}":
            assert ("-a" in magic.split()) == bool(parts), (cell.get("id"), magic)
            parts.append(body + "\n")
    assert parts, f"the notebook writes no {name} into {SCRATCH}/"
    return "".join(parts)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    """The notebook's scratch folder, rebuilt here: train_ddp.py, train_fsdp.py and broken.py."""
    folder = tmp_path_factory.mktemp(SCRATCH)
    for name in ("train_ddp.py", "train_fsdp.py", "broken.py"):
        (folder / name).write_text(written(name))
    return folder


@pytest.fixture(scope="module")
def script(scripts) -> Path:
    return scripts / "train_ddp.py"


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


def test_the_scripts_go_into_a_scratch_folder_by_path_and_the_kernel_never_changes_folder():
    """The reveal cells' %load reads solutions/ from the notebook's folder: no cell may leave it."""
    code = "\n".join("".join(c["source"]) for c in cells() if c["cell_type"] == "code")
    assert "chdir" not in code and "%cd" not in code
    magics = [line for line in code.splitlines() if line.startswith("%%writefile")]
    assert magics and all(line.split()[-1].startswith(f"{SCRATCH}/") for line in magics)
    assert f'Path("{SCRATCH}")' in cell_source("scratch") and "shutil.rmtree(scratch)" in cell_source("cleanup")


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


# --------------------------------------------------------------------------- exercise 2's case, 4 processes

# How each rank script below ends: main() has put its findings in `out`; they are written where torchrun()
# reads them, and the group is destroyed once the models are freed.
RANK_SCRIPT_END = '''
        with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{dist.get_rank()}.json"), "w") as f:
            json.dump(out, f)
        gc.collect()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
'''

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
        out = {"exercise 2": exercise_2(), "divisors": {}}
        world = dist.get_world_size()
        for reduction, divisors in (("sum", [2 * 16, 2, world * 2 * 16]), ("mean", [2, world * 2])):
            for d in divisors:
                out["divisors"][f"{reduction} / {d}"] = accumulated_gradient(2, 16, reduction, d)
''' + RANK_SCRIPT_END)


CASES_WORLD = 3  # a world size the notebook does not run, odd: nothing divides by two by luck


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("cases") / "exercise_cases.py"
    path.write_text(CASES_SCRIPT)
    return torchrun(path, nproc=CASES_WORLD, timeout=180)


@pytest.mark.slow
def test_exercise_2_syncing_at_the_first_micro_batch_makes_one_call_per_bucket_and_leaves_the_ranks_apart(cases):
    calls = {rank["exercise 2"]["calls"] for rank in cases.ranks}
    grads = [torch.tensor(rank["exercise 2"]["grad"]) for rank in cases.ranks]
    agree = all(torch.allclose(g, grads[0]) for g in grads[1:])
    assert calls == {ex._expected_calls(5, "no_sync() but for the first", 2)} == {2} and not agree
    assert ex.check_first_sync((calls.pop(), agree)).passed
    assert {rank["exercise 2"]["first loop"] for rank in cases.ranks} == {1}  # the first update: one bucket
    assert "very first update" in ex.check_first_sync((1, False)).message


def test_each_exercise_prompt_says_what_its_check_runs():
    """Exercise 1's check: two ranks, three fresh problems (data and weights from a fresh seed), unequal micro-batches
    in two of them, the loop watched; exercise 2's: the prompt's k and buckets, no processes started."""
    words = {2: "two", 3: "three"}
    unequal = sum(len(set(sizes)) > 1 for sizes in ex._LOOP_SIZES)
    ex1 = " ".join(cell_source("ex1-md").split())
    assert f"on {words[ex._LOOP_WORLD]} real processes" in ex1
    assert f"on {words[len(ex._LOOP_SIZES)]} fresh problems" in ex1
    assert f"unequal sizes in {words[unequal]} of them" in ex1
    assert "trust.fresh_seed()" in inspect.getsource(ex.check_ddp_accumulation)
    assert "record_passes(" in inspect.getsource(ex._rank_problem)
    ex2 = " ".join(cell_source("ex2-md").split())
    defaults = inspect.signature(ex.check_first_sync).parameters
    assert f"`k = {defaults['k'].default}`" in ex2 and f"splits into {defaults['buckets'].default} buckets" in ex2
    assert "it starts no processes" in ex2 and "torchrun" not in inspect.getsource(ex.check_first_sync)


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
def test_rule_1_at_three_ranks_a_mean_loss_over_k_and_a_summed_loss_over_the_ranks_samples(cases):
    """3 ranks, k = 2 micro-batches of 16: a summed loss / the rank's 32 samples and a mean loss / k give the
    full-batch mean (exercise 1's rule on another world size); dividing by the world size as well does not."""
    w = CASES_WORLD
    full = _full_batch_mean_gradient(w * 2 * 16)
    got = {name: torch.tensor(g) for name, g in cases.ranks[0]["divisors"].items()}
    torch.testing.assert_close(got["sum / 32"], full, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got["mean / 2"], full, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got[f"mean / {w * 2}"], full / w, rtol=1e-4, atol=1e-6)  # world x k: 1 / world too small
    torch.testing.assert_close(got["sum / 2"], full * 16, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[f"sum / {w * 2 * 16}"], full / w, rtol=1e-4, atol=1e-6)


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


def _stack(widths, tanh=False):
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b)] + [torch.nn.Tanh()] * tanh
    return torch.nn.Sequential(*(layers[:-1] if tanh else layers))


def _calls_per_update(widths, updates=3, tanh=False, **ddp_options):
    """Bytes of each all-reduce call, per update, for a stack of Linear layers under DDP, then k = 4 with
    no_sync(); and the model's cap."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(_stack(widths, tanh), **ddp_options)
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


NOTEBOOK_WIDTHS = [16, 512, 512, 512, 1]  # the model of the notebook's section 5 (about 2 MiB of gradient)
BIG_WIDTHS = [16, 1600, 1600, 1600, 1600, 1600, 1]  # a second case: about 39 MiB


def _mib(sizes):
    return [round(s / 2**20, 2) for s in sizes]


def test_the_notebooks_widths_are_the_models():
    assert f"widths = {NOTEBOOK_WIDTHS}" in cell_source("group")


@pytest.mark.parametrize("widths, cap, later", [
    (NOTEBOOK_WIDTHS, None, [1.0, 1.04]),         # unset: the first bucket closes at 1 MiB
    (NOTEBOOK_WIDTHS, 25, [2.04]),                # 25 written out: the first bucket's cap is 25 too
    (NOTEBOOK_WIDTHS, 0.5, [1.0, 1.0, 0.03]),     # each 1 MiB weight closes a bucket of twice the cap
    (NOTEBOOK_WIDTHS, 1, [1.0, 1.0, 0.03]),
    (NOTEBOOK_WIDTHS, 2, [2.01, 0.03]),
    (BIG_WIDTHS, None, [9.78, 29.32, 0.1]),       # a 39 MiB model: unset
    (BIG_WIDTHS, 25, [29.32, 9.88]),              # ... written out
    (BIG_WIDTHS, 10, [19.55, 19.54, 0.1]),
])
def test_the_first_bucket_is_capped_at_1_mib_only_while_bucket_cap_mb_is_unset(widths, cap, later):
    options = {} if cap is None else {"bucket_cap_mb": cap}
    with group_of_one() as dist:
        (first, second, third, deferred), bucket_bytes_cap = _calls_per_update(widths, tanh=widths == NOTEBOOK_WIDTHS,
                                                                               **options)
        first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    assert first_cap == 2**20 and bucket_bytes_cap == (cap or 25) * 2**20
    assert len(first) == 1 and sum(second) == first[0]  # update 0: one bucket of everything, whatever the cap
    assert _mib(second) == later and second == third
    assert len(deferred) == len(second)  # with no_sync(): one call per bucket per update
    closes_at = first_cap if cap is None else bucket_bytes_cap
    assert second[0] >= min(closes_at, sum(second))  # a bucket closes once it holds at least its cap
    assert all(size >= bucket_bytes_cap for size in second[1:-1])


def test_the_rule_the_notebook_quotes_is_torchs():
    """The first-bucket rule as the notebook quotes it, in torch/nn/parallel/distributed.py."""
    import torch.nn.parallel.distributed as ddp_module

    code = " ".join(inspect.getsource(ddp_module).split())
    rule = "first_bucket_bytes_cap = ( dist._DEFAULT_FIRST_BUCKET_BYTES if is_using_default else bucket_bytes_cap )"
    assert rule in code
    assert "is_using_default = bucket_cap_mb is None" in code
    quoted = " ".join(cell_source("first-bucket-md").split())
    assert "`first_bucket_bytes_cap = _DEFAULT_FIRST_BUCKET_BYTES if is_using_default else bucket_bytes_cap`" in quoted


def test_with_find_unused_parameters_the_first_update_is_already_split():
    """The boundary of 'one bucket in update 0': it holds for the default find_unused_parameters=False."""
    with group_of_one():
        (first, second, *_), cap = _calls_per_update(BIG_WIDTHS, find_unused_parameters=True)
    assert len(first) > 1 and sum(first) == sum(second)


def test_a_gradient_below_the_first_bucket_size_stays_one_bucket():
    """The notebook's two-process model, 18 KiB of gradient: one call in every update, before and after the rebuild."""
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


def test_ddp_adds_nothing_to_the_graph_the_picture_draws():
    """The picture draws the plain module's graph: with DDP's defaults, DDP's forward records the same nodes (it
    hooks the AccumulateGrad nodes, it adds none)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import autograd_lab as lab

    with group_of_one():
        net = _stack(NOTEBOOK_WIDTHS, tanh=True)
        x, y = torch.randn(16, 16), torch.randn(16, 1)
        plain = lab.graph_nodes(torch.nn.functional.mse_loss(net(x), y))
        model = DDP(net)
        wrapped = lab.graph_nodes(torch.nn.functional.mse_loss(model(x), y))
        assert [type(n).__name__ for n in wrapped] == [type(n).__name__ for n in plain]
        assert sum(type(n).__name__ == "AccumulateGrad" for n in wrapped) == len(list(net.parameters()))
        del model, wrapped


def _section_5(train: dict) -> dict:
    """The notebook's section 5 run here as its cells run: the group cell (twice, as a learner may), the
    picture's functions and the widget's, in a namespace that holds what the cells above them made."""
    import copy

    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    import autograd_lab as lab

    namespace = {"torch": torch, "lab": lab, "copy": copy, "DDP": DDP, "allreduce_hook": allreduce_hook,
                 "dist": torch.distributed, "train": train}
    for _ in range(2):
        exec(cell_source("group"), namespace)
    exec(cell_source("calls"), namespace)
    return namespace


def test_the_group_cell_makes_one_group_once_and_the_widget_counts_buckets_times_synchronizing_micro_batches(script):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    train = runpy.run_path(str(script))
    try:
        namespace = _section_5(train)
        assert dist.is_initialized() and dist.get_world_size() == 1
        calls = namespace["all_reduce_calls"]
        placements = list(train["PLACEMENTS"])
        buckets = {"unset": 2, 0.5: 3, 1: 3, 2: 2, 25: 1}
        for cap, b in buckets.items():
            for k in (1, 3, 8):
                for placement in placements:
                    with contextlib.redirect_stdout(out := io.StringIO()):
                        calls(k, cap, placement)
                    synchronizing = sum(not train["PLACEMENTS"][placement](i, k)[0] for i in range(k))
                    assert f": {b * synchronizing} call" in out.getvalue().splitlines()[1], (cap, k, placement)
    finally:
        gc.collect()
        dist.destroy_process_group()


# --------------------------------------------------------------------------- FSDP2 beside DDP, 2 processes

FSDP_PROBE = textwrap.dedent('''
    """What FSDP2 holds between micro-batches, and its collectives on a second model: three Linear layers, k = 3."""
    import gc, json, os

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule, fully_shard

    import train_fsdp
    from train_ddp import make_data, make_model
    from train_fsdp import Collectives


    def unsharded_gradient_numbers(model):
        """The numbers of the unsharded gradients FSDP keeps inside (private attributes of FSDP2)."""
        total = 0
        for module in model.modules():
            group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
            for param in group.fsdp_params if group is not None else []:
                unsharded = getattr(param, "_unsharded_param", None)
                for grad in (getattr(unsharded, "grad", None), param.unsharded_accumulated_grad):
                    total += 0 if grad is None else grad.numel()
        return total


    def probe(model, k, sync):
        for layer in [m for m in model if isinstance(m, torch.nn.Linear)]:
            fully_shard(layer)
        fully_shard(model)
        x, y = make_data()
        mine = list(range(dist.get_rank(), len(x), dist.get_world_size()))
        after = []
        with Collectives() as seen:
            for i, idx in enumerate(torch.tensor(mine).chunk(k)):
                model.set_requires_gradient_sync(sync(i, k))
                (torch.nn.functional.mse_loss(model(x[idx]), y[idx]) * len(idx) / len(mine)).backward()
                grads = [p.grad for p in model.parameters()]
                after.append({"grads": [g is not None for g in grads], "unsharded": unsharded_gradient_numbers(model),
                              "shard": sum(g.to_local().numel() for g in grads if g is not None)})
        return {"after": after, "kinds": [kind for kind, _ in seen.calls]}


    def second_model():
        torch.manual_seed(2)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 1))


    def main():
        # First the notebook's own main(), as torchrun runs it, but for its last line: the group it made stays
        # up for the probes (one launch for both).
        end_group, dist.destroy_process_group = dist.destroy_process_group, lambda: None
        try:
            train_fsdp.main()
        finally:
            dist.destroy_process_group = end_group
        with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{dist.get_rank()}.json")) as f:
            out = {"script": json.load(f)}
        out.update({f"{name}, {when}": probe(build(), k, sync)
                    for name, build, k in (("notebook", make_model, 4), ("second", second_model, 3))
                    for when, sync in (("last", lambda i, k: i == k - 1), ("every", lambda i, k: True))})
''' + RANK_SCRIPT_END)


@pytest.fixture(scope="module")
def fsdp_ranks(scripts) -> list:
    """train_fsdp.py's main() as the notebook writes it (under "script"), then the probe above, on two ranks."""
    (scripts / "fsdp_probe.py").write_text(FSDP_PROBE)
    return torchrun(scripts / "fsdp_probe.py", nproc=2, timeout=180).ranks


@pytest.fixture(scope="module")
def fsdp_run(fsdp_ranks) -> list:
    return [rank["script"] for rank in fsdp_ranks]


@pytest.mark.slow
def test_fsdp2_reduce_scatters_follow_the_sync_all_gathers_do_not_and_the_gradient_is_the_full_batchs(
        fsdp_run, full_batch):
    for when, reduce_scatters in (("at the last micro-batch", 2), ("at every micro-batch", 2 * 4)):
        grads = []
        for rank in fsdp_run:
            kinds = [kind for kind, _ in rank[when]["calls"]]
            assert kinds.count("_allgather_base_") == 2 * 2 * 4, when  # 2 layers, forward and backward, k = 4
            assert kinds.count("_reduce_scatter_base_") == reduce_scatters, when
            assert set(kinds) == {"_allgather_base_", "_reduce_scatter_base_"}
            grads.append(torch.tensor(rank[when]["grad"]))
            torch.testing.assert_close(grads[-1], full_batch, rtol=1e-5, atol=1e-6)
        assert torch.equal(grads[0], grads[1])
    last = fsdp_run[0]["at the last micro-batch"]
    taken_in = sum(n for kind, n in last["calls"] if kind == "_reduce_scatter_base_")
    # each tensor's rows padded to split in 2: the 1 x 256 weight becomes 2 x 256, its bias 2 numbers
    assert taken_in == 2 * last["shard"] == full_batch.numel() + 256 + 1


@pytest.mark.slow
def test_fsdp2_without_the_sync_keeps_the_whole_unsharded_gradient_until_the_last_micro_batch(fsdp_ranks, full_batch):
    numbers = {"notebook": full_batch.numel(), "second": 16 * 64 + 64 + 64 * 64 + 64 + 64 + 1}
    for rank in fsdp_ranks:
        for name, k, layers in (("notebook", 4, 2), ("second", 3, 3)):
            last, every = rank[f"{name}, last"], rank[f"{name}, every"]
            for i, state in enumerate(last["after"]):
                if i < k - 1:  # .grad not set yet; FSDP holds the whole gradient, unsharded
                    assert not any(state["grads"]) and state["unsharded"] == numbers[name], (name, i)
                else:
                    assert all(state["grads"]) and state["unsharded"] == 0 and state["shard"] < numbers[name]
            for state in every["after"]:  # synced every time: only the shard stays
                assert all(state["grads"]) and state["unsharded"] == 0 and state["shard"] == last["after"][-1]["shard"]
            # the second case of the rule: reduce-scatters one per layer per synchronizing backward; all-gathers
            # two per layer per micro-batch, sync or not
            assert last["kinds"].count("_reduce_scatter_base_") == layers
            assert every["kinds"].count("_reduce_scatter_base_") == layers * k
            assert last["kinds"].count("_allgather_base_") == every["kinds"].count("_allgather_base_") == 2 * layers * k
