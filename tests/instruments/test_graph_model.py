"""The one graph model and the bounded drawing: deep and wide graphs, folding, dot's time limit, bad options."""

import os
import signal
import stat
import time

import pytest
import torch
from torch import nn

from autograd_lab import chain, draw_graph, graph_nodes
from autograd_lab.bounded import (
    MAX_BENDS,
    MAX_NODES,
    GraphTooSlow,
    GraphvizMissing,
    fold,
    layout_cost,
    run_dot,
)
from autograd_lab.graphmodel import Node, leaf_of, node_name, title, walk


def seed_model():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model


def looped_loss(model, x, y):  # notebook 03's looped loss
    losses = []
    for k in range(len(y)):
        losses.append((y[k] - model(x[k])) ** 2)
    return torch.stack(losses).mean()


def summed_loss(model, x, y):  # the same loss summed one sample at a time: a deep chain of additions
    total = 0
    for k in range(len(y)):
        total = total + (y[k] - model(x[k])) ** 2
    return total / len(y)


def data(n):
    x = torch.linspace(-1, 1, n).unsqueeze(1)
    return x, 2 * x.squeeze(1)


# ---------------------------------------------------------------- the model


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


# ---------------------------------------------------------------- bounded drawing


@pytest.mark.parametrize("n", [100, 150, 200, 1000])
def test_looped_loss_draws_folded_within_a_second(n):
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


def test_layout_cost_sees_long_edges_to_a_shared_leaf():
    x, y = data(60)
    boxes, bends = layout_cost(walk(summed_loss(seed_model(), x, y)))
    assert boxes <= MAX_NODES and bends > MAX_BENDS  # few boxes, but every sample's path reaches far down
    assert layout_cost(walk(looped_loss(seed_model(), x, y)))[1] == 0  # all paths of one length


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


# ---------------------------------------------------------------- dot under a time limit


def fake_dot(tmp_path, body):
    path = tmp_path / "dot"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def alive(pid, wait=2.0):
    """Whether ``pid`` still runs ``wait`` seconds from now (a SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + wait
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _running(pid)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


posix_only = pytest.mark.skipif(not os.path.exists("/proc"), reason="reads /proc to see processes")


@posix_only
def test_a_slow_dot_is_stopped_and_leaves_no_process(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    fake_dot(tmp_path, f"/bin/sleep 30 &\necho $! > {pidfile}\nwait\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(GraphTooSlow, match="within 0.5 s"):
        run_dot("digraph {}", timeout=0.5)
    assert time.perf_counter() - start < 5
    assert not alive(int(pidfile.read_text()))


@posix_only
def test_an_interrupt_while_dot_runs_leaves_no_process(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    fake_dot(tmp_path, f"/bin/sleep 30 &\necho $! > {pidfile}\nwait\n")
    monkeypatch.setenv("PATH", str(tmp_path))

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            run_dot("digraph {}", timeout=20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not alive(int(pidfile.read_text()))


@posix_only
def test_a_broken_dot_gives_the_repair_hint_not_a_traceback(tmp_path, monkeypatch):
    message = "dot: error while loading shared libraries: libgvc.so.6: cannot open shared object file"
    fake_dot(tmp_path, f"echo '{message}' >&2\nexit 127\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    w = torch.tensor(1.0, requires_grad=True)
    g = draw_graph(w * 2, params={"w": w})
    with pytest.raises(GraphvizMissing, match="installed but does not run") as err:
        g.svg()
    assert message in str(err.value) and "apt-get install graphviz" in str(err.value)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain"} and message in bundle["text/plain"]
    assert "AccumulateGrad -> leaf w" in bundle["text/plain"]


# ---------------------------------------------------------------- options checked at the boundary


@pytest.fixture
def loss_and_w():
    w = torch.tensor(1.0, requires_grad=True)
    return (w * 3) ** 2, w


@pytest.mark.parametrize("direction", ["up", "bt", "", None, 3])
def test_bad_direction_is_named(loss_and_w, direction):
    with pytest.raises(ValueError, match="direction must be one of 'BT', 'TB', 'LR', 'RL'"):
        draw_graph(loss_and_w[0], direction=direction)


@pytest.mark.parametrize("size", ["big", "8x5", "-3,4", 8, (8, 5), ""])
def test_bad_size_is_named(loss_and_w, size):
    with pytest.raises(ValueError, match='size must be None or a Graphviz size in inches such as "8,5"'):
        draw_graph(loss_and_w[0], size=size)


def test_good_sizes_and_directions_pass(loss_and_w):
    for size in ("8", "8,5", "8.5,5!"):
        source = draw_graph(loss_and_w[0], size=size, direction="LR").source
        assert f'size="{size}"' in source or f"size={size}]" in source


def test_names_the_wrong_way_round_say_so(loss_and_w):
    loss, _ = loss_and_w
    with pytest.raises(TypeError, match="names maps a tensor to 'loss': it goes the other way round"):
        draw_graph(loss, names={loss: "loss"})
    with pytest.raises(TypeError, match="params maps a tensor to 'w'"):
        draw_graph(loss, params={loss_and_w[1]: "w"})


@pytest.mark.parametrize("params", [42, "w", torch.ones(2)])
def test_params_of_wrong_type_are_named(loss_and_w, params):
    with pytest.raises(TypeError, match=r"params must"):
        draw_graph(loss_and_w[0], params=params)


def test_a_list_of_tensors_as_params_asks_for_names(loss_and_w):
    with pytest.raises(TypeError, match=r"params must hold \(name, tensor\) pairs"):
        draw_graph(loss_and_w[0], params=[loss_and_w[1]])


def _seed_nodes():
    w = torch.tensor(1.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    loss = ((w * x - 2 * x) ** 2).mean()
    return loss, w, graph_nodes(loss)  # MeanBackward0, PowBackward0, SubBackward0, MulBackward0, AccumulateGrad


def _other_node():
    return (torch.tensor(1.0, requires_grad=True) * 2).grad_fn  # a node of another forward pass


# (option, value made from (loss, w, nodes), error type, what the message says)
BAD_MARKS = {
    "one tensor": ("highlight", lambda loss, w, n: loss, TypeError, "highlight must hold backward nodes, not tensors"),
    "a leaf in a list": ("done", lambda loss, w, n: [w], TypeError, "done must hold backward nodes, not tensors"),
    "an int": ("highlight", lambda loss, w, n: 1, TypeError, "highlight must hold backward nodes such as"),
    "a list of ints": ("done", lambda loss, w, n: [0, 1], TypeError, r"done must hold backward nodes such as .*got 0"),
    "None in a list": ("highlight", lambda loss, w, n: [n[0], None], TypeError, "got None"),
    "a node's name": ("highlight", lambda loss, w, n: "PowBackward0", TypeError, "not their names"),
    "names in a list": ("done", lambda loss, w, n: ["MeanBackward0"], TypeError, "done must hold backward nodes, not"),
    "a next_functions pair": ("highlight", lambda loss, w, n: loss.grad_fn.next_functions[0], TypeError,
                              r"highlight holds a \(node, input number\) pair from next_functions"),
    "a node of another graph": ("highlight", lambda loss, w, n: _other_node(), ValueError,
                                "highlight holds a MulBackward0 that is not in the graph drawn"),
    "another graph's node in a list": ("done", lambda loss, w, n: [n[0], _other_node()], ValueError,
                                       "done holds a MulBackward0 that is not in the graph drawn"),
    "labels as a list": ("edge_labels", lambda loss, w, n: [1], TypeError,
                         r"edge_labels must be a dict \{\(node, input_node\): text\}; got list"),
    "labels keyed by a name": ("edge_labels", lambda loss, w, n: {"a": 1}, TypeError,
                               r"edge_labels keys must be \(node, input_node\) pairs; got 'a'"),
    "labels keyed by one node": ("edge_labels", lambda loss, w, n: {n[0]: "0.5"}, TypeError,
                                 r"edge_labels keys must be \(node, input_node\) pairs"),
    "labels keyed by tensors": ("edge_labels", lambda loss, w, n: {(loss, w): "1"}, TypeError,
                                "edge_labels must hold backward nodes, not tensors"),
    "an edge the wrong way round": ("edge_labels", lambda loss, w, n: {(n[1], n[0]): "0.5"}, ValueError,
                                    r"key \(PowBackward0, MeanBackward0\) goes the other way round"),
    "two nodes without an edge": ("edge_labels", lambda loss, w, n: {(n[0], n[2]): "0.5"}, ValueError,
                                  r"key \(MeanBackward0, SubBackward0\) is not an edge of the graph"),
    "a node to itself": ("edge_labels", lambda loss, w, n: {(n[0], n[0]): "0.5"}, ValueError, "is not an edge"),
    "an edge to another graph": ("edge_labels", lambda loss, w, n: {(n[0], _other_node()): "0.5"}, ValueError,
                                 "edge_labels holds a MulBackward0 that is not in the graph drawn"),
}


@pytest.mark.parametrize("case", list(BAD_MARKS))
def test_bad_marks_are_refused_naming_the_option(case):
    option, make, error, message = BAD_MARKS[case]
    loss, w, nodes = _seed_nodes()
    with pytest.raises(error, match=message):
        draw_graph(loss, **{option: make(loss, w, nodes)})


GOOD_MARKS = {
    "one node": dict(highlight=lambda n: n[1], done=lambda n: n[0]),
    "lists": dict(highlight=lambda n: [n[1]], done=lambda n: [n[0]]),
    "a tuple and a set": dict(highlight=lambda n: (n[1],), done=lambda n: {n[0]}),
    "generators": dict(highlight=lambda n: (fn for fn in n if fn.name() == "PowBackward0"), done=lambda n: iter(n[:1])),
    "nodes found through next_functions": dict(highlight=lambda n: n[0].next_functions[0][0],
                                               done=lambda n: n[:1]),
}


@pytest.mark.parametrize("case", list(GOOD_MARKS))
def test_marks_accept_one_node_or_any_collection_of_nodes(case):
    loss, _, nodes = _seed_nodes()
    made = {option: make(nodes) for option, make in GOOD_MARKS[case].items()}
    text = draw_graph(loss, **made).text
    assert "n1 PowBackward0  [running]" in text and "n0 MeanBackward0  [done]" in text


def test_empty_marks_and_labels_draw_the_plain_graph():
    loss, _, nodes = _seed_nodes()
    plain = draw_graph(loss).text
    assert draw_graph(loss, highlight=None, done=[], edge_labels={}).text == plain
    assert draw_graph(loss, edge_labels=None, done=set()).text == plain


def test_edge_labels_of_any_value_are_written_on_their_edge():
    loss, _, nodes = _seed_nodes()
    mean = loss.grad_fn
    labels = {(mean, mean.next_functions[0][0]): 0.5, (nodes[3], nodes[4]): torch.tensor(2.0)}
    text = draw_graph(loss, edge_labels=labels).text
    assert "n1 -> n0  0.5" in text and "n4 -> n3  2." in text
