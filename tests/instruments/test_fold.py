"""Folding: a graph too big to lay out in time comes back with its repeated structure drawn once (identical
branches counted on their edge, a chain of identical links on a loop), or, when even that is too big, as a text
summary that says why."""

import time

import pytest
import torch
from losses import data, looped_loss, seed_model, summed_loss

from autograd_lab import draw_graph
from autograd_lab.engine import GraphTooSlow
from autograd_lab.fold import fold
from autograd_lab.graphmodel import walk


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
    assert "repeated structure drawn once" in lines[1]
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


def test_a_big_graph_without_repeats_is_still_drawn_when_it_can_be_laid_out_in_time():
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(300):
        z = z.sin().cos()  # 600 nodes, more than MAX_NODES; no two neighbours alike, nothing to fold
    g = draw_graph(z)
    assert "image/svg+xml" in g._repr_mimebundle_() and not g.summary_only


def test_a_graph_beyond_any_screen_gets_a_summary_saying_why_and_what_to_do():
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(1600):
        z = z.sin().cos()
    start = time.perf_counter()
    g = draw_graph(z)
    bundle = g._repr_mimebundle_()
    assert time.perf_counter() - start < 3  # refused before any layout
    assert set(bundle) == {"text/plain"} and g.summary_only
    assert "more than any screen shows (3000)" in g.text and "CosBackward0 x 1600" in g.text
    assert "timeout=60" in g.text and "fewer samples" in g.text
    assert max(len(line) for line in g.text.splitlines()) <= 110  # long lines wrapped
    with pytest.raises(GraphTooSlow):
        g.svg()


def test_a_layout_that_runs_out_of_time_shows_the_summary_and_the_override():
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(100):
        z = z.sin().cos()
    bundle = draw_graph(z, timeout=0.001)._repr_mimebundle_()
    assert set(bundle) == {"text/plain"}
    text = bundle["text/plain"]
    assert text.startswith("autograd graph of 201 nodes, not drawn: graphviz-pure did not lay this graph out "
                           "within 0.001 s") or "did not lay this graph out within 0.001 s" in text
    assert "timeout=60" in text


def test_timeout_is_checked():
    w = torch.tensor(1.0, requires_grad=True)
    with pytest.raises(ValueError, match="timeout is in seconds"):
        draw_graph(w * 2, timeout=6000)
    with pytest.raises(ValueError, match='fold must be "auto"'):
        draw_graph(w * 2, fold="yes")


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


def test_the_layout_cost_is_counted_once_and_the_summary_written_only_when_shown(monkeypatch):
    from autograd_lab import fold as folding

    counted, written = [], []
    cost, text = folding.layout_cost, folding.Outline.text
    monkeypatch.setattr(folding, "layout_cost", lambda *a: counted.append(1) or cost(*a))
    monkeypatch.setattr(folding.Outline, "text", lambda self, why="": written.append(why) or text(self, why))
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(100):
        z = z.sin().cos()  # 201 nodes: drawn as it is, too many to read as text in full
    g = draw_graph(z, timeout=0.001)
    assert counted == [1] and written == []
    assert g._repr_mimebundle_()["text/plain"].startswith("autograd graph of 201 nodes, not drawn: ")
    assert len(written) == 1 and counted == [1]
    x, y = data(200)
    draw_graph(summed_loss(seed_model(), x, y))  # folded: the walked graph's cost, then the folded one's
    assert counted == [1, 1, 1] and len(written) == 1
