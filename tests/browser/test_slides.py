"""The classroom kit in a real browser: a notebook presented as live slides (jupyterlab-slideshow), maths.

The slides are JupyterLab's own notebook view in jupyterlab-slideshow's presentation mode, started from
the notebook toolbar's deck button, so the kernel, the widget manager and MathJax are the notebook's.
Each test presents a copy of a notebook annotated by tools/classroom (annotating the committed, annotated
notebook changes nothing, which tests/tools/test_classroom.py checks) and drives it with the keys a presenter
uses: space for "next", shift+space for "back", Escape to leave.

- The deck opens on the first slide (the first cell alone on screen); space walks through every cell that
  is not skipped (none hidden: jupyterlab-slideshow hides a cell whose slide type it does not know),
  shift+space goes back, Escape leaves the presentation.
- LaTeX is typeset by JupyterLab's MathJax (``mjx-container``, no ``$`` left), in the notebook and on a
  slide.
- A live() widget works on its slide: after Run All, space leads to the widget's slide, the widget is drawn
  (no "Error displaying widget", not shown as text) inside the viewport, and typing into its slider's
  readout changes its output to what its twin cell shows, while the deck is still presenting that slide.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest
from test_notebooks_in_lab import RUN_TIMEOUT, check_widget

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MATH = re.compile(r"\$[^$\n]+\$")
TIMEOUT_S = 90
DECK_SETTINGS = "jupyterlab-slideshow:plugin"
DECK_BUTTON = '.jp-NotebookPanel-toolbar [data-command="deck:toggle"]'

from tools.classroom.annotation import annotate  # noqa: E402 (the repository root is on sys.path: conftest.py)
from tools.classroom.cells import is_widget_cell, source_of  # noqa: E402


@pytest.fixture(autouse=True)
def leave_the_deck(lab):
    """After each test, leave the presentation and wait until JupyterLab has saved that: jupyterlab-slideshow
    keeps "presenting" in the user settings and starts presenting again on the next page load."""
    yield
    try:
        lab.js("() => window.jupyterapp.commands.execute('deck:stop')")
    except Exception:  # a crashed or closed page: the settings then say what was last saved
        pass
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if lab.server._api("GET", f"/lab/api/settings/{DECK_SETTINGS}").get("settings", {}).get("active") is not True:
            return
        time.sleep(0.2)
    raise AssertionError("jupyterlab-slideshow still has active=true in the user settings after deck:stop")


def annotated_copy(server, path: Path) -> tuple[str, nbformat.NotebookNode]:
    """The notebook annotated for the classroom, written beside the server's copy of notebooks/."""
    nb = nbformat.read(path, as_version=4)
    annotate(nb, path.name)
    dest = server.root / "notebooks" / f"_slides_{path.name}"  # same folder: its relative links still work
    nbformat.write(nb, dest)
    return dest.relative_to(server.root).as_posix(), nb


def shown_in_slides(nb) -> list[str]:
    """The ids of the cells a presenter pages through: all but the skipped ones."""
    return [c.id for c in nb.cells if c.metadata.get("slideshow", {}).get("slide_type") != "skip"]


# The deck's state: whether it presents, and the cells on the current slide (jupyterlab-slideshow marks
# them jp-deck-mod-onscreen; the others are hidden), each with whether it lies inside the viewport.
DECK = """() => {
  const cells = Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-deck-mod-onscreen'));
  const inView = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.bottom > 0 && r.right > 0 && r.top < innerHeight && r.left < innerWidth;
  };
  return {
    presenting: document.body.dataset.jpDeckMode === 'presenting',
    onScreen: cells.map(c => c.dataset.alCellId),
    inView: cells.filter(inView).map(c => c.dataset.alCellId),
    active: (document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active') || {dataset: {}}).dataset.alCellId || null,
  };
}"""


def deck(lab) -> dict:
    return lab.js(DECK)


def start_deck(lab, first: str):
    """Click the notebook toolbar's deck button, as an instructor does, and wait for the slide of `first`."""
    lab.page.locator(DECK_BUTTON).click()
    lab.wait(
        "(id) => document.body.dataset.jpDeckMode === 'presenting' && Array.from(document.querySelectorAll("
        "'.jp-Cell.jp-deck-mod-onscreen')).some(c => c.dataset.alCellId === id)",
        first,
        timeout_s=30,
        what=f"the presentation to start on the slide of cell {first!r}",
    )


def press(lab, key: str) -> dict:
    """One key as a presenter presses it; the deck's state once the active cell has moved."""
    before = deck(lab)
    lab.page.keyboard.press(key)
    lab.wait(
        "([active, presenting]) => {"
        "  const a = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active');"
        "  return (a && a.dataset.alCellId !== active) || (document.body.dataset.jpDeckMode === 'presenting') !== presenting;"
        "}",
        [before["active"], before["presenting"]],
        timeout_s=15,
        what=f"{key!r} to move the deck on from cell {before['active']!r} ({before['onScreen']})",
    )
    lab.page.wait_for_timeout(150)  # the deck restyles the cells right after the active one changes
    return deck(lab)


def walk_to(lab, cell_id: str, limit: int) -> dict:
    """Press space until `cell_id` is on the slide shown."""
    state = deck(lab)
    for _ in range(limit):
        if cell_id in state["onScreen"]:
            return state
        state = press(lab, "Space")
    assert cell_id in state["onScreen"], f"{limit} presses of space did not reach cell {cell_id!r}; on screen: {state}"
    return state


def test_notebook_presents_as_slides_and_every_cell_is_reached(lab):
    rel, nb = annotated_copy(lab.server, REPO / "notebooks" / "00_start_here.ipynb")
    slides = [c.id for c in nb.cells if c.metadata.get("slideshow", {}).get("slide_type") == "slide"]
    assert len(slides) >= 2
    lab.open(rel)
    start_deck(lab, nb.cells[0].id)
    first = deck(lab)
    assert first["onScreen"] == [nb.cells[0].id] and first["inView"] == first["onScreen"], first

    wanted = shown_in_slides(nb)
    seen = list(first["onScreen"])
    second = press(lab, "Space")
    assert second["onScreen"] == [slides[1]], f"space goes to the second slide, alone on screen: {second}"
    seen += second["onScreen"]
    state = second
    for _ in range(2 * len(nb.cells)):
        if wanted[-1] in state["onScreen"]:
            break
        state = press(lab, "Space")
        assert state["presenting"], f"the deck stopped presenting on the way: {state}"
        seen += [c for c in state["onScreen"] if c not in seen]
    missing = [c for c in wanted if c not in seen]
    assert not missing, f"cells never shown while paging through the deck with space: {missing}"
    skipped = [c.id for c in nb.cells if c.id not in wanted]
    assert not set(skipped) & set(seen), f"skipped cells were shown: {set(skipped) & set(seen)}"

    back = press(lab, "Shift+Space")
    assert back["presenting"] and back["onScreen"] != state["onScreen"], f"shift+space goes back: {back}"
    left = press(lab, "Escape")
    assert not left["presenting"], "Escape leaves the presentation"


def _math_notebook() -> tuple[Path, list[str]]:
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        ids = [c.id for c in nb.cells if c.cell_type == "markdown" and MATH.search(source_of(c))]
        if ids:
            return path, ids
    pytest.skip("no notebook has LaTeX in its markdown")


def _typeset(lab, ids):
    """For each markdown cell with LaTeX: (MathJax containers, text that still looks like $...$)."""
    return lab.js(
        """(ids) => ids.map(id => {
          const cell = Array.from(document.querySelectorAll('.jp-MarkdownCell')).find(c => c.dataset.alCellId === id);
          const md = cell && cell.querySelector('.jp-RenderedMarkdown');
          return md ? [md.querySelectorAll('mjx-container').length, (window.alTest.shownText(md).match(/\\$[^$\\n]+\\$/) || [''])[0]] : [-1, ''];
        })""",
        ids,
    )


def test_maths_renders_in_jupyterlab_and_on_a_slide(lab):
    path, ids = _math_notebook()
    rel, nb = annotated_copy(lab.server, path)
    lab.open(rel)
    lab.wait(
        """(ids) => ids.every(id => {
          const c = Array.from(document.querySelectorAll('.jp-MarkdownCell')).find(c => c.dataset.alCellId === id);
          return c && c.querySelector('.jp-RenderedMarkdown mjx-container');
        })""",
        ids,
        timeout_s=TIMEOUT_S,
        what=f"MathJax to typeset the LaTeX cells {ids} of {path.name}",
    )
    for cell_id, (containers, raw) in zip(ids, _typeset(lab, ids)):
        assert containers > 0 and not raw, f"{path.name} cell {cell_id}: {containers} formulas typeset, raw {raw!r}"

    shown = [i for i in ids if i in shown_in_slides(nb)]
    assert shown, f"{path.name}: every LaTeX cell is skipped in the slides"
    start_deck(lab, nb.cells[0].id)
    state = walk_to(lab, shown[0], limit=len(nb.cells))
    assert shown[0] in state["inView"], f"the LaTeX cell {shown[0]!r} is on the slide but not in view: {state}"
    ((containers, raw),) = _typeset(lab, shown[:1])
    assert containers > 0 and not raw, f"on its slide, cell {shown[0]}: {containers} formulas typeset, raw {raw!r}"


@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_a_widget_answers_on_its_slide(lab):
    rel, nb = annotated_copy(lab.server, REPO / "notebooks" / "00_start_here.ipynb")
    widget_id = next(c.id for c in nb.cells if is_widget_cell(c))
    lab.open(rel)
    lab.js("() => window.alTest.startRun()")
    lab.wait(
        "() => window.alTest.run.done && window.alTest.kernelStatus() === 'idle'",
        timeout_s=RUN_TIMEOUT,
        what="Run All Cells",
    )
    try:  # every widget view drawn: without the widget manager that never comes, and the checks below say so
        lab.wait("() => window.alTest.settled()", timeout_s=30, what="the outputs to be drawn")
    except AssertionError:
        pass
    lab.phase("run all")
    cell = lab.js("(id) => window.alTest.cell(id)", widget_id)
    lab.focus_cell = widget_id

    # Run All leaves the last cell active and the deck starts at the active cell: the instructor clicks the first.
    lab.page.locator(f'[data-al-cell-id="{nb.cells[0].id}"]').click()
    start_deck(lab, nb.cells[0].id)
    state = walk_to(lab, widget_id, limit=len(nb.cells))
    assert widget_id in state["inView"], f"the widget's slide is shown but the widget is not in view: {state}"
    drawn = lab.js("(id) => window.alTest.widgetState(id)", widget_id)
    assert not drawn["widgetError"], "the widget shows 'Error displaying widget' on its slide"
    assert drawn["panels"] >= 1, f"no live() panel drawn on the slide (the widget manager did not load?): {drawn}"
    lab.phase("to the slide")

    check_widget(lab, cell, {})  # its slider moved by typing into the readout; its output becomes its twin's
    after = deck(lab)
    assert after["presenting"] and widget_id in after["inView"], f"the deck left the widget's slide: {after}"
    lab.phase("widget")
