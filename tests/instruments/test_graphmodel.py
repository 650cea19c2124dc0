"""The one graph model: a walk of grad_fn into data, nodes in order of first appearance, deep graphs without
recursion, and one home for naming nodes and leaves."""

import pytest
import torch
from losses import data, looped_loss, seed_model, summed_loss

from autograd_lab import chain, graph_nodes
from autograd_lab.graphmodel import Node, leaf_of, node_name, title, walk


def test_walk_gives_nodes_in_order_with_inputs_leaves_and_params():
    w = torch.tensor(1.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    loss = ((w * x - 2 * x) ** 2).mean()
    model = walk(loss, {"w": w}, saved=True)
    assert [n.name for n in model.nodes] == [node_name(fn) for fn in graph_nodes(loss)]
    assert [n.inputs for n in model.nodes][:3] == [(1,), (2,), (3, None)]
    leaf = model.nodes[-1]
    assert leaf.is_leaf and leaf.leaf is w and leaf.param == "w" and title(leaf) == "AccumulateGrad(w)"
    assert model.edges() == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert dict(model.nodes[3].saved)["other"] is x
    assert model.output_nodes == (0,) and model.index(loss.grad_fn) == 0


def test_a_shared_node_is_one_node_with_two_users():
    a = torch.tensor(2.0, requires_grad=True)
    model = walk(a * a + a, {"a": a})
    assert [n.name for n in model.nodes] == ["AddBackward0", "MulBackward0", "AccumulateGrad"]
    assert model.fan_in() == [0, 1, 3]  # a feeds the product twice and the sum once


def test_naming_and_leaf_rules_have_one_home():
    w = torch.tensor(1.0, requires_grad=True)
    y = w * 2
    acc = y.grad_fn.next_functions[0][0]
    assert node_name(None) == "None" and node_name(y.grad_fn) == type(y.grad_fn).__name__
    assert leaf_of(acc) is w and leaf_of(y.grad_fn) is None and leaf_of(None) is None
    assert title(acc) == "AccumulateGrad" and title(Node.of(acc, {id(w): "w"})) == "AccumulateGrad(w)"


@pytest.mark.parametrize("n", [1000, 10_000])
def test_deep_graphs_walk_and_chain_without_recursion(n):
    x, y = data(n)
    loss = summed_loss(seed_model(), x, y)
    assert len(walk(loss).nodes) == 6 * n + 2
    lines = chain(loss).splitlines()
    assert lines[0].startswith("DivBackward0 -> AddBackward0") and len(lines) == 2 * n - 1
    assert lines[-1].endswith("(AccumulateGrad, shared: see above)")
    assert max(map(len, lines)) < 250 and any(f"[level {n - 1}] " in line for line in lines)  # no huge margins


def test_chain_of_notebook_03_looped_loss_at_10000():
    x, y = data(10_000)
    text = chain(looped_loss(seed_model(), x, y))
    assert len(text.splitlines()) == 10_001 and text.count("shared: see above") == 9_999


# --------------------------------------------------------------------------- saved tensors, read without changing them


class _CountedBlock(torch.nn.Module):
    """A block that counts its forward passes (a checkpoint re-runs it to recompute what it did not keep)."""

    def __init__(self, calls):
        super().__init__()
        self.lin, self.calls = torch.nn.Linear(8, 8), calls

    def forward(self, x):
        self.calls.append(1)
        return torch.tanh(self.lin(x))


def _checkpointed(reentrant, blocks=4):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    calls = []
    model = torch.nn.ModuleList(_CountedBlock(calls) for _ in range(blocks))
    h = torch.randn(2, 8, requires_grad=True)
    for block in model:
        h = checkpoint(block, h, use_reentrant=reentrant)
    return model, h.sum(), calls


def test_reading_a_checkpoints_saved_tensors_recomputes_nothing():
    from autograd_lab import draw_graph

    model, loss, calls = _checkpointed(reentrant=False)
    assert len(calls) == 4
    read = walk(loss, model, saved=True)
    text = draw_graph(loss, model, show_saved=True).text
    assert len(calls) == 4, "reading or drawing the saved tensors ran no block again"
    recomputed = [n for n in read.nodes if n.recomputed]
    assert len(recomputed) == 8 and all(n.saved == () for n in recomputed)  # 4 x (Tanh, Addmm): nothing held
    assert "12 tensors of 8 nodes in checkpointed segments are not kept" in text and "saved by" not in text
    loss.backward()  # and backward still works: each segment recomputed once, by backward itself
    assert len(calls) == 8 and all(p.grad is not None for p in model.parameters())


def test_a_custom_functions_saved_tensors_are_drawn_as_torchviz_draws_them():
    import torchviz

    from autograd_lab import draw_graph

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * x * w

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            return 2 * x * w * grad, x * x * grad

    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = Cube.apply(torch.tensor([4.0, 5.0, 6.0]), w).sum()
    node = walk(loss, {"w": w}, saved=True).nodes[1]
    assert node.name == "CubeBackward" and [name for name, _ in node.saved] == ["saved_tensors[0]", "saved_tensors[1]"]
    assert node.saved[1][1] is w
    text = draw_graph(loss, {"w": w}, show_saved=True).text
    assert "saved by n1: saved_tensors[0] = [4., 5., 6.]" in text
    theirs = torchviz.make_dot(loss).source.count("orange")  # torchviz always draws a custom Function's
    assert theirs == len(node.saved) == 2


def test_saved_tensors_after_backward_get_a_message_not_silence():
    from autograd_lab import draw_graph

    w = torch.tensor(1.0, requires_grad=True)
    loss = (w * torch.tensor([4.0, 2.0])).pow(2).mean()
    assert "backward() has freed them" not in draw_graph(loss, {"w": w}, show_saved=True).text
    loss.backward()
    model = walk(loss, {"w": w}, saved=True)
    assert any(n.freed for n in model.nodes) and all(n.saved == () for n in model.nodes)
    text = draw_graph(loss, {"w": w}, show_saved=True).text
    assert "saved tensors not drawn: backward() has freed them" in text and "retain_graph=True" in text
    assert "freed" not in draw_graph(loss, {"w": w}).text  # not asked for, not mentioned


def test_a_reentrant_checkpoint_is_named_with_the_parameters_it_hides():
    from autograd_lab import draw_graph

    model, loss, calls = _checkpointed(reentrant=True)
    graph = walk(loss, model)
    drawn = sum(1 for n in graph.nodes if n.param is not None)
    assert drawn == 0 and sum(1 for _ in model.parameters()) == 8  # the graph reaches none of the 8
    text = draw_graph(loss, model, show_saved=True).text
    assert "4 reentrant checkpoints (use_reentrant=True)" in text and "(8 in all)" in text
    assert "use_reentrant=False draws them" in text and len(calls) == 4
