"""The classroom kit (tools/classroom): nbgrader round trip, student release, slides, handouts.

For every notebook, with one nbgrader course built per test session (in a temporary directory):

- the committed notebook is annotated (annotating it again changes nothing) and its exercises are laid
  out as the kit reads them (answer cell, reveal cell, solution file ending with the same check call);
- the nbgrader source derived from it has a solution cell and a locked test cell per exercise;
- ``nbgrader generate_assignment`` makes a student version with no solution text and no output left;
- ``nbgrader autograde`` gives the reference solutions full marks;
- a learner's submission -- the student release as handed out, with every other exercise answered
  wrongly and the rest left as released -- gets fewer marks; each wrong answer's test cell fails with
  exactly the feedback the learner sees under the answer ("Not yet: <hint>"), and that hint is in the
  feedback page nbgrader generates; each unanswered exercise fails with "Your turn: replace the ...";
  no cell outside the exercises fails (except cells tagged ``raises-exception``), so the release runs
  with the solutions missing;
- the handouts: every page exists, every link resolves, no page shows an error output.

The two submissions run in two nbgrader processes at once (one course copy each). Notebooks without
exercises are generated and checked but not executed: with nothing to grade, the release is the
notebook without outputs, which nbval runs anyway.
"""

from __future__ import annotations

import html
import json
import shutil
import symtable
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]

from tools import classroom  # noqa: E402 (the repository root is on sys.path: conftest.py)

pytest.importorskip("nbgrader", reason="the classroom extra is not installed: pip install -e '.[classroom]'")

REFERENCE, LEARNER = "reference", "learner"


def src(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def derived_source(path: Path):
    return classroom.source_notebook(nbformat.read(path, as_version=4), path.parent, path.name)


def exercises_of(path: Path):
    return classroom.exercises(nbformat.read(path, as_version=4), path.parent, path.name)


def learner_state(index: int, ex) -> str:
    """What the learner submission does with the index-th exercise of a notebook."""
    if ex.answer_name is None or index % 2 == 1:
        return "blank"
    return "wrong"


# The learner's wrong answer: the reference answer, changed until the check calls it wrong (not
# malformed). Written into the submission's solution cell after the reference lines.
WRONG_ANSWER = '''
def _classroom_variants(a):
    import functools
    import torch
    if isinstance(a, bool):
        return [not a]
    if isinstance(a, (int, float)):
        return [a + 1, -a - 1, 2 * a + 1]
    if isinstance(a, str):
        return [a + "x", a[::-1], ""]
    if isinstance(a, torch.Tensor):
        return [a * 2 + 1, a + 1, a.detach() * 0]
    if isinstance(a, (set, frozenset)):
        items = sorted(a, key=repr)
        return [type(a)(items[:i] + items[i + 1:]) for i in range(len(items))] + [type(a)()]
    if isinstance(a, (list, tuple)):
        out = [list(reversed(a)), list(a[:-1]), list(a[1:])]
        for i, x in enumerate(a):
            out += [list(a[:i]) + [v] + list(a[i + 1:]) for v in _classroom_variants(x)[:1]]
        try:
            return [type(a)(v) for v in out]
        except TypeError:
            return out
    if isinstance(a, dict):  # one value swapped for another of the answer's values, then each value changed
        out = [{**a, k: a[j]} for k in a for j in a if a[j] != a[k]][:3]
        out += [{**a, k: v} for k in a for v in _classroom_variants(a[k])[:1]]
        return out + [dict(list(a.items())[:-1])]
    if callable(a):  # a function: change what it returns, what it is given, or do nothing at all
        def wrap(i):
            @functools.wraps(a)
            def changed(*args, **kwargs):
                result = a(*args, **kwargs)
                variants = _classroom_variants(result)
                return variants[i % len(variants)] if variants else result
            return changed

        @functools.wraps(a)
        def shifted(*args, **kwargs):
            return a(*[x + 1 if isinstance(x, int) and not isinstance(x, bool) else x for x in args], **kwargs)

        @functools.wraps(a)
        def idle(*args, **kwargs):
            return None

        return [wrap(i) for i in range(3)] + [shifted, idle]
    return []


_classroom_reference, _classroom_pick = __NAME__, {}
for __NAME__ in _classroom_variants(_classroom_reference):
    try:
        _classroom_status = (__CALL__).status
    except Exception:
        continue
    _classroom_pick.setdefault(_classroom_status, __NAME__)
if not ({"wrong", "malformed"} & set(_classroom_pick)):
    raise RuntimeError("classroom test: no wrong answer found for this exercise")
__NAME__ = _classroom_pick.get("wrong", _classroom_pick.get("malformed"))
'''


def submission(release, exercises, states: dict[str, str], stub: str):
    """The release with each solution cell's stub replaced as ``states`` says (by solution cell id)."""
    nb = nbformat.from_dict(json.loads(json.dumps(release)))
    by_id = {ex.solution_id: ex for ex in exercises}
    for cell in nb.cells:
        ex = by_id.get(cell.get("id"))
        if ex is None:
            continue
        assert stub in src(cell), f"the stub is missing from the release of solution cell {ex.solution_id}"
        state = states[ex.solution_id]
        if state == "blank":
            continue
        answer = ex.region
        if state == "wrong":
            answer += "\n" + WRONG_ANSWER.replace("__NAME__", ex.answer_name).replace("__CALL__", ex.check_call)
        cell.source = src(cell).replace(stub, answer)
    return nb


def run_nbgrader(args, course):
    return classroom.nbgrader(args, course)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """One nbgrader course for the session: every committed notebook, generated once."""
    root = tmp_path_factory.mktemp("classroom")
    course_dir = root / "course"
    released = classroom.generate(NOTEBOOKS, course_dir, root / "student")
    return {
        "root": root,
        "dir": course_dir,
        "release": {p.stem: nbformat.read(p, as_version=4) for p in released},
        "source": {p.stem: derived_source(p) for p in NOTEBOOKS},
        "exercises": {p.stem: exercises_of(p) for p in NOTEBOOKS},
        "stub": classroom.code_stub(),
    }


@pytest.fixture(scope="module")
def graded(course, request):
    """Both submissions autograded (two course copies, two nbgrader processes at once), with feedback.

    Only the notebooks whose grading tests were selected are executed (``-k 01_leaf`` grades one)."""
    selected = {
        item.callspec.params["aid"]
        for item in request.session.items
        if "graded" in getattr(item, "fixturenames", ())
        and "aid" in getattr(getattr(item, "callspec", None), "params", {})
    }
    graded_ids = [aid for aid in IDS if aid in selected and course["exercises"][aid]]
    states = {}
    for aid in graded_ids:
        states[aid] = {
            ex.solution_id: learner_state(i, ex) for i, ex in enumerate(course["exercises"][aid])
        }
    copies = {}
    for student in (REFERENCE, LEARNER):
        copy = course["root"] / f"course-{student}"
        shutil.copytree(course["dir"], copy, ignore=shutil.ignore_patterns("submitted", "autograded", "feedback"))
        for aid in graded_ids:
            wanted = (
                {ex.solution_id: "reference" for ex in course["exercises"][aid]}
                if student == REFERENCE
                else states[aid]
            )
            nb = submission(course["release"][aid], course["exercises"][aid], wanted, course["stub"])
            dest = copy / "submitted" / student / aid / f"{aid}.ipynb"
            dest.parent.mkdir(parents=True)
            nbformat.write(nb, dest)
        copies[student] = copy

    def grade(student):
        if graded_ids:
            run_nbgrader(["autograde", "*", "--student", student], copies[student])
            if student == LEARNER:
                run_nbgrader(["generate_feedback", "*", "--student", student], copies[student])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(grade, copies))

    from nbgrader.api import Gradebook

    scores = {}
    for student, copy in copies.items():
        with Gradebook(f"sqlite:///{copy / 'gradebook.db'}") as gb:
            for aid in graded_ids:
                sub = gb.find_submission_notebook(aid, aid, student)
                cells = {g.name: (g.score, g.max_score) for g in sub.grades}
                scores[student, aid] = (sub.score, sub.max_score, cells)
    return {"copies": copies, "scores": scores, "states": states, "ids": graded_ids}


def autograded(graded, student, aid):
    return nbformat.read(graded["copies"][student] / "autograded" / student / aid / f"{aid}.ipynb", as_version=4)


def needs_exercises(course, aid):
    if not course["exercises"][aid]:
        pytest.skip(f"{aid} has no exercises: nothing to grade")


def errors(cell) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", []) if o.output_type == "error"]


def shown_feedback(cell) -> str:
    """The text/plain a check's Feedback displays in a cell ("Not yet: ...")."""
    texts = [
        "".join(o.data["text/plain"]) for o in cell.get("outputs", []) if o.output_type == "execute_result"
    ]
    return texts[-1] if texts else ""


# --------------------------------------------------------------------------------------- annotation


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_is_annotated_and_laid_out(path):
    problems = classroom.annotate_file(path, check=True)
    assert not problems, (
        "\n".join(problems) + f"\n(annotate: `.venv/bin/python -m tools classroom annotate {path.relative_to(REPO)}`"
        f" then `make notebooks NB=...`)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_nbgrader_and_slide_metadata(path):
    from nbgrader.nbgraderformat import MetadataValidator

    committed = nbformat.read(path, as_version=4)
    for cell in committed.cells:
        if classroom.is_reveal_cell(cell) or classroom.is_check_cell(cell):
            assert slide_type(cell) == "skip", f"{cell.get('id')}: not for the slides"
    nb = derived_source(path)
    validator = MetadataValidator()
    cells = nb.cells
    exercises = {ex.solution_id: ex for ex in exercises_of(path)}
    assert sum("nbgrader" in c.metadata for c in cells) == 2 * len(exercises)
    for i, cell in enumerate(cells):
        assert slide_type(cell) in ("slide", "subslide", "fragment", "skip", "notes", "-")
        assert not classroom.is_reveal_cell(cell), "the derived source has no reveal cells"
        if "nbgrader" in cell.metadata:
            validator.validate_cell(cell)
        if cell.get("id") in exercises:
            ex, test = exercises[cell.get("id")], cells[i + 1]
            assert classroom.is_solution_cell(cell) and cell.metadata["nbgrader"]["solution"]
            assert classroom.is_test_cell(test) and test.metadata["nbgrader"]["locked"]
            assert test.metadata["nbgrader"]["points"] > 0
            assert slide_type(test) == "skip"
            assert src(cell).endswith(f"### {classroom.END}\n{ex.check_call}")
            graded = f"_autograded = {ex.check_call}.assert_passed()"
            assert src(test).endswith(graded), "the grader runs the learner's check"
        if classroom.is_widget_cell(cell):
            assert slide_type(cell) in ("slide", "subslide"), "a widget gets its own slide"
            assert slide_type(cells[i + 1]) in ("slide", "subslide", "skip")
    assert slide_type(cells[0]) == "slide"


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
            _cell("code", classroom.reveal_source("solutions/01_one.py"), "ex1-reveal", tags=["solution-reveal"]),
            _cell("md", "## Key takeaways", "end"),
        ]
    )


def test_annotate_is_idempotent_and_the_source_is_derived(tmp_path):
    nb = _exercise_notebook(tmp_path)
    classroom.annotate(nb)
    kinds = {c.id: slide_type(c) for c in nb.cells}
    assert kinds == {
        "title": "slide", "setup": "-", "try": "slide", "w": "subslide", "t": "subslide", "after": "subslide",
        "after-check": "skip", "ex1-md": "subslide", "ex1": "-", "ex1-reveal": "skip", "end": "slide",
    }  # fmt: skip
    assert nb.cells[6].metadata["jupyter"]["source_hidden"], "a check cell is collapsed"
    before = nbformat.writes(nb)
    classroom.annotate(nb)
    assert nbformat.writes(nb) == before
    assert classroom.structure_problems(nb, tmp_path) == []

    (ex,) = classroom.exercises(nb, tmp_path)
    assert (ex.solution_id, ex.test_id, ex.answer_name) == ("ex1", "ex1-test", "answer")
    assert ex.check_call == "ex.check_one(answer, n=2)"
    assert ex.scaffold == "start = 1\nanswer = ..." and ex.region == "answer = 3   # why 3"
    source = classroom.source_notebook(nb, tmp_path)
    ids = [c.id for c in source.cells]
    assert "ex1-reveal" not in ids and ids[ids.index("ex1") + 1] == "ex1-test"
    assert src(source.cells[ids.index("ex1")]) == (
        "start = 1\nanswer = ...\n### BEGIN SOLUTION\nanswer = 3   # why 3\n### END SOLUTION\nex.check_one(answer, n=2)"
    )
    assert src(source.cells[ids.index("ex1-test")]).endswith("_autograded = ex.check_one(answer, n=2).assert_passed()")
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
        (lambda nb, d: nb.cells.insert(2, _cell("code", classroom.reveal_source("solutions/01_one.py"), "x",
                                                tags=["solution-reveal"])), "must follow an answer cell"),
    ],
)  # fmt: skip
def test_annotate_check_names_what_is_out_of_place(tmp_path, change, message):
    nb = _exercise_notebook(tmp_path)
    change(nb, tmp_path)
    problems = classroom.structure_problems(nb, tmp_path)
    assert any(message in p for p in problems), problems


# ------------------------------------------------------------------------------------ student release


@pytest.mark.parametrize("aid", IDS)
def test_student_release_has_no_solution_and_no_output(course, aid):
    release = course["release"][aid]
    text = json.dumps(release)
    assert classroom.BEGIN not in text and classroom.END not in text
    assert not any(classroom.is_reveal_cell(c) for c in release.cells)
    assert not any("%load" in c.source for c in release.cells if c.cell_type == "code"), "no way to a solution"
    by_id = {c.get("id"): c for c in release.cells}
    for ex in course["exercises"][aid]:
        cell = by_id[ex.solution_id]
        assert course["stub"] in src(cell) and src(cell).rstrip().endswith(ex.check_call)
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


def global_names(code: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at top level, names it reads from the notebook's globals)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        table = symtable.symtable(TransformerManager().transform_cell(code), "<cell>", "exec")
    except SyntaxError:
        return set(), set()
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    stack = list(table.get_children())
    while stack:  # functions, lambdas, comprehensions: the globals they read
        child = stack.pop()
        stack.extend(child.get_children())
        read |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
    return bound, read - bound


@pytest.mark.parametrize("aid", IDS)
def test_no_cell_outside_an_exercise_needs_its_solution(course, aid):
    """Names only a worked solution binds are read by no other cell (in the release that cell would fail)."""
    source = course["source"][aid]
    exercises = {ex.solution_id: ex for ex in course["exercises"][aid]}
    others = [
        c for c in source.cells
        if c.cell_type == "code" and c.get("id") not in exercises and not classroom.is_test_cell(c)
    ]  # fmt: skip
    bound_elsewhere = set().union(*(global_names(src(c))[0] for c in others))
    only_in_solutions = set().union(*(global_names(ex.region)[0] for ex in exercises.values())) - bound_elsewhere
    for cell in others:
        used = global_names(src(cell))[1] & only_in_solutions
        assert not used, f"{aid} cell {cell.get('id')!r} reads {sorted(used)}, bound only in a worked solution"


# ------------------------------------------------------------------------------------------- grading


@pytest.mark.parametrize("aid", IDS)
def test_reference_solutions_get_full_marks(course, graded, aid):
    needs_exercises(course, aid)
    score, max_score, cells = graded["scores"][REFERENCE, aid]
    assert max_score > 0 and score == max_score, f"{aid}: reference scored {score}/{max_score}: {cells}"
    assert sorted(cells) == sorted(ex.test_id for ex in course["exercises"][aid]), "every solution file is graded"
    nb = autograded(graded, REFERENCE, aid)
    tagged = {c.get("id") for c in course["source"][aid].cells if "raises-exception" in c.metadata.get("tags", [])}
    for cell in nb.cells:
        if cell.get("id") not in tagged:
            assert not errors(cell), f"{aid}: cell {cell.get('id')!r} failed in the reference run: {errors(cell)}"


@pytest.mark.parametrize("aid", IDS)
def test_wrong_answers_get_fewer_marks_and_the_hint(course, graded, aid):
    needs_exercises(course, aid)
    score, max_score, cells = graded["scores"][LEARNER, aid]
    assert score < max_score, f"{aid}: the learner's submission got full marks"
    nb = autograded(graded, LEARNER, aid)
    by_id = {c.get("id"): c for c in nb.cells}
    feedback_path = graded["copies"][LEARNER] / "feedback" / LEARNER / aid / f"{aid}.html"
    feedback = html.unescape(feedback_path.read_text())
    for ex in course["exercises"][aid]:
        state = graded["states"][aid][ex.solution_id]
        assert cells[ex.test_id][0] == 0, f"{aid}: {state} answer in {ex.test_id} got {cells[ex.test_id]}"
        shown = shown_feedback(by_id[ex.solution_id])
        failed = errors(by_id[ex.test_id])
        assert failed and failed[0] == f"AssertionError: {shown}", (
            f"{aid}: the grader's message for {ex.test_id} differs from the learner's feedback:\n"
            f"  shown:  {shown!r}\n  graded: {failed}"
        )
        if state == "wrong":
            assert shown.startswith(("Not yet: ", "Check the form of your answer: ")), shown
            hint = shown.split(": ", 1)[1].splitlines()[0]
            assert hint in feedback, f"{aid}: the hint for {ex.test_id} is not in the feedback page"
        else:
            assert shown.startswith("Your turn: replace the ..."), shown


@pytest.mark.parametrize("aid", IDS)
def test_release_fails_only_in_exercise_cells_with_a_clear_message(course, graded, aid):
    needs_exercises(course, aid)
    nb = autograded(graded, LEARNER, aid)
    source = course["source"][aid]
    tests = {ex.test_id for ex in course["exercises"][aid]}
    tagged = {c.get("id") for c in source.cells if "raises-exception" in c.metadata.get("tags", [])}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if src(cell).strip():
            assert cell.execution_count is not None, f"{aid}: cell {cell.get('id')!r} did not run"
        if cell.get("id") in tests:
            assert errors(cell), f"{aid}: {cell.get('id')} passed without an answer"
        elif cell.get("id") not in tagged:
            assert not errors(cell), f"{aid}: cell {cell.get('id')!r} fails in the student release: {errors(cell)}"


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
    classroom.handouts(NOTEBOOKS, out)
    return out


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_handouts_contents_page_lists_every_notebook(handout_dir):
    page = _parse(handout_dir / "index.html")
    assert [link for link in page.links] == [f"{p.stem}.html" for p in NOTEBOOKS]


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
    widgets = [c for c in nb.cells if classroom.is_widget_cell(c)]
    assert text.count('class="al-widget-note"') == len(widgets)
    assert "application/vnd.jupyter.widget-view+json" not in text
    folded = text.count("Worked solution: try the exercise first, then click to show")
    assert folded == len(exercises_of(path)), "every worked solution is on the page, folded"
    assert "%load solutions/" not in text, "the handout shows the solutions themselves, not the reveal cells"
    raising = [c for c in nb.cells if "raises-exception" in c.metadata.get("tags", []) and errors(c)]
    assert text.count('class="al-expected-error"') == len(raising)
    graphs = sum("image/svg+xml" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count('data-mime-type="image/svg+xml"') == graphs, "every graph is shown as SVG"
    plots = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count('src="data:image/png;base64,') >= plots, "plots are embedded images"


def test_handout_maths_and_links():
    text, left = classroom.render_math(
        "Chain rule $\\frac{1}{N}\\sum_i s_i$, code `$x$` and a price of $5 and $6.\n"
        "```python\ncost = '$y$'\n```\n[Next](02_grad_fn_chains.ipynb#Setup)"
    )
    assert text.count('class="al-math"') == 1 and "`$x$`" in text and "cost = '$y$'" in text and "$5 and $6" in text
    assert not left
    _, left = classroom.render_math("$$\\underbrace{a}_{b}$$")
    assert left, "a formula mathtext cannot draw stays for MathJax"
    assert classroom._link_to_html("[Next](02_grad_fn_chains.ipynb#Setup)") == "[Next](02_grad_fn_chains.html#Setup)"
