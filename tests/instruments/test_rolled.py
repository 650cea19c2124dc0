"""Rolling: a recurrent net unrolled over time is drawn as one step in a dashed box with its count ("x 20
steps"), an arrow back into it carrying its state to the next step; steps that differ (other weights, another
operation) are never rolled together, and fold=False still draws every node."""

import re

import pytest
import torch
from test_torchviz_crosscheck import crosscheck
from torch import nn

from autograd_lab import draw_graph
from autograd_lab.graphmodel import walk
from autograd_lab.roll import roll
from tools import architectures as arch

STEPS = 20


def drawn_nodes(graph) -> int:
    """How many boxes of backward nodes a drawing holds (its text lists each as "  nK ...")."""
    return sum(1 for line in graph.text.splitlines() if re.match(r"  n\d+ (?!->)", line))


def layer_loss(kind, mkldnn=True, bidirectional=False):
    """nn.GRU / nn.LSTM / nn.RNN, 2 layers, over STEPS steps, its output summed. ``mkldnn=False``: CPU torch
    builds an LSTM from separate operations per step instead of one fused node per layer."""
    torch.manual_seed(0)
    model = getattr(nn, kind)(4, 8, num_layers=2, bidirectional=bidirectional)
    with torch.backends.mkldnn.flags(enabled=mkldnn):
        out, _ = model(torch.randn(STEPS, 3, 4))
    return model, out.sum()


def cell_loop_loss(kind):
    """A learner's own loop over time: nn.GRUCell / LSTMCell / RNNCell called once per step, the last h's loss."""
    torch.manual_seed(0)
    cell = getattr(nn, kind)(4, 8)
    xs, h, c = torch.randn(STEPS, 3, 4), torch.zeros(3, 8), torch.zeros(3, 8)
    for x in xs:
        if kind == "LSTMCell":
            h, c = cell(x, (h, c))
        else:
            h = cell(x, h)
    return cell, h.pow(2).mean()


# name -> (build, how many steps each dashed box stands for, nodes per step)
RECURRENT = {
    "nn.GRU": (lambda: layer_loss("GRU"), [STEPS, STEPS], 14),
    "nn.LSTM, built per step": (lambda: layer_loss("LSTM", mkldnn=False), [STEPS, STEPS], 13),
    "nn.RNN": (lambda: layer_loss("RNN"), [STEPS, STEPS], 4),
    "nn.GRU, bidirectional": (lambda: layer_loss("GRU", bidirectional=True), [STEPS] * 4, 14),  # side by side
    "GRUCell in a for loop": (lambda: cell_loop_loss("GRUCell"), [STEPS], 16),
    "LSTMCell in a for loop": (lambda: cell_loop_loss("LSTMCell"), [STEPS], 15),
    "RNNCell in a for loop": (lambda: cell_loop_loss("RNNCell"), [STEPS], 6),
}


@pytest.mark.parametrize("name", sorted(RECURRENT))
def test_a_recurrent_net_over_20_steps_is_a_picture_of_one_step_per_layer(name):
    build, boxes, size = RECURRENT[name]
    model, loss = build()
    g = draw_graph(loss, params=model)
    bundle = g._repr_mimebundle_()
    assert "image/svg+xml" in bundle, bundle["text/plain"][:300]
    assert re.findall(r"^  x (\d+) steps: ", g.text, re.M) == [str(n) for n in boxes]
    assert g.text.count(f"{STEPS} steps of the same {size} nodes, reusing ") == len(boxes)
    assert bundle["image/svg+xml"].count(">x 20 steps</text>") == len(boxes)  # the count on each dashed box
    assert re.search(r"^  n\d+ -> n\d+  next step$", g.text, re.M)  # the state carried into the next step
    leaves = [line for line in g.text.splitlines() if "AccumulateGrad -> leaf" in line]
    assert len(leaves) == len(list(model.parameters()))  # every weight drawn once
    assert drawn_nodes(g) < len(walk(loss).nodes) // 5


def test_the_2_layer_gru_from_the_course_bench_is_rolled_and_unfolded_has_torchvizs_node_set():
    model, loss = arch.gru_loss()
    walked = walk(loss, model)
    assert len(walked.nodes) > 500  # unrolled: 20 steps of 14 nodes, per layer, and the weights' paths
    crosscheck(loss)  # the same backward nodes, edges, leaves and saved tensors as torchviz.make_dot
    assert drawn_nodes(draw_graph(loss, params=model, fold=False)) == len(walked.nodes)  # never fold: all of it
    g = draw_graph(loss, params=model)
    assert "image/svg+xml" in g._repr_mimebundle_()
    note = g.text.splitlines()[1]
    assert (f"folded from {len(walked.nodes)} nodes, repeated structure drawn once: 20 steps of the same 14 nodes, "
            "reusing bias_hh_l0, weight_hh_l0, drawn once in a dashed box; 20 steps of the same 14 nodes, reusing "
            "bias_hh_l1, weight_hh_l1, drawn once in a dashed box" in note)
    assert len(re.findall(r"^  n\d+ -> n\d+  x 20$", g.text, re.M)) == 2  # each layer's output stacks every h


def test_nn_lstm_as_this_torch_build_runs_it_is_a_picture():
    model, loss = layer_loss("LSTM")  # one fused node per layer where CPU torch has oneDNN, else built per step
    g = draw_graph(loss, params=model)
    assert "image/svg+xml" in g._repr_mimebundle_()
    fused = len(walk(loss).nodes) < 50
    assert ("x 20 steps:" in g.text) != fused  # fused: drawn as it is; built per step: rolled


def test_an_initial_state_that_records_a_graph_is_drawn_as_the_first_steps_input():
    torch.manual_seed(0)
    model = nn.GRU(4, 8, num_layers=2)
    h0 = torch.zeros(2, 3, 8, requires_grad=True)
    out, _ = model(torch.randn(STEPS, 3, 4), h0)
    g = draw_graph(out.sum(), params={**dict(model.named_parameters()), "h0": h0})
    assert "image/svg+xml" in g._repr_mimebundle_()
    assert g.text.count("20 steps of the same 14 nodes") == 2
    assert sum("AccumulateGrad -> leaf h0" in line for line in g.text.splitlines()) == 1


def test_steps_with_their_own_weights_are_never_rolled():
    torch.manual_seed(0)
    cells = nn.ModuleList(nn.RNNCell(4, 8) for _ in range(STEPS))  # a new cell, new weights, at every step
    h = torch.zeros(3, 8)
    for cell, x in zip(cells, torch.randn(STEPS, 3, 4)):
        h = cell(x, h)
    g = draw_graph(h.sum(), params=cells, fold=True)
    assert "steps of the same" not in g.text and "next step" not in g.text
    assert drawn_nodes(g) == len(walk(h.sum()).nodes)


def test_a_step_that_does_another_operation_ends_the_run():
    torch.manual_seed(0)
    w, u = (torch.randn(8, 8, requires_grad=True) for _ in range(2))
    h = torch.zeros(3, 8)
    for t, x in enumerate(torch.randn(STEPS, 3, 8)):
        act = torch.relu if t == 10 else torch.tanh  # step 10 differs: steps 0-9 and 11-19 are each one step
        h = act(x @ w + h @ u)
    g = draw_graph(h.sum(), params={"w": w, "u": u}, fold=True)
    assert "image/svg+xml" in g._repr_mimebundle_()
    assert sorted(re.findall(r"^  x (\d+) steps: ", g.text, re.M)) == ["10", "9"]
    assert sum(" ReluBackward0" in line for line in g.text.splitlines()) == 1  # drawn between them, as it is


def test_alternating_weights_roll_as_a_step_of_two_never_as_one():
    torch.manual_seed(0)
    weights = [torch.randn(8, 8, requires_grad=True) for _ in range(2)]
    h = torch.randn(3, 8)
    for t in range(STEPS):
        h = torch.tanh(h @ weights[t % 2])  # each step reads the other weight than the step before
    rolled = roll(walk(h.sum(), params={"w0": weights[0], "w1": weights[1]}))
    assert [(count, len(nodes)) for count, nodes in rolled.steps] == [(10, 4)]  # mm, tanh, mm, tanh: 10 times
    assert "10 steps of the same 4 nodes, reusing w0, w1" in rolled.said[0]


def test_a_chain_of_operations_without_weights_is_not_a_loop():
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(30):
        z = z.sin().cos()  # the same two operations again and again, but no weight read at each step
    assert roll(walk(z)).steps == ()


def test_marks_on_any_step_land_on_the_step_drawn():
    model, loss = cell_loop_loss("RNNCell")
    tanhs = [n.fn for n in walk(loss).nodes if n.name == "TanhBackward0"]
    g = draw_graph(loss, params=model, highlight=tanhs[7], fold=True)
    assert sum("TanhBackward0  [running]" in line for line in g.text.splitlines()) == 1
