"""Notebook 02 (grad_fn chains): the facts its prose relies on.

The backward loop the tests use (tests/backward_by_hand.py) is their own copy of the one written out in the
notebook: the notebook's claims are checked against PyTorch here, not read back from the notebook. One group
of tests also runs the notebook's own loop (its function definitions, read from the notebook) on a collection
of graphs.
"""

import ast
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from backward_by_hand import backward_by_hand, reverse_topological_order
from torch.testing import assert_close

from autograd_lab import graph_nodes
from autograd_lab.graphmodel import node_name

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_grad_fn_chains.ipynb"


def base(names):
    return [re.sub(r"\d+$", "", n) for n in names]


def names_of(nodes):
    return [node_name(n) for n in nodes]


def walk(tensor):
    names, node = [], tensor.grad_fn
    while node is not None:
        names.append(node_name(node))
        node = next((c for c, _ in node.next_functions if c is not None), None)
    return names


def seed_example(w_value=2.0):
    """The notebook's example (its own numbers: the seed's -20 is derived once, in notebook 04)."""
    w = torch.tensor(w_value, requires_grad=True)
    x = torch.tensor([1.0, 3.0])
    y = torch.tensor([4.0, 7.0])
    per_sample = (y - w * x) ** 2
    return w, x, y, per_sample, per_sample.mean()


# ---------------------------------------------------------------- section 1: the chain


def test_seed_values_printed_in_the_notebook():
    _, _, _, per_sample, loss = seed_example()
    assert per_sample.tolist() == [4.0, 1.0] and type(per_sample.grad_fn).__name__.startswith("PowBackward")
    assert loss.item() == 2.5 and type(loss.grad_fn).__name__.startswith("MeanBackward")


def test_seed_chain_none_branch_and_accumulate_grad():
    w, _, y, _, loss = seed_example()
    assert base(walk(loss)) == ["MeanBackward", "PowBackward", "SubBackward", "MulBackward", "AccumulateGrad"]
    sub = loss.grad_fn.next_functions[0][0].next_functions[0][0]
    assert sub.next_functions[0][0] is None and not y.requires_grad  # the None branch is y
    acc = sub.next_functions[1][0].next_functions[0][0]
    assert type(acc).__name__ == "AccumulateGrad" and acc.variable is w and acc.next_functions == ()


def inner_nodes(out):
    """The names of the nodes a call added: every node of out's graph but the leaves' AccumulateGrad."""
    return [node_name(n) for n in graph_nodes(out) if not hasattr(n, "variable")]


ELEMENTWISE_ONE_NODE = {
    "torch.sigmoid": torch.sigmoid, "torch.tanh": torch.tanh, "torch.exp": torch.exp, "torch.relu": torch.relu,
    "torch.sin": torch.sin, "torch.abs": torch.abs, "torch.log": torch.log, "F.gelu": F.gelu, "F.silu": F.silu,
    "F.softplus": F.softplus, "t ** 2": lambda t: t ** 2, "t * 3": lambda t: t * 3, "t + 1": lambda t: t + 1,
    "t * t": lambda t: t * t,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE_ONE_NODE))
def test_most_elementwise_operations_record_one_node(name):
    t = torch.tensor([3.0, 4.0, 12.0], requires_grad=True)
    assert len(inner_nodes(ELEMENTWISE_ONE_NODE[name](t))) == 1


def test_a_call_built_from_several_operations_records_several_nodes():
    """Going deeper, "One call, several nodes": the counts the notebook prints, and what its prose says of them."""
    torch.manual_seed(0)
    t = torch.tensor([3.0, 4.0, 12.0], requires_grad=True)
    assert base(inner_nodes(torch.sigmoid(t))) == ["SigmoidBackward"]
    softsign = base(inner_nodes(F.softsign(t)))  # elementwise, written with three operations
    assert sorted(softsign) == ["AbsBackward", "AddBackward", "DivBackward"]
    normalize = base(inner_nodes(F.normalize(t, dim=0)))
    assert len(normalize) == 4 and {"ClampMinBackward", "ExpandBackward", "DivBackward"} <= set(normalize)
    layer = nn.Linear(3, 2)
    linear = base(inner_nodes(layer(t)))
    assert sorted(linear) == ["AddmmBackward", "TBackward", "ViewBackward", "ViewBackward"]
    # the two views come from an input that is not 2-D, batch or not: a (4, 5, 3) stack of batches gets them too,
    # a (5, 3) batch gets a transpose and addmm only
    rows, stack = torch.randn(5, 3, requires_grad=True), torch.randn(4, 5, 3, requires_grad=True)
    assert sorted(base(inner_nodes(layer(rows)))) == ["AddmmBackward", "TBackward"]
    assert sorted(base(inner_nodes(layer(stack)))) == sorted(linear)
    for vector_or_stack, matrix in [(t, (1, 3)), (stack, (20, 3))]:  # viewed as a matrix, the result viewed back
        views = [n for n in graph_nodes(layer(vector_or_stack)) if node_name(n).startswith("ViewBackward")]
        assert sorted(tuple(n._saved_self_sym_sizes) for n in views) == sorted([vector_or_stack.shape,
                                                                                 (matrix[0], 2)])
    assert sorted(base(inner_nodes(nn.Linear(3, 2, bias=False)(rows)))) == ["MmBackward", "TBackward"]
    text = {c["id"]: "".join(c["source"]) for c in _cells()}
    assert "no\nbatch dimension" not in text["calls-why-md"] and "batch or not" in text["calls-why-md"]
    assert "layer(stack)" in text["calls"] and "layer(rows)" in text["calls"]
    # another composite: cosine similarity records several nodes too
    assert len(inner_nodes(F.cosine_similarity(t, torch.randn(3, requires_grad=True), dim=0))) > 4


def test_digit_tells_variants_of_one_operation_apart():
    t = torch.tensor([3.0, 4.0, 12.0], requires_grad=True)
    whole, by_dim = node_name(t.sum().grad_fn), node_name(t.sum(0).grad_fn)
    assert whole != by_dim and base([whole]) == base([by_dim]) == ["SumBackward"]
    a = torch.zeros(2, 1, requires_grad=True)
    assert base([node_name(a.squeeze().grad_fn)]) == base([node_name(a.squeeze(1).grad_fn)])


# ---------------------------------------------------------------- section 3: saved tensors


def saved_tensors(node):
    out = {}
    for name in dir(node):
        if name.startswith("_saved_"):
            value = getattr(node, name)
            if isinstance(value, torch.Tensor):
                out[name] = value
    return out


def test_what_nodes_save():
    w, x, y, _, loss = seed_example()
    mean, pw, sub, mul, acc = reverse_topological_order(loss.grad_fn)
    assert saved_tensors(mean) == {}  # sizes and a count only: plain numbers
    assert [n for n in dir(mean) if n.startswith("_saved_")]  # ... but it does keep something
    assert set(saved_tensors(pw)) == {"_saved_self"}
    assert_close(pw._saved_self, (y - w * x).detach())
    assert pw._saved_exponent == 2
    assert set(saved_tensors(mul)) == {"_saved_other"} and mul._saved_self is None  # x kept, w not needed
    assert_close(mul._saved_other, x)
    both = (w * x.clone().requires_grad_()).grad_fn  # the boundary the notebook prints: x asks for a gradient too
    assert set(saved_tensors(both)) == {"_saved_self", "_saved_other"} and both._saved_self is w
    only_x = (w.detach() * x.clone().requires_grad_()).grad_fn  # and the mirror case: w is kept, x is not
    assert set(saved_tensors(only_x)) == {"_saved_self"} and only_x._saved_other is None
    assert saved_tensors(sub) == {} and saved_tensors(acc) == {}


# ---------------------------------------------------------------- sections 4-5: paper and by hand


def test_chain_rule_on_paper_matches_each_node_of_the_hand_walk():
    w, x, y, _, loss = seed_example()
    r = y - w.detach() * x
    g_mean = torch.full_like(x, 1 / len(x))
    g_pow = g_mean * 2 * r
    g_sub = -g_pow
    g_mul = g_sub * x
    log = []
    grads = backward_by_hand(loss, log)
    assert base(names_of(n for n, _, _ in log)) == [
        "MeanBackward", "PowBackward", "SubBackward", "MulBackward", "AccumulateGrad",
    ]
    assert_close(log[0][1], torch.tensor(1.0))
    assert_close(log[1][1], g_mean)
    assert_close(log[2][1], g_pow)
    assert log[2][2][0] is None
    assert_close(log[2][2][1], g_sub)
    assert_close(log[3][2][0], g_mul)
    assert log[3][2][1] is None
    assert_close(grads[w], g_mul.sum())
    assert grads[w].shape == w.shape and log[4][1].shape == w.shape  # summed to the leaf's shape
    assert g_mul.sum().item() == -5.0


def test_hand_backward_matches_backward_on_the_seed():
    w, *_, loss = seed_example()
    by_hand = backward_by_hand(loss)
    loss.backward()
    assert list(by_hand) == [w]
    assert_close(by_hand[w], w.grad)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hand_backward_matches_backward_on_a_small_mlp(seed, device):
    torch.manual_seed(seed)
    mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
    X, Y = torch.randn(16, 3, device=device), torch.randn(16, 1, device=device)
    loss = nn.functional.mse_loss(mlp(X), Y)
    by_hand = backward_by_hand(loss)
    loss.backward()
    assert len(by_hand) == 4
    for p in mlp.parameters():
        assert_close(by_hand[p], p.grad)


def test_hand_backward_adds_contributions_of_a_value_used_twice():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    x = torch.randn(5, 4)
    h = torch.relu(lin(x))
    loss = (lin(h) * h).sum()  # the same layer twice, and h used twice
    by_hand = backward_by_hand(loss)
    loss.backward()
    for p in lin.parameters():
        assert_close(by_hand[p], p.grad)


def test_hand_walk_hands_each_node_what_the_engine_hands_it():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    loss = nn.functional.mse_loss(mlp(torch.randn(16, 3)), torch.randn(16, 1))
    log = []
    backward_by_hand(loss, log)
    seen = {}
    for node in graph_nodes(loss):
        if not hasattr(node, "variable"):
            node.register_prehook(lambda grad_outputs, node=node: seen.__setitem__(node, grad_outputs[0]))
    loss.backward()
    inner = [(n, g) for n, g, _ in log if not hasattr(n, "variable")]
    assert len(inner) == len(seen)
    for node, grad_output in inner:
        assert_close(grad_output, seen[node])


# ---------------------------------------------------------------- section 5: the loop on a collection of graphs
# Each builder returns (loss, leaves). Several broadcast an intermediate, not only a leaf.


def _seed_graph():
    w, *_, loss = seed_example()
    return loss, [w]


def _broadcast_sum():  # the notebook's case: h = v.sum() is one number, broadcast against u
    v, u = torch.randn(3, requires_grad=True), torch.randn(5)
    return (v.sum() * u).sum(), [v]


def _broadcast_unsqueezed():
    w, x = torch.randn(3, requires_grad=True), torch.randn(3, 5)
    return (w[:, None] * x).sum(), [w]


def _broadcast_matrix_rows():
    w, a, b = torch.randn(3, requires_grad=True), torch.randn(3, 4), torch.randn(6, 4)
    h = w @ a  # (4,), an intermediate
    return torch.tanh(h[None, :] * b).mean(), [w]


def _expand_and_divide():
    w, x = torch.randn(3, requires_grad=True), torch.randn(4, 3)
    return (x / (w.exp().sum() + w.expand(4, 3))).pow(2).mean(), [w]


def _centred_rows():  # a mean with keepdim, broadcast back over its row
    z = torch.randn(5, 4, requires_grad=True)
    return ((z - z.mean(1, keepdim=True)) ** 3).sum(), [z]


def _value_used_twice():
    w, x = torch.randn(3, requires_grad=True), torch.randn(3)
    h = w * x
    return (h * h + h.sum() * w).sum(), [w]


def _mlp_graph():
    mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    return nn.functional.mse_loss(mlp(torch.randn(16, 3)), torch.randn(16, 1)), list(mlp.parameters())


def _classifier_graph():
    lin = nn.Linear(4, 3)
    scale = torch.tensor(2.0, requires_grad=True)  # a scalar leaf broadcast over the logits
    logits = lin(torch.randn(6, 4)) * scale
    return nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0, 1, 2])), [*lin.parameters(), scale]


def _mixed_leaf_shapes():
    a, b = torch.randn(2, 1, 3, requires_grad=True), torch.randn(4, 1, requires_grad=True)
    return ((a + b) * (a * b).sigmoid()).sum(), [a, b]


CORPUS = {f.__name__.strip("_"): f for f in (
    _seed_graph, _broadcast_sum, _broadcast_unsqueezed, _broadcast_matrix_rows, _expand_and_divide,
    _centred_rows, _value_used_twice, _mlp_graph, _classifier_graph, _mixed_leaf_shapes)}


def _notebook_loop():
    """The notebook's reverse_topological_order and backward_by_hand, exactly as the learner reads them."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    namespace = {"torch": torch}
    for cell_id in ("topo", "loop"):
        tree = ast.parse(cells[cell_id])
        tree.body = [node for node in tree.body if isinstance(node, ast.FunctionDef)]  # not the demo prints
        exec(compile(tree, cell_id, "exec"), namespace)
    return namespace["backward_by_hand"]


LOOPS = {"notebook": _notebook_loop, "this test's copy": lambda: backward_by_hand}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("graph", sorted(CORPUS))
def test_hand_backward_matches_backward_on_every_graph_of_the_corpus(graph, loop):
    torch.manual_seed(0)
    loss, leaves = CORPUS[graph]()
    by_hand = LOOPS[loop]()(loss)
    loss.backward()
    assert set(by_hand) == set(leaves)
    for leaf in leaves:
        assert by_hand[leaf].shape == leaf.shape
        assert_close(by_hand[leaf], leaf.grad)


@pytest.mark.parametrize("graph", sorted(CORPUS))
def test_every_node_receives_what_the_engine_hands_it(graph):
    torch.manual_seed(0)
    loss, _ = CORPUS[graph]()
    log = []
    _notebook_loop()(loss, log)
    seen = {}
    for node in graph_nodes(loss):
        if not hasattr(node, "variable"):
            node.register_prehook(lambda grad_outputs, node=node: seen.__setitem__(node, grad_outputs[0]))
    loss.backward()
    inner = [(n, g) for n, g, _ in log if not hasattr(n, "variable")]
    assert len(inner) == len(seen)
    for node, grad_output in inner:
        assert grad_output.shape == seen[node].shape
        assert_close(grad_output, seen[node])


def test_without_the_sum_on_each_edge_a_broadcast_intermediate_gets_a_gradient_of_the_wrong_shape():
    torch.manual_seed(0)
    v, u = torch.randn(3, requires_grad=True), torch.randn(5)
    h = v.sum()
    out = (h * u).sum()
    mul = out.grad_fn.next_functions[0][0]
    (grad_h, _) = mul(torch.ones(5))
    assert grad_h.shape == u.shape != h.shape  # the node itself returns one value per value of u
    sum_node = mul.next_functions[0][0]
    assert node_name(sum_node).startswith("SumBackward")
    assert tuple(sum_node._input_metadata[0].shape) == ()  # what the edge sums it down to
    with pytest.raises(RuntimeError):
        sum_node(grad_h)  # handed five numbers where it expects one


def test_the_loop_leaves_out_nodes_with_several_outputs():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    first, rest = w.split([1, 2])
    loss = (first * 3).sum() + (rest ** 2).sum()
    split_node = loss.grad_fn.next_functions[1][0].next_functions[0][0].next_functions[0][0]
    assert node_name(split_node).startswith("Split")  # one node, two outputs: k = 0 and k = 1 point at it
    try:
        by_hand = _notebook_loop()(loss)[w]
    except (RuntimeError, TypeError):
        by_hand = None
    loss.backward()
    assert by_hand is None or not torch.allclose(by_hand, w.grad)


def test_the_loop_ignores_tensor_hooks_that_backward_runs():
    w, x = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, 4.0])
    h = w * x
    h.register_hook(lambda grad: grad * 10)
    loss = h.sum()
    by_hand = _notebook_loop()(loss)[w]
    loss.backward()
    assert_close(by_hand, x)
    assert_close(w.grad, 10 * x)


def test_reverse_topological_order_puts_each_node_before_its_inputs():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    loss = nn.functional.mse_loss(mlp(torch.randn(4, 3)), torch.randn(4, 1))
    order = reverse_topological_order(loss.grad_fn)
    position = {node: i for i, node in enumerate(order)}
    assert len(order) == len(graph_nodes(loss))
    for node in order:
        for child, _ in node.next_functions:
            if child is not None:
                assert position[node] < position[child]


# ---------------------------------------------------------------- section 3: backward() starts at v = 1


def test_backward_is_the_vector_jacobian_product_started_at_one():
    w, x, y, _, loss = seed_example()
    loss.backward()
    plain = w.grad.clone()
    w.grad = None
    loss = ((y - w * x) ** 2).mean()
    loss.backward(gradient=torch.tensor(1.0))
    assert_close(w.grad, plain)
    J = torch.autograd.functional.jacobian(lambda w_: ((y - w_ * x) ** 2).mean(), w.detach())
    assert_close(plain, 1.0 * J)


# ---------------------------------------------------------------- Going deeper: the graph is freed


def test_second_backward_raises_and_saved_tensors_are_gone():
    w, x, y, _, loss = seed_example()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    with pytest.raises(RuntimeError, match="already been freed"):
        _ = loss.grad_fn.next_functions[0][0]._saved_self


def test_retain_graph_lets_a_second_backward_add_to_grad():
    w, *_, loss = seed_example()
    loss.backward(retain_graph=True)
    first = w.grad.clone()
    loss.backward()
    assert_close(w.grad, 2 * first)
    assert first.item() == -5.0 and w.grad.item() == -10.0


def test_a_power_keeps_its_exponent_as_a_plain_number_but_still_saves_a_tensor():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    node = (w ** 2).grad_fn
    assert node._saved_exponent == 2 and not torch.is_tensor(node._saved_exponent)
    assert set(saved_tensors(node)) == {"_saved_self"}


@pytest.mark.parametrize("op", [lambda w: w + 3, lambda w: 3 - w, lambda w: w.sum() * 1 + 0])
def test_adding_a_python_number_saves_no_tensor(op):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    out = op(w)
    assert saved_tensors(out.grad_fn) == {}


def test_add_saves_no_tensor_so_a_second_backward_works():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(4.0, requires_grad=True)
    c = a + b
    assert saved_tensors(c.grad_fn) == {} and c.grad_fn._saved_alpha == 1
    c.backward()
    c.backward()
    assert a.grad.item() == 2.0 and b.grad.item() == 2.0


# ---------------------------------------------------------------- section 3: a node computes a vector-Jacobian product


def test_calling_a_node_returns_v_times_its_local_derivative():
    w, x, y, _, loss = seed_example()
    pow_node = loss.grad_fn.next_functions[0][0]
    v = torch.full_like(x, 1 / len(x))
    with torch.no_grad():
        got = pow_node(v)
    assert_close(got, v * 2 * (y - w.detach() * x))
    # a second case: a node with two inputs that both need a gradient returns one product per input
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    g, node = torch.randn(3), (a * b).grad_fn
    with torch.no_grad():
        ga, gb = node(g)
    assert_close(ga, g * b.detach())
    assert_close(gb, g * a.detach())


def test_a_node_returns_the_broadcast_shape_and_the_edge_sums_it():
    w, x, _, _, loss = seed_example()
    mul = loss.grad_fn.next_functions[0][0].next_functions[0][0].next_functions[1][0]
    with torch.no_grad():
        grad_w, grad_x = mul(torch.ones(2))
    assert node_name(mul).startswith("MulBackward") and grad_x is None
    assert grad_w.shape == x.shape != w.shape  # one value per sample, for a w that holds one
    loss.backward()
    assert w.grad.shape == w.shape  # what reached w was summed on the edge


def _bias_example(spelling):
    """The step-through's graph (the example with a bias b = 0), in one of two spellings of the same sum."""
    w, x, y, _, _ = seed_example()
    b = torch.tensor(0.0, requires_grad=True)
    prediction = w * x + b if spelling == "w * x + b" else b + w * x
    return w, b, ((y - prediction) ** 2).mean()


def _engine_order(loss, w, b):
    """The order in which PyTorch's engine runs the nodes (pre-hooks), and deposits into the leaves."""
    ran, deposited = [], []
    for node in graph_nodes(loss):
        leaf = getattr(node, "variable", None)
        name = node_name(node) + ("(w)" if leaf is w else "(b)" if leaf is b else "")
        node.register_prehook(lambda grad_outputs, name=name: ran.append(name))
    w.register_post_accumulate_grad_hook(lambda p: deposited.append("w"))
    b.register_post_accumulate_grad_hook(lambda p: deposited.append("b"))
    loss.backward()
    return base(ran), deposited


@pytest.mark.parametrize("spelling", ["w * x + b", "b + w * x"])
def test_bs_node_waits_only_for_the_nodes_on_its_path_from_the_loss(spelling):
    """The Predict of the step-through: which nodes must run before b's AccumulateGrad? In PyTorch's engine too."""
    w, b, loss = _bias_example(spelling)
    ran, _ = _engine_order(loss, w, b)
    before_b = ran[:ran.index("AccumulateGrad(b)")]
    assert before_b == ["MeanBackward", "PowBackward", "SubBackward", "AddBackward"]  # its path from the loss
    assert ran.index("MulBackward") > ran.index("AccumulateGrad(b)")  # the multiplication was not needed


def test_the_walk_is_one_order_and_the_engine_may_take_another_with_the_same_gradients():
    """The notebook says the slider follows its walk, one reverse topological order, not necessarily the engine's.
    Written b + w * x, the notebook's own walk deposits w first; PyTorch's engine deposits b first in both spellings."""
    loop = _notebook_loop()
    for spelling, walk_first in [("w * x + b", "b"), ("b + w * x", "w")]:
        w, b, loss = _bias_example(spelling)
        log = []
        by_hand = loop(loss, log)
        leaves = ["w" if node.variable is w else "b" for node, _, _ in log if hasattr(node, "variable")]
        assert leaves[0] == walk_first
        _, deposited = _engine_order(loss, w, b)
        assert deposited == ["b", "w"]
        assert_close(by_hand[w], w.grad)
        assert_close(by_hand[b], b.grad)
    text = {c["id"]: "".join(c["source"]) for c in _cells()}
    assert "which nodes\nmust run before `b`'s `AccumulateGrad`?" in text["step-md"]
    assert "w` or `b`" not in text["step-md"]  # a question only the walk's order would answer
    assert "one reverse\ntopological order; PyTorch's engine may take another" in text["mlp-md"]


def test_the_step_through_twin_shows_b_deposited_before_the_multiplication_runs():
    # the widget's graph after 5 steps: b's AccumulateGrad runs, the nodes on its path have run, MulBackward not yet
    w, b, loss = _bias_example("w * x + b")
    log = []
    backward_by_hand(loss, log)
    assert len(log) == 7 and [node.variable for node, _, _ in log[:5] if hasattr(node, "variable")] == [b]
    assert base(names_of(node for node, _, _ in log[:4])) == ["MeanBackward", "PowBackward", "SubBackward",
                                                               "AddBackward"]


# ---------------------------------------------------------------- what the exercises ask is never printed above them


def _sources_before(cell_id):
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    ids = [c["id"] for c in cells]
    return "\n".join("".join(c["source"]) for c in cells[:ids.index(cell_id)])


def test_no_exercise_is_answered_by_a_cell_above_it():
    from autograd_lab.exercises import grad_fn_chains as ch

    above = _sources_before("ex3-md")
    for source in ch.SECOND_BACKWARD.values():
        assert source not in above
    assert "a / b" not in _sources_before("ex2-md") and "DivBackward" not in _sources_before("ex2-md")
    assert "sigmoid" not in _sources_before("ex1-md")


def test_the_seeds_gradient_is_not_derived_again_here():
    texts = []
    for cell in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", "")))
    assert not re.search(r"-20\.(?!\d)", "\n".join(texts)) and "[4., 2.]" not in "\n".join(texts)


# ---------------------------------------------------------------- the learner finds out: questions before answers


def _cells():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def test_every_widget_comes_after_the_predict_it_helps_answer():
    cells = _cells()
    ids = [c["id"] for c in cells]
    widgets = [i for i, c in enumerate(cells) if c["metadata"].get("autograd_lab")]
    assert widgets, "02 keeps its step-through widget"
    for w in widgets:
        twin = ids.index(cells[w]["metadata"]["autograd_lab"]["twin"])
        assert twin > w
        between = "".join("".join(c["source"]) for c in cells[w + 1:twin] if c["cell_type"] == "markdown")
        assert "Predict" not in between and "shows the same" not in between  # no question the widget answered
        ask = max(i for i in range(w) if cells[i]["cell_type"] == "markdown")
        assert "Predict" in "".join(cells[ask]["source"]), f"widget {ids[w]}: the text just above it asks nothing"
        shown = [i for i in range(ask + 1, w) if cells[i].get("outputs")]  # nothing printed between question and widget
        asked = not shown
        assert asked, f"widget {ids[w]}: its Predict must come before it"


def test_the_step_through_twin_asks_what_step_5_shows():
    # the twin's question: b received one gradient per sample, and one number is in b.grad
    w, x, y, _, _ = seed_example()
    b = torch.tensor(0.0, requires_grad=True)
    loss = ((y - (w * x + b)) ** 2).mean()
    log = []
    backward_by_hand(loss, log)
    add = log[3]
    assert node_name(add[0]).startswith("AddBackward")
    to_b = [g for (child, _), g in zip(add[0].next_functions, add[2]) if getattr(child, "variable", None) is b]
    assert to_b and to_b[0].shape == x.shape and log[4][0].variable is b
    assert_close(log[4][1], to_b[0].sum())
    meta = next(c for c in _cells() if c["metadata"].get("autograd_lab"))["metadata"]["autograd_lab"]
    assert meta == {"twin": "twin-step", "set": {"step": 5}}


def test_no_cell_raises_and_the_second_backward_is_shown_as_python_prints_it():
    cells = {c["id"]: c for c in _cells()}
    assert not [i for i, c in cells.items() if "raises-exception" in c["metadata"].get("tags", [])]
    assert not [i for i, c in cells.items() if "%xmode" in "".join(c["source"])]  # no cell raises: nothing to trim
    twice = cells["twice"]
    assert "with lab.shows_error():" in "".join(twice["source"])
    err = "".join("".join(o.get("text", "")) for o in twice["outputs"] if o.get("name") == "stderr")
    assert err.startswith("Traceback (most recent call last):")
    assert "RuntimeError: Trying to backward through the graph a second time" in err
    assert not [o for c in cells.values() for o in c.get("outputs", []) if o["output_type"] == "error"]


def test_the_second_backward_predict_names_neither_the_wrapper_nor_a_failure():
    """The Predict comes before the cell and leaves the outcome open; the cell keeps its wrapper (Run All goes on)."""
    cells = _cells()
    ids = [c["id"] for c in cells]
    ask = "".join(cells[ids.index("twice") - 1]["source"])
    question = ask[ask.index("**Predict, then run:**"):]
    assert "or something else? Why?" in question
    for giveaway in ("shows_error", "error", "fail", "raise"):
        assert giveaway not in question.lower()
    assert "with lab.shows_error():" in "".join(cells[ids.index("twice")]["source"])


def test_exercise_3s_example_gives_no_verdict():
    # the example was the exact negation of the answer; now it names the form only
    from autograd_lab.exercises import grad_fn_chains as ch

    text = "".join(next(c for c in _cells() if c["id"] == "ex3")["source"])
    assert not re.search(r"""["'][A-D]["']\s*:\s*(True|False)""", text)
    assert 'keys "A" to "D"' in text
    truth = ch._reference_second_backward()
    assert set(truth.values()) == {True, False}  # a real question: some raise, some do not


def test_exercise_1_says_what_its_check_enforces_about_digits():
    text = "".join(next(c for c in _cells() if c["id"] == "ex1-md")["source"])
    assert "digits may be left out" in text and "must be the one PyTorch prints" in text


def test_the_time_line_states_the_count_and_both_parts_fit():
    from tools import minutes

    counted = minutes.count_file(NOTEBOOK)
    assert counted.core <= 50 and counted.optional <= 20, (float(counted.core), float(counted.optional))
    intro = "".join(_cells()[0]["source"])
    assert f"**Time:** about {counted.core_minutes} minutes, plus {counted.optional_minutes} optional." in intro


# ---------------------------------------------------------------- torchviz: inside the course and outside it
# Inside: a kernel that imported autograd_lab shows torchviz's graphs (any Digraph, Graph or Source) without a
# system `dot` -- tests/instruments/test_graph.py, test_torchviz_graphs_are_pictures_without_a_system_graphviz_....
# Outside: one fresh Python that never imports the course, whose PATH holds only the venv's programs.

_OUTSIDE_THE_COURSE = """
import graphviz, torch, torchviz
w = torch.tensor(2.0, requires_grad=True)
graph = torchviz.make_dot(((torch.tensor([4.0, 7.0]) - w * torch.tensor([1.0, 3.0])) ** 2).mean(), params={"w": w})
for name, call in [("render", lambda: graph.render("graph", format="png")), ("display", graph._repr_mimebundle_)]:
    try:
        call()
        print(name, "worked")
    except graphviz.ExecutableNotFound:
        print(name, "needs dot")
graph.save("graph.gv")
"""


@pytest.fixture(scope="module")
def outside_the_course(tmp_path_factory):
    """What torchviz did without a system `dot` in a Python without the course (its lines), and where."""
    import os
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("torchviz")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    env.pop("AUTOGRAD_LAB_DOT", None)
    run = subprocess.run([sys.executable, "-c", _OUTSIDE_THE_COURSE], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines(), folder


def test_outside_the_course_torchvizs_display_and_render_need_a_dot_program(outside_the_course):
    """The notebook says: in your own project, displaying the Digraph or .render(...) runs `dot`."""
    lines, _ = outside_the_course
    assert lines[:2] == ["render needs dot", "display needs dot"]


def test_without_dot_the_saved_source_is_drawn_by_graphviz_pure(outside_the_course):
    import shutil
    import subprocess
    import sys

    _, folder = outside_the_course
    tool = shutil.which("graphviz-pure", path=str(Path(sys.executable).parent))
    assert tool, "graphviz-pure's command is installed with the course"
    subprocess.run([tool, "-Tsvg", "graph.gv", "-o", "graph.svg"], cwd=folder, check=True, timeout=120)
    svg = (folder / "graph.svg").read_text()
    assert "<svg" in svg and "MeanBackward0" in svg


def test_the_notebook_no_longer_says_render_works_everywhere():
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    text = cells["torchviz-md"]
    assert "autograd_lab" in text and "`dot`" in text and "graphviz-pure -Tsvg" in text


def _heights(svg):
    """The y of each node of an SVG that Graphviz drew, by its first line of text (larger y: lower on the page)."""
    heights = {}
    for node in re.finditer(r'<g id="node\d+" class="node">(.*?)</g>', svg, re.S):
        texts = re.findall(r"<text[^>]*y=\"(-?[\d.]+)\"[^>]*>([^<]*)</text>", node.group(1))
        heights[texts[0][1].strip() or "()"] = float(texts[0][0])
    return heights


def test_torchviz_draws_the_other_way_up_the_loss_at_the_bottom():
    """torchviz leaves Graphviz's default direction (top to bottom); the course draws bottom to top."""
    import torchviz

    from autograd_lab import draw_graph
    from autograd_lab.graph import svg_of

    w, x, y, _, loss = seed_example()
    dot = torchviz.make_dot(loss, params={"w": w})
    assert "rankdir" not in dot.source
    theirs = _heights(svg_of(dot.source))
    assert theirs["()"] > theirs["MeanBackward0"] > theirs["w"]  # the loss (its shape, "()") at the bottom
    ours = _heights(draw_graph(loss, params={"w": w}, names={"loss": loss}).svg())
    assert ours["loss"] < ours["MeanBackward0"] < ours["w"]      # the loss at the top
    text = {c["id"]: "".join(c["source"]) for c in _cells()}["torchviz-md"]
    assert "the loss at the bottom, the leaves at the top" in text and "from the top down" in text
    assert "the loss green at the top, the leaf blue at the bottom" in {c["id"]: "".join(c["source"])
                                                                         for c in _cells()}["draw-md"]
