"""The classroom kit in a real browser: a notebook as jupyterlab-rise slides, and maths in JupyterLab.

- A notebook, annotated by tools/classroom (annotating the committed, annotated notebook changes
  nothing, which tests/test_classroom.py checks), opens as a RISE deck with one horizontal slide per
  slide cell, shows the first one, and "next" (space) moves to the second.
- With the classroom extra installed (nbgrader brings jupyterlab-mathjax3 4.3.0, which
  ``jupyter labextension list`` marks incompatible with JupyterLab 4), the notebooks' LaTeX is still
  typeset in JupyterLab and in the slides: MathJax 3 ``mjx-container`` elements, no ``$`` left.
- Known upstream limit, kept visible: jupyterlab-rise 0.43.1 cannot load the ipywidgets manager on
  JupyterLab 4.6 (jupyterlab-contrib/rise#119), so in slides a widget shows as text. The strict xfail
  turns red the day it works, so that the README's advice can change.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MATH = re.compile(r"\$[^$\n]+\$")
TIMEOUT_S = 90

from tools import classroom  # noqa: E402 (the repository root is on sys.path: conftest.py)


def annotated_copy(server, path: Path) -> tuple[str, nbformat.NotebookNode]:
    """The notebook annotated for the classroom, written beside the server's copy of notebooks/."""
    nb = nbformat.read(path, as_version=4)
    classroom.annotate(nb, path.name)
    dest = server.root / "notebooks" / f"_slides_{path.name}"  # same folder: its relative links still work
    nbformat.write(nb, dest)
    return dest.relative_to(server.root).as_posix(), nb


def heading(cell) -> str:
    for line in classroom._src(cell).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)", line)
        if m:
            return re.sub(r"[`*_]", "", m.group(1)).strip()
    return ""


def open_slides(lab, rel_path: str):
    lab.path = f"rise/{rel_path}"
    lab.page.goto(f"{lab.server.url}/rise/{rel_path}", wait_until="domcontentloaded")
    lab.wait(
        "() => document.querySelectorAll('.reveal .slides > section').length > 0 && /#\\/slide-/.test(location.hash)",
        timeout_s=TIMEOUT_S,
        what="the RISE deck",
    )


PRESENT = """() => {
  const h = document.querySelector('.reveal .slides > section.present');
  const v = h && (h.querySelector(':scope > section.present') || h);
  return {hash: location.hash, text: v ? v.innerText : '', slides: document.querySelectorAll('.reveal .slides > section').length};
}"""


def test_notebook_opens_as_slides_and_moves_to_the_next_slide(lab):
    rel, nb = annotated_copy(lab.server, REPO / "notebooks" / "00_start_here.ipynb")
    slides = [c for c in nb.cells if c.metadata["slideshow"]["slide_type"] == "slide"]
    assert len(slides) >= 2
    open_slides(lab, rel)
    first = lab.js(PRESENT)
    assert first["slides"] == len(slides), f"one horizontal slide per slide cell: {first['slides']} != {len(slides)}"
    assert first["hash"] == "#/slide-0-0" and heading(slides[0]) in first["text"], first

    lab.page.keyboard.press("Space")  # RISE's "next"
    lab.wait("() => location.hash === '#/slide-1-0'", timeout_s=30, what="the second slide")
    second = lab.js(PRESENT)
    assert heading(slides[1]) in second["text"] and heading(slides[0]) not in second["text"], second

    lab.page.keyboard.press("ArrowLeft")
    lab.wait("() => location.hash === '#/slide-0-0'", timeout_s=30, what="the first slide again")


def _math_notebook() -> tuple[Path, list[str]]:
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        ids = [c.id for c in nb.cells if c.cell_type == "markdown" and MATH.search(classroom._src(c))]
        if ids:
            return path, ids
    pytest.skip("no notebook has LaTeX in its markdown")


def _typeset(lab, ids, root: str):
    """For each markdown cell with LaTeX: (MathJax containers, text that still looks like $...$)."""
    return lab.js(
        """([ids, root]) => ids.map(id => {
          const cell = Array.from(document.querySelectorAll(root + ' .jp-MarkdownCell')).find(c => c.dataset.alCellId === id);
          const md = cell && cell.querySelector('.jp-RenderedMarkdown');
          return md ? [md.querySelectorAll('mjx-container').length, (md.innerText.match(/\\$[^$\\n]+\\$/) || [''])[0]] : [-1, ''];
        })""",
        [ids, root],
    )


def test_maths_renders_in_jupyterlab_with_the_classroom_extra(lab):
    try:
        importlib.metadata.version("jupyterlab-mathjax3")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the classroom extra (nbgrader, which brings jupyterlab-mathjax3) is not installed")
    path, ids = _math_notebook()
    lab.open(path.relative_to(REPO).as_posix())
    lab.wait(
        """(ids) => ids.every(id => {
          const c = Array.from(document.querySelectorAll('.jp-MarkdownCell')).find(c => c.dataset.alCellId === id);
          return c && c.querySelector('.jp-RenderedMarkdown mjx-container');
        })""",
        ids,
        timeout_s=TIMEOUT_S,
        what=f"MathJax to typeset the LaTeX cells {ids} of {path.name}",
    )
    for cell_id, (containers, raw) in zip(ids, _typeset(lab, ids, ".jp-Notebook")):
        assert containers > 0 and not raw, f"{path.name} cell {cell_id}: {containers} formulas typeset, raw {raw!r}"


def test_maths_renders_in_slides(lab):
    path, _ = _math_notebook()
    rel, _ = annotated_copy(lab.server, path)
    open_slides(lab, rel)
    lab.wait(
        "() => document.querySelectorAll('.reveal mjx-container').length > 0",
        timeout_s=TIMEOUT_S,
        what=f"MathJax to typeset the slides of {path.name}",
    )
    raw = lab.js("() => Array.from(document.querySelectorAll('.reveal .jp-RenderedMarkdown')).map(m => (m.innerText.match(/\\$[^$\\n]+\\$/) || [''])[0]).filter(Boolean)")
    assert not raw, f"LaTeX left untypeset in the slides of {path.name}: {raw[:3]}"


@pytest.mark.xfail(
    strict=True,
    reason="jupyterlab-rise 0.43.1 cannot load @jupyter-widgets/jupyterlab-manager on JupyterLab 4.6 "
    "(jupyterlab-contrib/rise#119): in slides a widget shows as text; present Try it from JupyterLab",
)
def test_widgets_can_render_in_slides(lab):
    rel, _ = annotated_copy(lab.server, REPO / "notebooks" / "00_start_here.ipynb")
    open_slides(lab, rel)
    lab.page.wait_for_timeout(3000)  # extensions load after the deck appears
    failed = [line for line in lab.console if "Failed to create module" in line and "jupyterlab-manager" in line]
    assert not failed, failed[0]
