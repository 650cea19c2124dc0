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
