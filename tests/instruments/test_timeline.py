"""The timeline of an accumulation loop: which micro-batches fed each optimizer step, as text and as a drawing."""

import pytest
from IPython.core.interactiveshell import InteractiveShell
from svg_tree import SVG, of_class, parsed

from autograd_lab.timeline import draw_timeline, timeline_text

# the seed's loop, (i - 1) % 10 == 0 over 25 micro-batches: steps after micro-batches 1, 11 and 21
SEEDS_GROUPS = [[0, 1], list(range(2, 12)), list(range(12, 22))]


def test_jupyter_shows_a_timeline_as_svg_titled_with_its_finding():
    drawing = draw_timeline([[0, 1], [2, 3]], 5)
    data, _ = InteractiveShell.instance().display_formatter.format(drawing)
    assert set(data) == {"image/svg+xml", "text/plain"}
    assert data["text/plain"] == "<Drawing 700x168: 2 optimizer steps; 1 micro-batch left in .grad>"
    root = parsed(drawing)
    assert (root.get("width"), root.get("height")) == ("700", "168")


def test_timeline_text_marks_updates_steps_and_leftovers():
    groups = SEEDS_GROUPS
    text = timeline_text(groups, 25)
    assert text == "AABBBBBBBBBBCCCCCCCCCC...\n" + " ^         ^         ^"
    assert timeline_text([], 3) == "...\n"


@pytest.mark.parametrize("groups, n, error", [
    ([[0, 1], [1, 2]], 3, ValueError),
    ([[0, 5]], 3, ValueError),
    ([[0]], 0, ValueError),
    ([3], 4, TypeError),
])
def test_timeline_rejects_bad_groups(groups, n, error):
    with pytest.raises(error):
        timeline_text(groups, n)


def test_draw_timeline_has_a_title_stating_the_finding():
    drawing = draw_timeline(SEEDS_GROUPS, 25)
    assert drawing.texts("title") == ["3 optimizer steps; 3 micro-batches left in .grad"]
    assert len(drawing.of("left")) == 3 and len(drawing.of("step")) == 3
    drawing = draw_timeline([[i] for i in range(40)], 40, title="k = 1")
    assert drawing.texts("title") == ["k = 1"] and not drawing.of("left")


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
