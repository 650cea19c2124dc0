"""The course's graph model against torchviz.make_dot: the same backward nodes, edges, leaves and saved tensors.

torchviz names every drawn object ``str(id(obj))``. The course's model keeps each
backward node alive while the test runs, so ``id(node.fn)`` is the name torchviz
gave the same node. Saved tensors are compared by node, name and shape (an
unpacked saved tensor can be a new Python object at every access).
"""

import re
from collections import Counter

import pytest
import torch
import torchviz  # a dependency of the course: its absence is a failure, not a skip
from torch import nn

import autograd_lab.graphmodel as gm
from autograd_lab.graphmodel import walk

NODE = re.compile(r"^\t(\d+) \[label=(.*?)(?: fillcolor=(\w+))?\]$", re.S)
EDGE = re.compile(r"^\t(\d+) -> (\d+)(?: \[(.*)\])?$")


def _label_name(label: str) -> str:
    """The first line of a torchviz label (``"other\\n (2)"`` -> ``other``)."""
    return label.strip('"').split("\n")[0]


def parse(dot):
    """What make_dot drew: {id: (label, colours)}, the edges in order, and (fn id, saved name, shape) triples.

    A leaf that a node also saved is drawn twice under one id (orange, then blue): every colour is kept.
    """
    nodes, edges, saved, body = {}, [], [], [line.rstrip("\n") for line in dot.body]
    for k, line in enumerate(body):
        if m := NODE.match(line):
            label, colours = nodes.get(m[1], (m[2], set()))
            nodes[m[1]] = (label, colours | {m[3]})
        elif m := EDGE.match(line):
            edges.append((m[1], m[2], m[3] or ""))
            follow = NODE.match(body[k + 1]) if k + 1 < len(body) else None
            if "dir=none" in (m[3] or "") and follow and follow[3] == "orange" and follow[1] == m[2]:
                label = follow[2].strip('"')
                saved.append((m[1], label.split("\n")[0], label.split("\n")[1].strip()))
            elif "dir=none" in (m[3] or "") and follow and follow[3] == "orange" and follow[1] == m[1]:
                # a custom Function's ctx.saved_tensors: drawn tensor -> node, without a name
                saved.append((m[2], "saved_tensors", follow[2].strip('"').split("\n")[1].strip()))
    return nodes, edges, saved


def shape_text(t) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def crosscheck(loss):
    model = walk(loss, saved=True)  # holds every node: their ids stay the ones torchviz sees
    nodes, edges, saved = parse(torchviz.make_dot(loss, show_saved=True))
    ours = {str(id(n.fn)): n for n in model.nodes}
    backward = {i for i, (_, colours) in nodes.items() if colours == {None}}
    assert backward == set(ours), "the same backward nodes"
    assert all(_label_name(nodes[i][0]) == n.name for i, n in ours.items()), "the same node names"
    theirs = Counter((a, b) for a, b, _ in edges if a in backward and b in backward)
    mine = Counter((str(id(model.nodes[c].fn)), str(id(model.nodes[p].fn))) for c, p in model.edges())
    assert theirs == mine, "the same edges between backward nodes"
    leaves = {(a, b) for a, b, _ in edges if "lightblue" in nodes.get(a, ("", set()))[1]}
    assert leaves == {(str(id(n.leaf)), str(id(n.fn))) for n in model.nodes if n.is_leaf}, "the same leaves"
    unnamed = re.compile(r"^saved_tensors\[\d+\]$")  # torchviz draws a custom Function's saved tensors unnamed
    mine_saved = Counter((str(id(n.fn)), "saved_tensors" if unnamed.match(name) else name, shape_text(t))
                         for n in model.nodes for name, t in n.saved)
    # what a non-reentrant checkpoint recomputes the course leaves unread; torchviz reads it (and recomputes)
    recomputed = {(str(id(n.fn)), name) for n in model.nodes for name in n.recomputed}
    assert {(f, name) for f, name, _ in saved if (f, name) in recomputed} == recomputed, "recomputed ones exist"
    kept = Counter(item for item in saved if item[:2] not in recomputed)
    assert kept == mine_saved, "the same saved tensors"
    return model


def seed_example():
    w = torch.tensor(1.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    y = 2 * x
    return ((y - w * x) ** 2).mean()


def mlp_loss():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    return nn.functional.mse_loss(mlp(torch.randn(5, 3)).squeeze(1), torch.randn(5))


def reuse_and_branches():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    c = a * b
    return c * c + a * a + c.exp()  # c used three times, a twice in one node


def multi_output():
    w = torch.arange(6.0, requires_grad=True)
    first, second, third = w.split(2)
    rows = w.view(2, 3).unbind(0)
    return (first * second).sum() + third.sin().sum() + (rows[0] * rows[1]).sum()


def saved_tensors():
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    return (w.exp() * w.sigmoid()).pow(3).log1p().sum() / w.norm()


def non_differentiable_branch():
    w = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    picked = w[w.argmax()]  # argmax records nothing; the indexing saves the index
    return picked * (w > 1.5).float().sum() + torch.where(w > 2, w, w * 2).sum()


def with_detach():
    w = torch.tensor(2.0, requires_grad=True)
    frozen = (w * 3).detach()  # cut: the product's graph is not part of the loss
    return (w * frozen) ** 2


CORPUS = [
    seed_example, mlp_loss, reuse_and_branches, multi_output, saved_tensors, non_differentiable_branch, with_detach,
]


@pytest.mark.parametrize("build", CORPUS, ids=[f.__name__ for f in CORPUS])
def test_course_model_agrees_with_torchviz(build):
    model = crosscheck(build())
    assert model.nodes  # every case has a graph


def test_detach_cuts_the_graph_in_both():
    model = crosscheck(with_detach())
    assert [n.name for n in model.nodes].count("MulBackward0") == 1


def test_crosscheck_notices_a_missing_edge(monkeypatch):
    # the check can fail: a model that drops one input disagrees with torchviz
    real = gm.Node.of

    def drop_last_input(fn, names, inputs=(), saved=False):
        return real(fn, names, inputs[:-1] if len(inputs) > 1 else inputs, saved)

    monkeypatch.setattr(gm.Node, "of", staticmethod(drop_last_input))
    with pytest.raises(AssertionError, match="the same edges"):
        crosscheck(reuse_and_branches())

