"""The drawing on a learner's own model: real architectures (tools/architectures.py), recorded with
record_modules, drawn as pictures within the time limit, with module names and folded blocks; the same node
sets as torchviz.make_dot; torchviz's argument names accepted."""

import re
import time

import pytest
import torch
import torchviz
from test_torchviz_crosscheck import crosscheck

from autograd_lab import draw_graph
from autograd_lab.engine import DOT_TIMEOUT_S
from autograd_lab.graphmodel import walk
from autograd_lab.modules import record_modules
from tools import architectures as arch


def recorded(name, **kwargs):
    """(model, loss) of an architecture, its forward run under record_modules."""
    build = {"gpt2": arch.GPT2, "vit": arch.ViT}[name]
    torch.manual_seed(0)
    model = build(**kwargs)
    with record_modules(model):
        if name == "gpt2":
            idx = torch.randint(0, 100, (2, 16))
            loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        else:
            loss = model(torch.randn(2, 3, 64, 64)).square().mean()
    return model, loss


@pytest.mark.parametrize("name, blocks", [("gpt2", "h"), ("vit", "layers")])
def test_a_12_layer_transformer_is_a_picture_with_module_names_and_folded_blocks(name, blocks):
    model, loss = recorded(name)
    start = time.perf_counter()
    g = draw_graph(loss, params=model)
    bundle = g._repr_mimebundle_()
    assert time.perf_counter() - start < DOT_TIMEOUT_S
    assert bundle["image/svg+xml"].startswith("<svg") or "<svg" in bundle["image/svg+xml"]
    assert f"{blocks}.0 - {blocks}.11: 12 identical blocks, {blocks}.0 drawn" in g.text
    assert f"{blocks}.1 - {blocks}.11  11 more blocks identical to {blocks}.0" in g.text
    assert f"  {blocks}.0.mlp.0" in g.text  # a node named by the module that made it
    assert f"{blocks}.5." not in g.text  # the other blocks are in the box


def test_module_names_are_the_modules_whose_forward_made_the_nodes():
    model, loss = recorded("gpt2", layers=3)
    graph = walk(loss, model, modules=record_modules.__globals__["_RECORDS"][model].lookup())
    checked = 0
    for node in graph.nodes:
        for j in node.inputs:  # a node fed a Linear's bias directly was made by that Linear
            leaf = graph.nodes[j] if j is not None else None
            if leaf is not None and leaf.is_leaf and leaf.param.endswith(".bias") and node.name == "AddmmBackward0":
                assert node.module == leaf.param.rpartition(".")[0]
                checked += 1
    assert checked == 3 * 6  # q, k, v, proj and the MLP's two Linears, in each of 3 blocks
    modules = {n.module for n in graph.nodes}
    assert {"h.0.attn", "h.2.ln_2", "ln_f", ""} <= modules  # "" is the model's own forward (the tied head)


def test_depth_collapses_a_model_to_its_top_modules():
    model, loss = recorded("gpt2")
    g = draw_graph(loss, params=model, depth=1)
    boxes = re.findall(r"^  n\d+ (\w+)  (\w+)  (\d+) backward nodes?$", g.text, re.M)
    assert [(m, kind) for m, kind, _ in boxes] == [("ln_f", "LayerNorm"), ("h", "ModuleList"),
                                                  ("wte", "Embedding"), ("wpe", "Embedding")]
    assert "image/svg+xml" in g._repr_mimebundle_()


def test_depth_without_a_record_says_what_to_do():
    _, loss = arch.gpt2_loss(layers=1)
    with pytest.raises(ValueError, match=r"with record_modules\(model\)"):
        draw_graph(loss, params=dict(arch.GPT2(1).named_parameters()), depth=1)


def test_folding_never_merges_branches_that_end_in_different_leaves():
    model, loss = arch.gpt2_loss(layers=10)  # no params: Linear weight (256 x 64) and bias (64) look alike
    g = draw_graph(loss, fold=True)
    leaves = [line for line in g.text.splitlines() if "AccumulateGrad -> leaf" in line]
    assert len(leaves) == len(list(model.parameters()))  # every parameter its own box
    assert not re.search(r"-> n\d+  x \d+", "\n".join(line for line in g.text.splitlines()
                                                       if any(line.split()[0] == leaf.split()[0] for leaf in leaves)))


@pytest.mark.parametrize("name", sorted(arch.ALL))
def test_every_architecture_is_drawn_and_has_torchvizs_node_set(name):
    model, loss = arch.ALL[name]()
    crosscheck(loss)  # the same backward nodes, edges, leaves and saved tensors as make_dot
    g = draw_graph(loss, params=model, fold=False)
    drawn = sum(1 for line in g.text.splitlines() if re.match(r"  n\d+ (?!->)", line))
    theirs = torchviz.make_dot(loss, params=dict(model.named_parameters()))
    assert drawn == sum(1 for line in theirs.body if "fillcolor" not in line and "->" not in line
                        and line.strip().split(" ")[0].isdigit())
    assert "image/svg+xml" in draw_graph(loss, params=model)._repr_mimebundle_()


def test_torchvizs_argument_names_are_accepted():
    model, loss = arch.custom_function_loss()
    g = draw_graph(loss, params=model.named_parameters(), show_attrs=True)  # a generator of pairs
    assert "AccumulateGrad -> leaf fc.weight" in g.text and "SumBackward0  self_sym_sizes: (2, 4)" in g.text
    g = draw_graph(loss, params=model, show_attrs=True, max_attr_chars=5)
    assert "SumBackward0  self_sym_sizes: (2..." in g.text
    assert "self_sym_sizes" not in draw_graph(loss, params=model).text  # off by default, as in torchviz


def test_params_from_model_parameters_gets_advice_that_fits_a_model():
    model, loss = arch.custom_function_loss()
    with pytest.raises(TypeError, match=r"model.named_parameters\(\)"):
        draw_graph(loss, params=model.parameters())


def test_a_saved_tensor_that_is_a_parameter_is_named():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2, bias=False)
    loss = (model(torch.randn(4, 3, requires_grad=True)) ** 2).sum()  # mm saves the weight for x's gradient
    g = draw_graph(loss, params=model, show_saved=True)
    assert "saved by n2: mat2 (view of weight) = " in g.text  # the Linear saved its weight, transposed
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    assert "self (w) = [1., 2.]" in draw_graph((w * w.exp()).sum(), params={"w": w}, show_saved=True).text
