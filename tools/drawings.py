"""The course's drawings as DOT, and what each engine makes of them: the corpus of the both-engines test
(tests/instruments/test_engines.py) and of `make bench`'s drawing part.

Two sources:
  notebooks      every graph the committed notebooks show: its DOT, stored beside its SVG as
                 ``text/vnd.graphviz`` (autograd_lab.graph.DOT_MIME), so no notebook is executed here
  architectures  drawings of models nobody wrote for the course, built from torch alone with random weights:
                 the instrument tests' small losses, torch's TransformerEncoder, LSTM, GRU, MultiheadAttention,
                 a conv + BatchNorm stack, a 12-block GPT-style decoder and a looped loss over 60 samples (both
                 beyond the course's folding limits: drawn whole here, as a learner's own model may be)

``structure(svg)`` is what two engines must agree on: each node's and each edge's name, texts and fill colour,
and the graph's own label. Coordinates, sizes and fonts are each engine's own.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LOCK = ROOT / "constraints.txt"
SVG_NS = "{http://www.w3.org/2000/svg}"


def locked_pure() -> str | None:
    """The version of graphviz-pure the lock pins: the one the committed notebooks' SVG was made with."""
    found = re.search(r"^graphviz-pure==(\S+)", LOCK.read_text(encoding="utf-8"), re.M) if LOCK.exists() else None
    return found[1] if found else None


def svg_not_compared() -> str | None:
    """Why the stored SVG cannot be compared in this process (another engine draws than graphviz-pure at the
    lock's version), or None when it can. nbval's settings (conftest.py) and the engines' test ask this."""
    from autograd_lab.engine import PURE, find_engine

    engine, problem = find_engine()
    if engine is None:
        return problem
    if not engine.pure:
        return f"the graphs are laid out by {engine.name} ({engine.note or 'AUTOGRAD_LAB_DOT'}), not {PURE}"
    try:
        here = version(PURE)
    except PackageNotFoundError:
        here = "(not installed by pip)"
    if here != locked_pure():
        return f"{PURE} {here} lays the graphs out, the lock pins {locked_pure()}"
    return None


def notebook_drawings(paths=NOTEBOOKS) -> dict[str, dict]:
    """{"NN_name.ipynb::cell-id[#k]": {"dot": DOT, "svg": stored SVG}} for every graph the notebooks store."""
    from autograd_lab.graph import DOT_MIME

    found = {}
    for path in paths:
        for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
            graphs = [o["data"] for o in cell.get("outputs", []) if DOT_MIME in o.get("data", {})]
            for k, data in enumerate(graphs):
                key = f"{Path(path).name}::{cell.get('id')}" + (f"#{k}" if k else "")
                found[key] = {"dot": _text(data[DOT_MIME]), "svg": _text(data.get("image/svg+xml", ""))}
    return found


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


# ------------------------------------------------------------------------------------------ architectures


def _seed_example():
    import torch

    w = torch.tensor(1.0, requires_grad=True)
    x = torch.tensor([4.0, 2.0])
    return ((w * x - 2 * x) ** 2).mean(), {"w": w}


def _mlp():
    import torch
    from torch import nn

    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    return nn.functional.mse_loss(mlp(torch.randn(5, 3)).squeeze(1), torch.randn(5)), mlp


def _reuse_and_branches():
    import torch

    a, b = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    c = a * b
    return c * c + a * a + c.exp(), {"a": a, "b": b}


def _transformer_encoder():
    import torch
    from torch import nn

    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return model(torch.randn(2, 5, 16)).pow(2).mean(), model


def _recurrent(kind):
    def build():
        import torch
        from torch import nn

        model = getattr(nn, kind)(input_size=4, hidden_size=8, num_layers=2, batch_first=True)
        return model(torch.randn(3, 6, 4))[0].sum(), model

    return build


def _attention():
    import torch
    from torch import nn

    model = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True)
    x = torch.randn(2, 4, 8)
    return model(x, x, x)[0].sum(), model


def _conv_batchnorm():
    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3),
                          nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    return nn.functional.cross_entropy(model(torch.randn(4, 3, 12, 12)), torch.arange(4)), model


def _gpt_block(width):
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            x = x + self.proj(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
            return x + self.mlp(self.ln2(x))

    return Block()


def _gpt(layers=12, width=16, vocab=32):
    import torch
    from torch import nn

    model = nn.ModuleDict({"wte": nn.Embedding(vocab, width), "wpe": nn.Embedding(8, width),
                           "h": nn.Sequential(*(_gpt_block(width) for _ in range(layers))),
                           "ln_f": nn.LayerNorm(width)})
    tokens = torch.randint(0, vocab, (2, 8))
    x = model["ln_f"](model["h"](model["wte"](tokens) + model["wpe"](torch.arange(8))))
    logits = x @ model["wte"].weight.T
    return nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()), model


def _looped_loss(n=60):
    import torch

    w = torch.tensor(1.0, requires_grad=True)
    x = torch.linspace(-1, 1, n)
    return torch.stack([(2 * x[k] - w * x[k]) ** 2 for k in range(n)]).mean(), {"w": w}


# name -> (build: () -> (loss, params), drawn whole: True for the graphs beyond the course's folding limits)
_DOT_STATEMENT = re.compile(r"^(\s*)(\d+)(?: -> (\d+))?")  # "\tID [..." or "\tID -> ID [..." at the start of a line


def stable_ids(dot):
    """The same drawing as ``dot`` (e.g. ``torchviz.make_dot(...)``), its boxes named n0, n1, ... in order of
    appearance instead of by ``id()``: the same bytes on every run, so that the bench lays out the same source.

    Shown as SVG (``dot`` under the course's time limit); as text, the number of boxes and arrows.
    """
    import graphviz

    from autograd_lab.graph import AutogradGraph

    if not isinstance(dot, graphviz.Digraph):
        raise TypeError(f"stable_ids expects a graphviz.Digraph such as torchviz.make_dot(...) returns, "
                        f"got {type(dot).__name__}.")
    names: dict[str, str] = {}

    def rename(match):
        ids = [g for g in match.groups()[1:] if g is not None]
        for node in ids:
            names.setdefault(node, f"n{len(names)}")
        return match.group(1) + " -> ".join(names[node] for node in ids)

    body = [_DOT_STATEMENT.sub(rename, line, count=1) for line in dot.body]
    graph = AutogradGraph(body=body, graph_attr=dict(dot.graph_attr), node_attr=dict(dot.node_attr),
                          edge_attr=dict(dot.edge_attr))
    arrows = sum(1 for line in body if " -> " in line.split("[", 1)[0])
    graph.text = f"a graph of {len(names)} boxes and {arrows} arrows (boxes named n0 to n{len(names) - 1})"
    return graph


ARCHITECTURES = {
    "seed example": (_seed_example, False),
    "MLP 3-4-1": (_mlp, False),
    "reuse and branches": (_reuse_and_branches, False),
    "TransformerEncoder, 2 layers": (_transformer_encoder, False),
    "LSTM, 2 layers": (_recurrent("LSTM"), False),
    "GRU, 2 layers": (_recurrent("GRU"), True),
    "MultiheadAttention": (_attention, False),
    "conv + BatchNorm": (_conv_batchnorm, False),
    "GPT-style decoder, 12 blocks": (_gpt, True),
    "looped loss, 60 samples": (_looped_loss, True),
}


def architecture_drawings(names=None) -> dict[str, str]:
    """{"name, draw_graph[, saved]": DOT} for each architecture (all, or ``names``): the course's drawing
    with and without saved tensors, and torchviz's ``make_dot`` of the same loss (``stable_ids``)."""
    import torch
    import torchviz

    from autograd_lab.graph import draw_graph, draw_model
    from autograd_lab.graphmodel import walk

    found = {}
    for name in names or ARCHITECTURES:
        build, whole = ARCHITECTURES[name]
        torch.manual_seed(0)
        loss, params = build()
        named = dict(params.named_parameters()) if isinstance(params, torch.nn.Module) else params
        for saved in (False, True):
            suffix = ", saved" if saved else ""
            if whole:  # as the learner's own big model would be drawn once the folding limits allow it
                found[f"{name}, whole{suffix}"] = draw_model(walk(loss, params, saved=saved), show_saved=saved).source
            else:
                found[f"{name}, draw_graph{suffix}"] = draw_graph(loss, params, show_saved=saved).source
        if not whole:
            found[f"{name}, torchviz"] = stable_ids(torchviz.make_dot(loss, params=named, show_saved=True)).source
    return found


TIMEOUT_S = 120.0  # a layout may take this long here (a busy machine, the whole drawing of a big model)


def render(sources: dict[str, str], engine=None) -> dict[str, str]:
    """{key: SVG} of {key: DOT}, each laid out as the course lays it out (by ``engine``: None, the course's)."""
    from autograd_lab.graph import svg_of

    return {key: svg_of(dot, engine=engine, timeout=TIMEOUT_S) for key, dot in sources.items()}


def main(argv=None) -> int:
    """Print, as JSON, the SVG of every architecture drawing, built and laid out in this process."""
    import sys

    json.dump(render(architecture_drawings()), sys.stdout)
    return 0


# ------------------------------------------------------------------------------------------ structure


def _texts(element) -> tuple:
    return tuple((t.text or "").strip() for t in element.iter(f"{SVG_NS}text"))


def _fill(element) -> str:
    for shape in element:
        if shape.tag in (f"{SVG_NS}polygon", f"{SVG_NS}ellipse", f"{SVG_NS}path") and shape.get("fill"):
            return shape.get("fill")
    return ""


def structure(svg: str) -> dict:
    """What an engine drew, without where: {"nodes": {name: (texts, fill)}, "edges": {...}, "label": texts}."""
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", svg))
    found = {"nodes": {}, "edges": {}, "label": ()}
    for group in root.iter(f"{SVG_NS}g"):
        kind = group.get("class")
        if kind == "graph":
            found["label"] = tuple((t.text or "").strip() for t in group.findall(f"{SVG_NS}text"))
        elif kind in ("node", "edge"):
            title = group.find(f"{SVG_NS}title").text
            found[f"{kind}s"].setdefault(title, []).append((_texts(group), _fill(group)))
    return found


if __name__ == "__main__":
    raise SystemExit(main())
