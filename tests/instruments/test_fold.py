"""Folding: a graph too big to lay out in time comes back with its repeated structure drawn once (identical
branches counted on their edge, a chain of identical links on a loop), or, when even that is too big, as a text
summary that says why."""

import time

import pytest
import torch
from losses import data, looped_loss, seed_model, summed_loss

from autograd_lab import draw_graph
from autograd_lab.fold import fold
from autograd_lab.graphmodel import walk
from autograd_lab.layout import GraphTooSlow


@pytest.mark.parametrize("n", [100, 150, 200, 1000])
def test_looped_loss_draws_folded_well_within_the_time_limit(n):
    x, y = data(n)
    model = seed_model()
    loss = looped_loss(model, x, y)
    start = time.perf_counter()
    g = draw_graph(loss, params={"w": model.weight}, names={"looped loss": loss}, show_grads=False)
    bundle = g._repr_mimebundle_()
    assert time.perf_counter() - start < 3
    assert "image/svg+xml" in bundle
    lines = g.text.splitlines()
    assert "repeated structure is drawn once" in lines[1]
    assert f"  n2 -> n1  x {n}" in lines and sum("AccumulateGrad -> leaf w" in line for line in lines) == 1
    assert lines[2:4] == ["  n0 MeanBackward0", "  n1 StackBackward0"]


@pytest.mark.parametrize("n", [100, 200, 1000])
def test_summed_loss_folds_its_chain_of_additions(n):
    x, y = data(n)
    model = seed_model()
    loss = summed_loss(model, x, y)
    start = time.perf_counter()
    g = draw_graph(loss, params={"w": model.weight})
    bundle = g._repr_mimebundle_()
    assert time.perf_counter() - start < 3
    assert "image/svg+xml" in bundle
    lines = g.text.splitlines()
    assert f"  n1 -> n1  x {n - 1}" in lines  # the additions of samples n .. 2, drawn as one link
    assert sum("AccumulateGrad -> leaf w" in line for line in lines) == 1 and len(lines) < 40


def test_a_big_graph_without_repeats_gets_a_summary_saying_why():
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(300):
        z = z.sin().cos()  # 600 nodes; no two neighbours alike, nothing to fold
    start = time.perf_counter()
    g = draw_graph(z)
    bundle = g._repr_mimebundle_()
    assert time.perf_counter() - start < 3
    assert set(bundle) == {"text/plain"} and g.summary_only
    assert "not drawn: Graphviz would take too long" in bundle["text/plain"]
    assert "601 boxes to place (more than 500)" in g.text and "CosBackward0 x 300" in g.text
    with pytest.raises(GraphTooSlow):
        g.svg()


def test_small_graphs_are_never_folded():
    x, y = data(2)
    assert "folded" not in draw_graph(looped_loss(seed_model(), x, y)).text


def test_fold_turns_a_chain_of_identical_links_into_one_with_a_loop():
    w = torch.tensor(2.0, requires_grad=True)
    total = w.exp()
    for _ in range(4):
        total = total + w.sin()
    folded, counts, _ = fold(walk(total * 1.0))
    assert [n.name for n in folded.nodes] == [
        "MulBackward0", "AddBackward0", "ExpBackward0", "AccumulateGrad", "SinBackward0"
    ]
    assert counts == {(1, 1): 4}


def test_fold_keeps_distinct_branches_and_shared_nodes():
    w = torch.tensor(2.0, requires_grad=True)
    parts = [w.exp() * 1.0 for _ in range(5)] + [w.sin()]
    folded, counts, _ = fold(walk(torch.stack(parts).sum()))
    assert [n.name for n in folded.nodes] == [
        "SumBackward0", "StackBackward0", "MulBackward0", "ExpBackward0", "AccumulateGrad", "SinBackward0"
    ]
    assert counts == {(1, 2): 5}
