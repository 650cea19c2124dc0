"""The course's vector drawings, written as SVG (cheap to redraw, sharp on a projector): the drawing itself and the
line chart."""

import xml.etree.ElementTree as ET

import pytest
from IPython.core.interactiveshell import InteractiveShell
from svg_tree import SVG, parsed

from autograd_lab.drawing import Drawing, line_chart, nice_step


def test_jupyter_shows_a_drawing_as_svg_and_prints_a_short_description():
    drawing = Drawing(700, 168, title="2 optimizer steps")
    drawing.rect(1, 1, 5, 5, fill="red", role="box")
    data, _ = InteractiveShell.instance().display_formatter.format(drawing)
    assert set(data) == {"image/svg+xml", "text/plain"}
    assert data["text/plain"] == "<Drawing 700x168: 2 optimizer steps>"
    root = parsed(drawing)
    assert (root.get("width"), root.get("height")) == ("700", "168")
    assert repr(Drawing(10, 20)) == "<Drawing 10x20>"


@pytest.mark.parametrize("span, step", [(1.0, 0.2), (0.1, 0.02), (8.6, 2), (22, 5), (1e-3, 2e-4), (0, 1.0)])
def test_nice_steps_are_round_numbers(span, step):
    assert nice_step(span) == pytest.approx(step)


def test_line_chart_plots_every_point_and_names_every_series():
    drawing = line_chart({"per update": [0.05, 0.1, 0.05, 0.0], "per micro-batch": [0.1, 0.0, 0.0, 0.0]},
                             title="t", xlabel="update", ylabel="learning rate")
    assert len(drawing.of("point")) == 8 and len(drawing.of("series")) == 2
    assert [t for t in drawing.texts("legend")] == ["per update", "per micro-batch"]
    assert drawing.texts("tick-label")[:3] == ["0.00", "0.05", "0.10"]      # y from 0 to the largest value
    ys = [float(c.attrs["cy"]) for c in drawing.of("point")[:4]]
    assert ys[1] < ys[0] < ys[3] and ys[0] == ys[2]                       # higher rate, higher on the page
    parsed(drawing)


@pytest.mark.parametrize("series", [{}, [1, 2], {"a": [1, float("nan")]}, {"a": "12"}])
def test_line_chart_refuses_what_it_cannot_draw(series):
    with pytest.raises((TypeError, ValueError), match="line_chart|series"):
        line_chart(series)


def test_a_drawing_saves_to_a_file(tmp_path):
    drawing = Drawing(10, 10, title="x")
    drawing.rect(1, 1, 5, 5, fill="red", role="r")
    drawing.save(tmp_path / "x.svg")
    assert ET.parse(tmp_path / "x.svg").getroot().find(f"{SVG}rect[@class='r']") is not None
