"""The course's vector drawings: timelines and a line chart, written as SVG (fast to redraw, sharp on a projector)."""

import xml.etree.ElementTree as ET

import pytest
from IPython.core.interactiveshell import InteractiveShell

import autograd_lab as lab
from autograd_lab.accumulation import draw_timeline
from autograd_lab.distributed import draw_update_timeline
from autograd_lab.svg import Drawing, nice_step

SVG = "{http://www.w3.org/2000/svg}"


def parsed(drawing):
    root = ET.fromstring(drawing._repr_svg_())
    assert root.tag == f"{SVG}svg"
    return root


def of_class(root, cls):
    return [e for e in root.iter() if e.get("class") == cls]


def test_jupyter_shows_a_drawing_as_svg_and_prints_a_short_description():
    drawing = draw_timeline([[0, 1], [2, 3]], 5)
    data, _ = InteractiveShell.instance().display_formatter.format(drawing)
    assert set(data) == {"image/svg+xml", "text/plain"}
    assert data["text/plain"] == "<Drawing 700x168: 2 optimizer steps; 1 micro-batch left in .grad>"
    root = parsed(drawing)
    assert (root.get("width"), root.get("height")) == ("700", "168")


def test_the_timeline_draws_a_box_per_micro_batch_a_triangle_per_step_and_hatches_what_was_left():
    root = parsed(draw_timeline([[0, 1, 2], [3, 4, 5]], 8))
    boxes, left, steps = of_class(root, "box"), of_class(root, "left"), of_class(root, "step")
    assert len(boxes) == 6 and len(left) == 2 and len(steps) == 2
    assert len({b.get("fill") for b in boxes}) == 2                  # one colour per update
    assert all(b.get("fill") == "url(#hatch)" for b in left)
    assert [t.text for t in of_class(root, "update")] == ["1", "2"]
    xs = [float(b.get("x")) for b in boxes + left]
    assert xs == sorted(xs) and len(set(xs)) == 8                    # side by side, in index order
    step_tips = [float(p.get("points").split()[2].split(",")[0]) for p in steps]
    box_centres = [float(boxes[i].get("x")) + float(boxes[i].get("width")) / 2 for i in (2, 5)]
    assert step_tips == pytest.approx(box_centres, abs=0.01)         # each triangle over its group's last box


def test_a_timeline_with_nothing_left_has_no_hatching_and_no_legend_entry_for_it():
    drawing = draw_timeline([[0, 1], [2, 3]], 4, title="k = 2 <all fine> & done")
    root = parsed(drawing)                                           # the title is escaped: still valid XML
    assert not of_class(root, "left") and "left in .grad" not in drawing.texts("legend")
    assert drawing.texts("title") == ["k = 2 <all fine> & done"]
    assert root.find(f"{SVG}defs") is None


def test_many_updates_keep_their_colours_but_lose_their_numbers():
    drawing = draw_timeline([[i] for i in range(30)], 30)
    assert not drawing.of("update") and len(drawing.of("step")) == 30
    assert drawing.texts("tick-label") == [str(i) for i in range(0, 30, 5)]


def test_the_update_timeline_puts_all_reduce_on_its_own_lane():
    events = [[("forward", 0, 1), ("backward", 1, 3), ("all-reduce", 2, 4), ("step", 4, 5)],
              [("forward", 0, 1.5), ("backward", 1.5, 3), ("all-reduce", 2.5, 4)]]
    drawing = draw_update_timeline(events, title="t")
    assert drawing.texts("lane-label") == ["rank 0 compute", "rank 0 all-reduce", "rank 1 compute",
                                           "rank 1 all-reduce"]
    lane_y = {float(t.attrs["y"]): t.text for t in drawing.of("lane-label")}
    for rect in drawing.of("all-reduce"):
        lane = min(lane_y, key=lambda y: abs(y - float(rect.attrs["y"]) - 10))
        assert lane_y[lane].endswith("all-reduce")
    assert len(drawing.of("backward")) == 2 and len(drawing.of("step")) == 1
    ticks = [float(t) for t in drawing.texts("tick-label")]
    assert ticks == [0, 2, 4]                                          # round steps up to the last end
    parsed(drawing)


def test_an_empty_update_timeline_still_draws():
    drawing = draw_update_timeline([[], []])
    assert drawing.texts("lane-label")[0] == "rank 0 compute" and drawing.texts("tick-label")[0] == "0"
    parsed(drawing)


@pytest.mark.parametrize("span, step", [(1.0, 0.2), (0.1, 0.02), (8.6, 2), (22, 5), (1e-3, 2e-4), (0, 1.0)])
def test_nice_steps_are_round_numbers(span, step):
    assert nice_step(span) == pytest.approx(step)


def test_line_chart_plots_every_point_and_names_every_series():
    drawing = lab.line_chart({"per update": [0.05, 0.1, 0.05, 0.0], "per micro-batch": [0.1, 0.0, 0.0, 0.0]},
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
        lab.line_chart(series)


def test_a_drawing_saves_to_a_file(tmp_path):
    drawing = Drawing(10, 10, title="x")
    drawing.rect(1, 1, 5, 5, fill="red", role="r")
    drawing.save(tmp_path / "x.svg")
    assert ET.parse(tmp_path / "x.svg").getroot().find(f"{SVG}rect[@class='r']") is not None
