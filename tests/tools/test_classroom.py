"""The classroom kit (tools/classroom): layout, slides, nbgrader source, student release, handouts.

For every notebook, with one nbgrader release built per test session (in a temporary directory):

- the committed notebook is annotated (annotating it again changes nothing) and its exercises are laid
  out as the kit reads them (answer cell, reveal cell, solution file ending with the same check call);
- the nbgrader source derived from it has a solution cell and a locked test cell per exercise;
- ``nbgrader generate_assignment`` makes a student version with no solution text and no output left, and
  no cell outside an exercise reads a name that only a worked solution binds;
- the handouts: every page exists, every link resolves, no page shows an error output; formulas are drawn.

Grading (worked solutions through their checks, nbgrader's autograde) is tested in test_autograde.py.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from tools.classroom import annotation, cells, course, handouts, layout, maths, source
from tools.classroom.names import global_names

if importlib.util.find_spec("nbgrader") is None:
    pytest.skip("the classroom extra is not installed: pip install -e '.[classroom]'", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]
src = cells.source_of


def derived_source(path: Path):
    return source.source_notebook(nbformat.read(path, as_version=4), path.parent, path.name)


def exercises_of(path: Path):
    return layout.exercises(nbformat.read(path, as_version=4), path.parent, path.name)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """One student release for the session: every committed notebook, generated once."""
    root = tmp_path_factory.mktemp("classroom")
    notebooks = course.generate(NOTEBOOKS, root / "course", root / "student")
    return {
        "release": {p.stem: nbformat.read(p, as_version=4) for p in notebooks},
        "exercises": {p.stem: exercises_of(p) for p in NOTEBOOKS},
        "stub": course.code_stub(),
    }


# --------------------------------------------------------------------------------------- annotation


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_is_annotated_and_laid_out(path):
    problems = annotation.annotate_file(path, check=True)
    assert not problems, (
        "\n".join(problems) + f"\n(annotate: `.venv/bin/python -m tools classroom annotate {path.relative_to(REPO)}`"
        f" then `make notebooks NB=...`)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_nbgrader_and_slide_metadata(path):
    from nbgrader.nbgraderformat import MetadataValidator

    committed = nbformat.read(path, as_version=4)
    for cell in committed.cells:
        if cells.is_reveal_cell(cell) or cells.is_check_cell(cell):
            assert slide_type(cell) == "skip", f"{cell.get('id')}: not for the slides"
    nb = derived_source(path)
    validator = MetadataValidator()
    derived = nb.cells
    exercises = {ex.solution_id: ex for ex in exercises_of(path)}
    assert sum("nbgrader" in c.metadata for c in derived) == 2 * len(exercises)
    for i, cell in enumerate(derived):
        assert slide_type(cell) in ("slide", "subslide", "fragment", "skip", "notes", "-")
        assert not cells.is_reveal_cell(cell), "the derived source has no reveal cells"
        if "nbgrader" in cell.metadata:
            validator.validate_cell(cell)
        if cell.get("id") in exercises:
            ex, test = exercises[cell.get("id")], derived[i + 1]
            assert cells.is_solution_cell(cell) and cell.metadata["nbgrader"]["solution"]
            assert cells.is_test_cell(test) and test.metadata["nbgrader"]["locked"]
            assert test.metadata["nbgrader"]["points"] > 0
            assert slide_type(test) == "skip"
            assert src(cell).endswith(f"### {cells.END}\n{ex.check_call}")
            graded = f"_autograded = {ex.check_call}.assert_passed()"
            assert src(test).endswith(graded), "the grader runs the learner's check"
        if cells.is_widget_cell(cell):
            assert slide_type(cell) in ("slide", "subslide"), "a widget gets its own slide"
            assert slide_type(derived[i + 1]) in ("slide", "subslide", "skip")
    assert slide_type(derived[0]) == "slide"


def slide_type(cell) -> str:
    """A cell's slide type; none written means "-" (continue the slide), as nbconvert reads it."""
    meta = cell.metadata.get("slideshow")
    assert meta is None or meta.get("slide_type") not in (None, "-"), "a continuing cell carries no slide metadata"
    return meta["slide_type"] if meta else "-"


def _cell(kind, source, id, **meta):
    from nbformat.v4 import new_code_cell, new_markdown_cell

    c = (new_code_cell if kind == "code" else new_markdown_cell)(source)
    c.id = id
    c.metadata.update(meta)
    return c


def _exercise_notebook(tmp_path, solution="answer = 3   # why 3\nex.check_one(answer, n=2)\n"):
    (tmp_path / "solutions").mkdir(exist_ok=True)
    (tmp_path / "solutions" / "01_one.py").write_text(solution)
    return nbformat.v4.new_notebook(
        cells=[
            _cell("md", "# Title", "title"),
            _cell("code", "import x", "setup"),
            _cell("md", "## Try it", "try"),
            _cell("code", "live(f, n=(1, 3))", "w", autograd_lab={"twin": "t", "set": {"n": 2}}),
            _cell("code", "f(n=2)", "t"),
            _cell("md", "Text after the call.", "after"),
            _cell("code", "assert f(n=2) == 4", "after-check", tags=["check"]),
            _cell("md", "### Exercise 1\n```python\n# not a heading\n```", "ex1-md"),
            _cell("code", "start = 1\nanswer = ...\nex.check_one(answer, n=2)", "ex1"),
            _cell("code", layout.reveal_source("solutions/01_one.py"), "ex1-reveal", tags=["solution-reveal"]),
            _cell("md", "## Key takeaways", "end"),
        ]
    )


def test_annotate_is_idempotent_and_the_source_is_derived(tmp_path):
    nb = _exercise_notebook(tmp_path)
    annotation.annotate(nb)
    kinds = {c.id: slide_type(c) for c in nb.cells}
    assert kinds == {
        "title": "slide", "setup": "-", "try": "slide", "w": "subslide", "t": "subslide", "after": "subslide",
        "after-check": "skip", "ex1-md": "subslide", "ex1": "-", "ex1-reveal": "skip", "end": "slide",
    }  # fmt: skip
    assert nb.cells[6].metadata["jupyter"]["source_hidden"], "a check cell is collapsed"
    before = nbformat.writes(nb)
    annotation.annotate(nb)
    assert nbformat.writes(nb) == before
    assert layout.structure_problems(nb, tmp_path) == []

    (ex,) = layout.exercises(nb, tmp_path)
    assert (ex.solution_id, ex.test_id, ex.answer_name) == ("ex1", "ex1-test", "answer")
    assert ex.check_call == "ex.check_one(answer, n=2)"
    assert ex.scaffold == "start = 1\nanswer = ..." and ex.region == "answer = 3   # why 3"
    derived = source.source_notebook(nb, tmp_path)
    ids = [c.id for c in derived.cells]
    assert "ex1-reveal" not in ids and ids[ids.index("ex1") + 1] == "ex1-test"
    assert src(derived.cells[ids.index("ex1")]) == (
        "start = 1\nanswer = ...\n### BEGIN SOLUTION\nanswer = 3   # why 3\n### END SOLUTION\nex.check_one(answer, n=2)"
    )
    assert src(derived.cells[ids.index("ex1-test")]).endswith("_autograded = ex.check_one(answer, n=2).assert_passed()")
    assert nbformat.writes(nb) == before, "deriving the source leaves the committed notebook as it was"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda nb, d: nb.cells.pop(9), "must be followed by its reveal cell"),
        (lambda nb, d: (d / "solutions" / "01_one.py").unlink(), "which does not exist"),
        (
            lambda nb, d: (d / "solutions" / "01_one.py").write_text("answer = 3\nex.check_one(answer)\n"),
            "must end with",
        ),
        (lambda nb, d: setattr(nb.cells[9], "source", "%load solutions/01_one.py"), "must read exactly"),
        (lambda nb, d: nb.cells[9].metadata.update(nbgrader={"solution": True}), "belong in the derived source"),
        (lambda nb, d: setattr(nb.cells[7], "source", "### BEGIN SOLUTION"), "reword it"),
        (lambda nb, d: nb.cells.insert(2, _cell("code", layout.reveal_source("solutions/01_one.py"), "x",
                                                tags=["solution-reveal"])), "must follow an answer cell"),
    ],
)  # fmt: skip
def test_annotate_check_names_what_is_out_of_place(tmp_path, change, message):
    nb = _exercise_notebook(tmp_path)
    change(nb, tmp_path)
    problems = layout.structure_problems(nb, tmp_path)
    assert any(message in p for p in problems), problems


# ------------------------------------------------------------------------------------ student release


@pytest.mark.slow
@pytest.mark.parametrize("aid", IDS)
def test_student_release_has_no_solution_and_no_output(released, aid):
    release = released["release"][aid]
    text = json.dumps(release)
    assert cells.BEGIN not in text and cells.END not in text
    assert not any(cells.is_reveal_cell(c) for c in release.cells)
    assert not any("%load" in c.source for c in release.cells if c.cell_type == "code"), "no way to a solution"
    by_id = {c.get("id"): c for c in release.cells}
    for ex in released["exercises"][aid]:
        cell = by_id[ex.solution_id]
        assert released["stub"] in src(cell) and src(cell).rstrip().endswith(ex.check_call)
        assert src(cell).startswith(ex.scaffold), f"the release keeps the exercise's own lines in {ex.solution_id}"
        for line in ex.region.splitlines():
            if line.strip() and not line.strip().startswith("#") and line.strip() not in ex.scaffold:
                assert line.strip() not in src(cell), f"solution text left in {ex.solution_id}: {line.strip()!r}"
        assert ex.region.strip() not in text
        test = by_id[ex.test_id]
        assert test.metadata.get("editable") is False and test.metadata["nbgrader"]["locked"]
    for cell in release.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{aid}: output left in cell {cell.get('id')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_cell_outside_an_exercise_needs_its_solution(path):
    """Names only a worked solution binds are read by no other cell (in the release that cell would fail)."""
    aid, source = path.stem, derived_source(path)
    exercises = {ex.solution_id: ex for ex in exercises_of(path)}
    others = [
        c for c in source.cells
        if c.cell_type == "code" and c.get("id") not in exercises and not cells.is_test_cell(c)
    ]  # fmt: skip
    bound_elsewhere = set().union(*(global_names(src(c))[0] for c in others))
    only_in_solutions = set().union(*(global_names(ex.region)[0] for ex in exercises.values())) - bound_elsewhere
    for cell in others:
        used = global_names(src(cell))[1] & only_in_solutions
        assert not used, f"{aid} cell {cell.get('id')!r} reads {sorted(used)}, bound only in a worked solution"


# ------------------------------------------------------------------------------------------ handouts


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.sources, self.ids = [], [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag in ("img", "script", "link", "iframe") and (attrs.get("src") or attrs.get("href")):
            self.sources.append(attrs.get("src") or attrs.get("href"))


@pytest.fixture(scope="module")
def handout_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("handouts")
    handouts.handouts(NOTEBOOKS, out)
    return out


def errors(cell) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", []) if o.output_type == "error"]


@functools.cache  # a page is parsed once, however many of its links lead into it
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


@pytest.mark.slow
def test_handouts_contents_page_lists_every_notebook(handout_dir):
    page = _parse(handout_dir / "index.html")
    assert [link for link in page.links] == [f"{p.stem}.html" for p in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_handout_page(handout_dir, path):
    page_path = handout_dir / f"{path.stem}.html"
    assert page_path.exists()
    text = page_path.read_text()
    page = _parse(page_path)
    for href in page.links:
        url = urlparse(href)
        if url.scheme in ("http", "https", "mailto"):
            continue
        target = page_path if not url.path else (handout_dir / unquote(url.path))
        assert target.exists(), f"{page_path.name}: link {href!r} leads nowhere"
        if url.fragment and target.suffix == ".html":
            ids = _parse(target).ids  # a browser looks the fragment up as written, then percent-decoded
            assert url.fragment in ids or unquote(url.fragment) in ids, f"{page_path.name}: anchor {href!r} not found"
    for ref in page.sources:  # self-contained: nothing to fetch, every formula drawn as SVG (works offline)
        assert not ref.startswith(("http:", "https:", "//")), f"{page_path.name} loads {ref}"
    # No error output: nbconvert renders errors (and stderr) with this mime type.
    assert 'data-mime-type="application/vnd.jupyter.stderr"' not in text, f"{page_path.name} shows an error"
    assert "Traceback (most recent call last)" not in text
    nb = nbformat.read(path, as_version=4)
    widgets = [c for c in nb.cells if cells.is_widget_cell(c)]
    assert text.count('class="al-widget-note"') == len(widgets)
    assert "application/vnd.jupyter.widget-view+json" not in text
    folded = text.count("Worked solution: try the exercise first, then click to show")
    assert folded == len(exercises_of(path)), "every worked solution is on the page, folded"
    assert "%load solutions/" not in text, "the handout shows the solutions themselves, not the reveal cells"
    raising = [c for c in nb.cells if ("raises-exception" in c.metadata.get("tags", []) and errors(c))
               or (c.cell_type == "code" and "shows_error" in c.source
                   and any(o.get("name") == "stderr" for o in c.outputs))]
    assert text.count('class="al-expected-error"') == len(raising)
    graphs = sum("image/svg+xml" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count('data-mime-type="image/svg+xml"') == graphs, "every graph is shown as SVG"
    plots = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count('src="data:image/png;base64,') >= plots, "plots are embedded images"


def test_handout_maths_and_links():
    text, left = maths.render_math(
        "Chain rule $\\frac{1}{N}\\sum_i s_i$, code `$x$` and a price of $5 and $6.\n"
        "```python\ncost = '$y$'\n```\n[Next](02_grad_fn_chains.ipynb#Setup)"
    )
    assert text.count('class="al-math"') == 1 and "`$x$`" in text and "cost = '$y$'" in text and "$5 and $6" in text
    assert not left
    _, left = maths.render_math("$$\\underbrace{a}_{b}$$")
    assert left, "a formula mathtext cannot draw stays for MathJax"
    assert handouts.link_to_html("[Next](02_grad_fn_chains.ipynb#Setup)") == "[Next](02_grad_fn_chains.html#Setup)"
