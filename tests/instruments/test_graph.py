"""The graph instrument: deterministic SVG, teaching labels, text chain, clear errors, missing Graphviz, and its
options checked at the boundary."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from autograd_lab import chain, draw_graph, graph_nodes
from autograd_lab.engine import GraphvizMissing, install_hint

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
        return SEED_GRAPH.format(extra=f"junk = [torch.zeros(i) for i in range({n})]")

    other = run_python(script(50) + "\nimport sys; sys.stdout.write(g.svg())")
    assert other.returncode == 0, other.stderr
    here = {}
    exec(script(3), here)  # this test process: thousands of other allocations before it, other id()s again
    svg = here["g"].svg()
    assert svg.startswith("<?xml") and "<svg" in svg
    assert other.stdout == svg


def test_svg_carries_no_graphviz_version_comment():
    _, loss = seed_example()
    svg = draw_graph(loss).svg()
    assert "<!--" not in svg and "graphviz version" not in svg.lower() and "graphviz-pure" not in svg


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


DISPLAY = """
from IPython.core.interactiveshell import InteractiveShell
data, _ = InteractiveShell.instance().display_formatter.format(g)
print(sorted(data))
print(data["text/plain"])
"""


# A kernel on a machine without any system Graphviz: PATH holds only an empty folder, so no `dot` anywhere, as where
# nobody installed Graphviz. One fresh Python for the three tests below (each reads its own lines); its shell exists
# before the notebook's first import, as in a kernel, and display goes through IPython's real formatter.
WITHOUT_DOT = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import shutil
import graphviz, torch, torchviz
import autograd_lab
from autograd_lab import draw_graph, graph
print("dot:", shutil.which("dot"))

# the course's graph
w = torch.tensor(1.0, requires_grad=True)
x = torch.tensor([4.0, 2.0])
loss = ((w * x - 2 * x) ** 2).mean()
g = draw_graph(loss, params={"w": w}, names={"loss": loss}, show_saved=True)
data, _ = shell.display_formatter.format(g)
print("course:", sorted(data))
print("course text:", data["text/plain"])

# torchviz's graphs, and any other Digraph, Graph or Source: laid out by the course's engine
v = torch.tensor([1.0, 2.0], requires_grad=True)
for other in (torchviz.make_dot((v * 3).sum(), params={"v": v}), graphviz.Graph(body=["a -- b"]),
              graphviz.Source("digraph { x -> y }", engine="neato")):
    data, _ = shell.display_formatter.format(other)
    print("graphviz:", type(other).__name__, sorted(data), data.get("image/svg+xml", "")[:4])

# which printer IPython finds: the course's graph (a Digraph) under its own name first, shown by its own method
ours, theirs = draw_graph((v * 3).sum()), torchviz.make_dot((v * 3).sum())
formatter = shell.display_formatter.mimebundle_formatter
print("printers:", formatter.lookup(ours).__name__, formatter.lookup(theirs).__name__)
graph.graphviz_bundle = None  # never called for the course's graph (last: graphviz's graphs need it)
data, _ = shell.display_formatter.format(ours)
print("own method:", data == ours._repr_mimebundle_(), sorted(data))
"""


@pytest.fixture(scope="module")
def without_dot(tmp_path_factory) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRAD_LAB_DOT"}
    env["PATH"] = str(tmp_path_factory.mktemp("empty-path"))
    done = run_python(WITHOUT_DOT, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "dot: None" in lines, lines
    return lines


def test_without_any_system_graphviz_the_graph_is_a_picture(without_dot):
    assert "course: ['image/svg+xml', 'text/plain', 'text/vnd.graphviz']" in without_dot
    text = "\n".join(without_dot)
    assert "n0 MeanBackward0" in text[text.index("course text:"):], without_dot


def test_torchviz_graphs_are_pictures_without_a_system_graphviz_once_the_course_is_imported(without_dot):
    # The graphviz package runs a program called `dot`; in a notebook that imported autograd_lab its graphs
    # (torchviz.make_dot's, and any other Digraph, Graph or Source) are laid out by the course's engine.
    for kind in ("Digraph", "Graph", "Source"):
        assert f"graphviz: {kind} ['image/svg+xml', 'text/plain', 'text/vnd.graphviz'] <?xm" in without_dot, without_dot


def test_in_a_notebook_the_course_graph_shows_itself_and_torchviz_graphs_get_the_course_engine(without_dot):
    # IPython looks a printer up along the class's MRO before it asks for _repr_mimebundle_: the course's graph
    # (a Digraph) is found under its own name first, and shown by its own method, never by graphviz's printer.
    assert "printers: _show_itself _show_graphviz" in without_dot
    assert "own method: True ['image/svg+xml', 'text/plain', 'text/vnd.graphviz']" in without_dot


def test_missing_engine_shows_install_hint_and_text_chain_without_traceback(tmp_path):
    # The setting selects a system `dot`, and there is none: no picture, the graph as text and what to install.
    env = dict(os.environ, PATH=str(tmp_path), AUTOGRAD_LAB_DOT="dot")
    code = SEED_GRAPH.format(extra="") + DISPLAY + textwrap.dedent(
        """
        from autograd_lab.engine import GraphvizMissing
        try:
            g.svg()
        except GraphvizMissing as err:
            print("SVG:", str(err).splitlines()[0])
        """
    )
    done = run_python(code, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "['text/plain']" in done.stdout
    assert "AUTOGRAD_LAB_DOT=dot selects a program that was not found" in done.stdout
    assert "sudo apt-get install graphviz" in done.stdout and "brew install graphviz" in done.stdout
    assert "conda install -c conda-forge graphviz" in done.stdout and "pip install graphviz-pure" in done.stdout
    assert "n0 MeanBackward0" in done.stdout and "AccumulateGrad -> leaf w" in done.stdout
    assert "SVG: No layout engine was found, so this graph cannot be drawn" in done.stdout


@pytest.fixture
def layouts(monkeypatch):
    """Counts the layouts the course's graphs ask the engine for."""
    from autograd_lab import graph

    calls = []

    def counted(source, *args, **kwargs):
        calls.append(source)
        return svg_of(source, *args, **kwargs)

    svg_of = graph.svg_of
    monkeypatch.setattr(graph, "svg_of", counted)
    return calls


def test_a_graph_shown_again_is_not_laid_out_again_until_it_changes(layouts):
    _, loss = seed_example()
    g = draw_graph(loss)
    first = g._repr_mimebundle_()
    assert g._repr_mimebundle_() == first and g.svg() == first["image/svg+xml"] and len(layouts) == 1
    for change in (lambda: g.node("extra", "a box added"), lambda: g.edge("extra", "n0"),
                   lambda: g.attr(label="a title")):
        change()  # graphviz's own API: another source, laid out afresh
        assert g._repr_mimebundle_()["image/svg+xml"] != first["image/svg+xml"]
        first = g._repr_mimebundle_()
    assert len(layouts) == 4 and "a box added" in first["image/svg+xml"] and "a title" in first["image/svg+xml"]
    g.timeout = 30.0  # another time limit: laid out again under it
    g.svg()
    assert len(layouts) == 5


def test_a_layout_that_ran_out_of_time_is_not_tried_again_for_the_same_graph(layouts):
    z = torch.tensor(0.5, requires_grad=True)
    for _ in range(100):
        z = z.sin().cos()
    g = draw_graph(z, timeout=0.001)
    first = g._repr_mimebundle_()
    assert set(first) == {"text/plain"} and "did not lay this graph out within 0.001 s" in first["text/plain"]
    assert g._repr_mimebundle_() == first and len(layouts) == 1


def test_torchviz_monospace_labels_are_measured_as_courier():
    # graphviz-pure has no metrics for a generic family: measured as Times, torchviz's labels would overflow
    import torchviz

    from tools.drawings import stable_ids

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    graph = stable_ids(torchviz.make_dot((x * 2).sum(), params={"x": x}, show_attrs=True))
    assert "fontname=monospace" in graph.source
    assert 'font-family="Courier,monospace"' in graph.svg() and 'font-family="monospace"' not in graph.svg()


def test_install_hint_puts_this_platform_first(monkeypatch):
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    systems = install_hint().split("install Graphviz's `dot`, then restart the kernel:\n", 1)[1].splitlines()
    assert systems[0].strip().startswith("macOS")
    monkeypatch.setenv("CONDA_PREFIX", "env")
    systems = install_hint().split("install Graphviz's `dot`, then restart the kernel:\n", 1)[1].splitlines()
    assert systems[0].strip().startswith("conda")


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
