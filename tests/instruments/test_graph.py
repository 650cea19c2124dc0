"""The graph instrument: deterministic SVG, teaching labels, text chain, clear errors, missing Graphviz."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from autograd_lab import chain, draw_graph, graph_nodes
from autograd_lab.graph import GraphvizMissing, install_hint

SEED_GRAPH = """
import torch
from autograd_lab import draw_graph
w = torch.tensor(1.0, requires_grad=True)
x = torch.tensor([4.0, 2.0])
loss = ((w * x - 2 * x) ** 2).mean()
{extra}
g = draw_graph(loss, params={{"w": w}}, names={{"loss": loss}}, show_saved=True)
"""


def seed_example():
    w = torch.tensor(1.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    y = 2 * x
    loss = ((w * x - y) ** 2).mean()
    return w, loss


def run_python(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_svg_is_byte_identical_across_processes():
    def script(n):
        # different allocations before the graph give its nodes different id()s in each process
        extra = f"junk = [torch.zeros(i) for i in range({n})]"
        return SEED_GRAPH.format(extra=extra) + "\nimport sys; sys.stdout.write(g.svg())"

    first = run_python(script(3))
    second = run_python(script(50))
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert first.stdout.startswith("<?xml") and "<svg" in first.stdout
    assert first.stdout == second.stdout


def test_svg_carries_no_graphviz_version_comment():
    _, loss = seed_example()
    svg = draw_graph(loss).svg()
    assert "<!--" not in svg and "graphviz version" not in svg.lower()


def test_node_names_follow_order_of_appearance_not_memory_addresses():
    w, loss = seed_example()
    g = draw_graph(loss, params={"w": w})
    names = [line.split()[0] for line in g.body if "->" not in line and line.strip().startswith(("n", "out"))]
    assert names == ["n0", "n1", "n2", "n3", "n4", "out0"]


def test_chain_of_the_seed_example():
    w, loss = seed_example()
    assert chain(loss, params={"w": w}) == (
        "MeanBackward0 -> PowBackward0 -> SubBackward0 -> MulBackward0 -> AccumulateGrad(w)"
    )
    # the None branch is y = 2x, which needs no gradient
    assert chain(loss, show_none=True).splitlines()[0] == "MeanBackward0 -> PowBackward0 -> SubBackward0"
    assert "-> None" in chain(loss, show_none=True)


def test_chain_indents_branches_and_names_shared_nodes():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    text = chain(a * b + a, params={"a": a, "b": b})
    assert text.splitlines() == [
        "AddBackward0",
        "    -> MulBackward0",
        "        -> AccumulateGrad(a)",
        "        -> AccumulateGrad(b)",
        "    -> (AccumulateGrad(a), shared: see above)",
    ]


def test_leaf_labels_show_names_values_and_grads_after_backward():
    w, loss = seed_example()
    before = draw_graph(loss, params={"w": w}).text
    assert "leaf w | value 1. | grad None" in before
    loss.backward()
    after = draw_graph(loss, params={"w": w}, names={"loss": loss}).text
    assert "leaf w | value 1. | grad -20." in after
    assert "out0 loss | 10." in after


def test_saved_tensors_are_drawn_on_request():
    w, loss = seed_example()
    assert "saved by" not in draw_graph(loss).text
    text = draw_graph(loss, show_saved=True).text
    assert "saved by n3: other = [4., 2.]" in text  # MulBackward0 kept x to compute d(wx)/dw
    assert "orange" in draw_graph(loss, show_saved=True).source


def test_module_parameters_are_named():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    out = model(torch.ones(2, 3)).sum()
    text = draw_graph(out, params=model).text
    assert "leaf weight" in text and "leaf bias" in text


def test_highlight_edges_and_done_are_drawn():
    w, loss = seed_example()
    nodes = graph_nodes(loss)
    g = draw_graph(loss, highlight=[nodes[1]], done=[nodes[0]], edge_labels={(nodes[0], nodes[1]): "0.5"})
    assert "n1 PowBackward0  [running]" in g.text
    assert "n0 MeanBackward0  [done]" in g.text
    assert "n1 -> n0  0.5" in g.text


@pytest.mark.parametrize("bad", [3.0, [1, 2], "loss", None, {"loss": 1}])
def test_non_tensor_input_gets_a_type_error_that_says_what_to_pass(bad):
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        draw_graph(bad)
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        chain(bad)


def test_tensor_without_graph_draws_one_node_and_says_why():
    leaf = torch.tensor(2.0, requires_grad=True)
    plain = torch.tensor([1.0, 2.0])
    assert draw_graph(leaf).text.splitlines()[1:] == ["  out0 output | 2. | a leaf: nothing recorded before it"]
    assert "requires_grad=False: no graph was recorded" in draw_graph(plain).text
    assert chain(plain) == "(no graph: requires_grad=False)"
    assert chain(leaf) == "(no graph: a leaf tensor)"


def test_bad_params_get_a_clear_message():
    _, loss = seed_example()
    with pytest.raises(TypeError, match="params must be"):
        draw_graph(loss, params=42)
    with pytest.raises(TypeError, match="must be a tensor"):
        draw_graph(loss, params={"w": 1.0})


def test_missing_dot_shows_install_hint_and_text_chain_without_traceback(tmp_path):
    # PATH holds only an empty folder: no `dot` anywhere. Display goes through IPython's real formatter.
    env = dict(os.environ, PATH=str(tmp_path))
    code = SEED_GRAPH.format(extra="") + textwrap.dedent(
        """
        import shutil
        assert shutil.which("dot") is None
        from IPython.core.interactiveshell import InteractiveShell
        data, _ = InteractiveShell.instance().display_formatter.format(g)
        assert "image/svg+xml" not in data, sorted(data)
        print(data["text/plain"])
        from autograd_lab.graph import GraphvizMissing
        try:
            g.svg()
        except GraphvizMissing as err:
            print("SVG:", str(err).splitlines()[0])
        """
    )
    done = run_python(code, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "`dot` program was not found" in done.stdout
    assert "sudo apt-get install graphviz" in done.stdout and "brew install graphviz" in done.stdout
    assert "conda install -c conda-forge graphviz" in done.stdout
    assert "n0 MeanBackward0" in done.stdout and "AccumulateGrad -> leaf w" in done.stdout
    assert "SVG: Graphviz's `dot` program was not found" in done.stdout


def test_install_hint_puts_this_platform_first(monkeypatch):
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert install_hint().splitlines()[2].strip().startswith("macOS")
    monkeypatch.setenv("CONDA_PREFIX", "env")
    assert install_hint().splitlines()[2].strip().startswith("conda")


def test_graphviz_missing_is_a_runtime_error():
    assert issubclass(GraphvizMissing, RuntimeError)


class _FreshNode:
    """A backward node whose inputs are new Python objects at every access, as on some torch builds."""

    def __init__(self, depth):
        self.depth = depth

    @property
    def next_functions(self):
        return ((_FreshNode(self.depth + 1), 0),) if self.depth < 5 else ()


class _FreshTensor(torch.Tensor):
    @property
    def grad_fn(self):
        return _FreshNode(0)


def test_chain_does_not_mistake_a_reused_id_for_a_shared_node():
    # Node wrappers that are freed while walking can hand their id() to the next one.
    text = chain(torch.ones(1).as_subclass(_FreshTensor))
    assert "shared" not in text
    assert text == " -> ".join(["_FreshNode"] * 6)
