"""The stepper: a backward pass run by hand, drawn and described one node at a time, from its log.

It renders per-step gradients as data: a learner's real ``.grad`` is never read or written. The logs are
recorded with the tests' copy of notebook 02's backward loop, on the example of the notebook's
step-through widget (the seed's loss with a bias b = 0 added).
"""

import re

import pytest
import torch
from backward_by_hand import backward_by_hand
from torch.testing import assert_close

import autograd_lab as lab
from autograd_lab.graph import format_tensor
from autograd_lab.graphmodel import node_name


def base(names):
    return [re.sub(r"\d+$", "", n) for n in names]


def demo_example():
    """The step-through widget's example: the seed's loss with a bias b = 0 added."""
    w = torch.tensor(1.0, requires_grad=True)
    b = torch.tensor(0.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    loss = ((2 * x - (w * x + b)) ** 2).mean()
    return loss, {"w": w, "b": b}


DEMO_ORDER = ["MeanBackward", "PowBackward", "SubBackward", "AddBackward", "AccumulateGrad(b)", "MulBackward",
              "AccumulateGrad(w)"]


def parse(graph):
    """{node id: title}, running title, done titles, {(child title, parent title): label}, {leaf: grad text}."""
    titles, running, done, edges, leaf_grads = {}, None, set(), {}, {}
    for line in graph.text.splitlines()[1:]:
        line = line.strip()
        m = re.match(r"^(n\d+) AccumulateGrad -> leaf (\w+) \| value [^|]+\| grad (.+?)(  \[.*)?$", line)
        if m:
            title = f"AccumulateGrad({m.group(2)})"
            titles[m.group(1)] = title
            leaf_grads[m.group(2)] = m.group(3)
        else:
            m = re.match(r"^(n\d+) (\w+?)\d*(  \[.*)?$", line)
            if m:
                title = m.group(2)
                titles[m.group(1)] = title
            else:
                m = re.match(r"^(n\d+) -> (n\d+)(?:  (.*))?$", line)
                if m:
                    edges[(titles[m.group(1)], titles[m.group(2)])] = m.group(3)
                continue
        if "[running]" in line:
            assert running is None, "two nodes running at once"
            running = title
        if "[done]" in line:
            done.add(title)
    return titles, running, done, edges, leaf_grads


def expected_demo_steps():
    """What each step must show, computed here from the maths, not from the log."""
    x = torch.tensor([4.0, 2.0])
    r = 2 * x - (1.0 * x + 0.0)
    g_mean = torch.full_like(x, 1 / len(x))
    g_pow = g_mean * 2 * r
    g_add = -g_pow  # what the subtraction sends to the addition
    sends = {
        "MeanBackward": {("PowBackward", "MeanBackward"): g_mean},
        "PowBackward": {("SubBackward", "PowBackward"): g_pow},
        "SubBackward": {("AddBackward", "SubBackward"): g_add},
        "AddBackward": {("MulBackward", "AddBackward"): g_add, ("AccumulateGrad(b)", "AddBackward"): g_add},
        "AccumulateGrad(b)": {},
        "MulBackward": {("AccumulateGrad(w)", "MulBackward"): g_add * x},
        "AccumulateGrad(w)": {},
    }
    deposits = {"AccumulateGrad(b)": ("b", g_add.sum()), "AccumulateGrad(w)": ("w", (g_add * x).sum())}
    return sends, deposits


def fmt(t):
    return format_tensor(t)


def test_demo_log_runs_in_the_expected_order():
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    titles = []
    for node, _, _ in log:
        if hasattr(node, "variable"):
            name = next(k for k, v in params.items() if v is node.variable)
            titles.append(f"AccumulateGrad({name})")
        else:
            titles.append(base([node_name(node)])[0])
    assert titles == DEMO_ORDER


@pytest.mark.parametrize("step", range(len(DEMO_ORDER) + 1))
def test_draw_step_shows_running_node_done_nodes_edge_gradients_and_leaf_grads(step):
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    sends, deposits = expected_demo_steps()
    graph = lab.draw_step(loss, log, step, params=params, names={"loss": loss})
    titles, running, done, edges, leaf_grads = parse(graph)
    assert sorted(titles.values()) == sorted(DEMO_ORDER)

    ran = DEMO_ORDER[:step]
    assert running == (ran[-1] if ran else None)
    assert done == set(ran[:-1])
    expected_edges = {}
    for title in ran:
        expected_edges.update({k: fmt(v) for k, v in sends[title].items()})
    shown = {k: v for k, v in edges.items() if v}
    assert shown == expected_edges
    assert len(edges) == 6  # every edge drawn, labelled or not
    for title, (leaf, total) in deposits.items():
        assert leaf_grads[leaf] == (fmt(total) if title in ran else "None")


def test_draw_step_puts_the_real_grads_back():
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    loss.backward()
    real = {k: v.grad.clone() for k, v in params.items()}
    graph = lab.draw_step(loss, log, 2, params=params)
    assert parse(graph)[4] == {"w": "None", "b": "None"}
    for k, v in params.items():
        assert_close(v.grad, real[k])


def test_describe_step_says_what_runs_and_where_gradients_go():
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    n = len(log)
    texts = [lab.describe_step(log, k, params=params) for k in range(n + 1)]
    assert texts[0].startswith(f"step 0 of {n}: nothing has run yet")
    assert "1." in texts[0] and "MeanBackward" in texts[0]
    assert texts[1].startswith(f"step 1 of {n}: MeanBackward0 receives 1.; sends [0.5, 0.5] to PowBackward")
    assert "nothing to None" in texts[3]  # the subtraction's y input
    assert texts[4] == (f"step 4 of {n}: AddBackward0 receives [-4., -2.]; sends [-4., -2.] to MulBackward0, "
                        "[-4., -2.] to AccumulateGrad(b).")
    assert texts[5] == f"step 5 of {n}: AccumulateGrad(b) adds -6. into b.grad (now -6.)."
    assert texts[n].startswith(f"step {n} of {n}: AccumulateGrad(w) adds -20. into w.grad")
    assert texts[n].endswith("Backward is finished.")
    assert all("Backward is finished" not in t for t in texts[:n])


def test_a_leaf_reached_twice_shows_the_sum_of_what_reached_it():
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    reach_b = next(entry for entry in log if getattr(entry[0], "variable", None) is params["b"])
    twice = log + [reach_b]  # a hand loop that runs b's AccumulateGrad once per edge, without summing first
    n = len(twice)
    assert lab.describe_step(twice, n, params=params).startswith(
        f"step {n} of {n}: AccumulateGrad(b) adds -6. into b.grad (now -12.).")
    assert parse(lab.draw_step(loss, twice, n, params=params))[4]["b"] == "-12."
    assert parse(lab.draw_step(loss, twice, n - 1, params=params))[4]["b"] == "-6."


def test_stepper_rejects_bad_steps_and_logs():
    loss, params = demo_example()
    log = []
    backward_by_hand(loss, log)
    with pytest.raises(ValueError, match="from 0"):
        lab.draw_step(loss, log, len(log) + 1)
    with pytest.raises(ValueError, match="from 0"):
        lab.describe_step(log, -1)
    with pytest.raises(TypeError, match="int"):
        lab.draw_step(loss, log, 1.5)
    with pytest.raises(TypeError, match="list of"):
        lab.draw_step(loss, "not a log", 0)
    with pytest.raises(TypeError, match="triple"):
        lab.draw_step(loss, [(1, 2)], 0)
    with pytest.raises(TypeError, match="backward node"):
        lab.draw_step(loss, [(1, torch.ones(()), ())], 0)
    other, _ = demo_example()
    with pytest.raises(ValueError, match="not in this loss's graph"):
        lab.draw_step(other, log, 1)
    bad = list(log)
    node, grad, grads = bad[-1]
    bad[-1] = (node, torch.ones(2), grads)  # a deposit not summed to the leaf's shape
    with pytest.raises(ValueError, match="sum_to_size"):
        lab.draw_step(loss, bad, len(bad))
    assert params["w"].grad is None  # put back even after the error
    assert lab.describe_step([], 0) == "step 0 of 0: the log is empty; run backward by hand first."


class WatchedTensor(torch.Tensor):
    """A leaf that counts every write to its .grad."""

    writes = 0

    @property
    def grad(self):
        return torch.Tensor.grad.__get__(self)

    @grad.setter
    def grad(self, value):
        type(self).writes += 1
        torch.Tensor.grad.__set__(self, value)


def test_draw_step_shows_deposits_without_touching_the_real_grad():
    w = torch.tensor(1.0).as_subclass(WatchedTensor).requires_grad_()
    loss = (w * 3.0) ** 2
    log = []
    backward_by_hand(loss, log)
    w.grad = torch.tensor(123.0)  # what the learner's .grad holds
    WatchedTensor.writes = 0
    for step in range(len(log) + 1):
        text = lab.draw_step(loss, log, step, params={"w": w}).text
        assert ("grad 18." in text) == (step == len(log)) and "123" not in text
    assert WatchedTensor.writes == 0 and w.grad.item() == 123.0
    assert "adds 18. into w.grad (now 18.)" in lab.describe_step(log, len(log), params={"w": w})
