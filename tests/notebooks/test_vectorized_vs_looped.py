"""Notebook 03 (vectorized versus looped losses): the facts its prose relies on.

The losses are written out again here (not read from the notebook), so the
facts are checked independently of it.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

import autograd_lab as lab
from autograd_lab import measure
from autograd_lab.graphmodel import node_name
from autograd_lab.measure import heap_bytes, held_bytes

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_vectorized_vs_looped.ipynb"


def _notebook_cell(cell_id):
    cells = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text())["cells"]}
    return "".join(cells[cell_id]["source"])


def mean_loss(model, x, y):
    return ((y - model(x).squeeze(1)) ** 2).mean()


def loop_loss(model, x, y):
    per_sample = [(y[k] - model(x[k])) ** 2 for k in range(len(y))]
    return torch.stack(per_sample).mean()


def scalar_model():
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    return model


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(1000, 16, generator=gen), torch.randn(1000, generator=gen)


# ---------------------------------------------------------------- section 1: the seed's two examples


def test_seed_examples_give_the_seed_values_and_equal_gradients():
    x = torch.tensor([[4.0], [2.0]])
    y = 2 * x.squeeze(1)
    m1, m2 = scalar_model(), scalar_model()
    assert m1.weight.grad is None and m2.weight.grad is None
    errors = (y - m1(x).squeeze(1)) ** 2
    assert errors.tolist() == [16.0, 4.0] and type(errors.grad_fn).__name__ == "PowBackward0"
    mean_loss(m1, x, y).backward()
    loop_loss(m2, x, y).backward()
    assert m1.weight.grad.item() == m2.weight.grad.item() == -20.0


def test_mlp_gradients_equal(mlp, data):
    x, y = data[0][:50], data[1][:50]
    g_vec = torch.autograd.grad(mean_loss(mlp, x, y), list(mlp.parameters()))
    g_loop = torch.autograd.grad(loop_loss(mlp, x, y), list(mlp.parameters()))
    for a, b in zip(g_vec, g_loop):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------- section 2: graph size


@pytest.mark.parametrize("model_kind", ["scalar", "mlp"])
def test_looped_graph_grows_linearly_vectorized_stays_constant(model_kind, mlp, data):
    model, features = (scalar_model(), 1) if model_kind == "scalar" else (mlp, 16)
    x, y = data[0][:, :features], data[1]
    looped = {n: lab.count_nodes(loop_loss(model, x[:n], y[:n])) for n in (1, 2, 37, 1000)}
    vectorized = {n: lab.count_nodes(mean_loss(model, x[:n], y[:n])) for n in (1, 2, 37, 1000)}
    per_sample, shared = looped[2] - looped[1], 2 * looped[1] - looped[2]
    assert per_sample > 0 and shared > 0
    assert all(count == per_sample * n + shared for n, count in looped.items())
    assert len(set(vectorized.values())) == 1


def test_scalar_loop_per_sample_path_is_one_chain_and_shared_nodes_are_mean_stack_leaf():
    x = torch.tensor([[4.0], [2.0]])
    names_1 = [node_name(n) for n in lab.graph_nodes(loop_loss(scalar_model(), x[:1], 2 * x[:1, 0]))]
    names_2 = [node_name(n) for n in lab.graph_nodes(loop_loss(scalar_model(), x, 2 * x[:, 0]))]
    shared = {"MeanBackward0", "StackBackward0", "AccumulateGrad"}
    assert shared <= set(names_1) and names_1.count("AccumulateGrad") == names_2.count("AccumulateGrad") == 1
    assert len(names_2) - len(names_1) == len(names_1) - len(shared)


# ---------------------------------------------------------------- section 3: memory


def saved_bytes(loss_fn, model, x, y):
    with lab.SavedTensors(exclude=[x, y, *model.parameters()]) as saved:
        loss_fn(model, x, y)
    return saved


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_saved_bytes_equal_for_the_mlp(n, mlp, data):
    x, y = data[0][:n], data[1][:n]
    vec, loop = saved_bytes(mean_loss, mlp, x, y), saved_bytes(loop_loss, mlp, x, y)
    assert vec.bytes == loop.bytes == n * (64 + 1) * 4  # tanh outputs and errors, float32
    assert (vec.storages, loop.storages) == (2, 2 * n)


@pytest.mark.skipif(heap_bytes() is None, reason="the C library reports no heap statistics here")
def test_the_loops_bookkeeping_outweighs_its_saved_data(mlp, data):
    n = 300
    y = data[1][:n]
    for model, x, data_factor in ((scalar_model(), data[0][:n, :1], 100), (mlp, data[0][:n], 1)):
        saved = saved_bytes(loop_loss, model, x, y).bytes
        heap_loop = held_bytes(lambda model=model, x=x: loop_loss(model, x, y), repeats=1)
        heap_vec = held_bytes(lambda model=model, x=x: mean_loss(model, x, y), repeats=1)
        assert heap_loop > 10 * heap_vec  # far more heap for the same saved data
        assert heap_loop - saved > data_factor * saved  # bookkeeping: more than the data, 100x for one-number samples


# ---------------------------------------------------------------- section 5: per-sample gradients


def test_per_sample_gradients_loop_equals_vmap_and_their_mean_is_the_batch_gradient(mlp, data):
    x, y = data[0][:20], data[1][:20]
    params = {k: v.detach() for k, v in mlp.named_parameters()}
    vmapped = vmap(grad(lambda p, xk, yk: ((yk - functional_call(mlp, p, (xk,))) ** 2).sum()), in_dims=(None, 0, 0))(
        params, x, y
    )
    names = list(params)
    batch = dict(zip(names, torch.autograd.grad(mean_loss(mlp, x, y), list(mlp.parameters()))))
    for k in range(len(y)):
        one = torch.autograd.grad(((y[k] - mlp(x[k])) ** 2).sum(), list(mlp.parameters()))
        for name, g in zip(names, one):
            torch.testing.assert_close(vmapped[name][k], g)
    for name in names:
        torch.testing.assert_close(vmapped[name].mean(0), batch[name])


# ---------------------------------------------------------------- section 4: where the loop's time goes


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _ops(loss_fn, model, x, y):
    """(ATen operations of the forward pass under no_grad, of backward) for one call."""
    model.zero_grad(set_to_none=True)
    with torch.no_grad(), CountOps() as forward:
        loss_fn(model, x, y)
    loss = loss_fn(model, x, y)
    with CountOps() as backward:
        loss.backward()
    return forward.ops.total(), backward.ops.total()


MODELS = {
    "scalar": (scalar_model, 1),
    "mlp 16-64-1": (lambda: nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)), 16),
    "mlp without bias": (lambda: nn.Sequential(nn.Linear(8, 16, bias=False), nn.Tanh(),
                                               nn.Linear(16, 1, bias=False)), 8),
    "deeper relu mlp": (lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                                              nn.Linear(16, 1)), 8),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_sample_adds_a_fixed_set_of_aten_operations_more_in_backward(name):
    make, width = MODELS[name]
    torch.manual_seed(0)
    model, x, y = make(), torch.randn(4, width), torch.randn(4)
    looped = [_ops(loop_loss, model, x[:n], y[:n]) for n in (1, 2, 3)]
    forward_1, backward_1 = (looped[1][i] - looped[0][i] for i in (0, 1))
    assert (forward_1, backward_1) == (looped[2][0] - looped[1][0], looped[2][1] - looped[1][1])  # fixed per sample
    assert 0 < forward_1 < backward_1
    vectorized = [_ops(mean_loss, model, x[:n], y[:n]) for n in (1, 2, 3)]
    assert vectorized[0] == vectorized[1] == vectorized[2]  # the same operations for any N


def test_the_notebook_mlp_runs_about_twice_as_many_aten_operations_backward():
    torch.manual_seed(0)
    model, x, y = MODELS["mlp 16-64-1"][0](), torch.randn(2, 16), torch.randn(2)
    (f1, b1), (f2, b2) = _ops(loop_loss, model, x[:1], y[:1]), _ops(loop_loss, model, x, y)
    assert 1.5 * (f2 - f1) <= b2 - b1 <= 3 * (f2 - f1)


def test_heap_cell_says_in_a_sentence_that_the_heap_cannot_be_read_off_glibc(monkeypatch, capsys):
    monkeypatch.setattr(measure, "_MALLINFO2", None)  # as on macOS, Windows or musl
    assert measure.heap_bytes() is None and measure.held_bytes(lambda: torch.ones(3)) is None
    namespace = {"torch": torch, "nn": nn, "lab": lab, "held_bytes": measure.held_bytes}
    exec(_notebook_cell("losses"), namespace)
    exec(_notebook_cell("mlp"), namespace)  # mlp, X, Y and graph_size, as the notebook defines them
    namespace.update(model_v=scalar_model(), x_pool=torch.randn(1000, 1), y_pool=torch.randn(1000))
    exec(_notebook_cell("held"), namespace)
    out = capsys.readouterr().out
    assert "cannot be read on this platform" in out and "heap held" not in out
    assert out.count("bytes per sample: saved") == 4  # the bytes saved are still measured
