#!/usr/bin/env python3
"""The classroom kit: nbgrader assignments, RISE slides and HTML handouts from the course notebooks.

Run from the repository root with the course's Python (``.venv/bin/python tools/classroom.py ...``):

    annotate NOTEBOOK...          add what nbgrader and RISE read to the notebooks, in place (idempotent)
    annotate --check NOTEBOOK...  change nothing; exit 1 and name every notebook that is not annotated
    student NOTEBOOK...           the student release (nbgrader generate_assignment) -> build/student/,
                                  the nbgrader course it comes from (source, release, gradebook) -> build/nbgrader/
    handouts NOTEBOOK...          each executed notebook as one self-contained HTML page -> build/handouts/,
                                  with a contents page, index.html
    nbgrader ARGS...              any nbgrader command, run in the course (build/nbgrader) with this
                                  environment's tools on PATH, e.g. `nbgrader autograde 01_leaf_tensors`

What ``annotate`` adds (everything is derived from the cells, so running it again changes nothing)

* Exercises. An exercise ends with its worked solution, a code cell whose answer sits between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION`` and which ends with the check call, e.g.
  ``ex.check_leaves(answer)``. That cell becomes an nbgrader *solution* cell; right after it comes a
  locked autograder *test* cell (id ``<exercise>-test``, 1 point unless its metadata already says
  otherwise) that makes the very same call raise the learner's feedback:
  ``_autograded = ex.check_leaves(answer).assert_passed()`` (an assignment: it shows nothing when it passes;
  a trailing ``;`` would not, under nbval, which runs cells outside IPython's history).
  Grading and the feedback a learner reads therefore cannot disagree. The tool owns the ``nbgrader``
  metadata: it removes it from any other cell.
* Slides (RISE, ``slideshow.slide_type``): one idea per slide. A markdown cell with a level 1-2 heading
  starts a slide, a deeper heading a sub-slide (reached by "down", or by space). Within a section, prose
  that follows code starts a sub-slide (the next step of the argument), except a short closing remark
  (at most 3 lines, last in its section), which stays with the output it interprets; a code cell after code
  starts one when the slide already holds about 30 source lines. A widget cell gets a
  sub-slide of its own, and so does what follows it (its checked twin). A worked solution is a sub-slide
  (the class tries first); the autograder test cell is skipped. Everything else continues the slide before it.
  Notebook metadata ``rise``: tall slides scroll, no transitions.

After annotating, re-execute the notebooks (``make notebooks``) so that the new test cells have outputs.
"""

from __future__ import annotations

import argparse
import ast
import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "tools" / "classroom"
BUILD = REPO / "build"

BEGIN, END = "BEGIN SOLUTION", "END SOLUTION"  # nbgrader's delimiters (ClearSolutions matches them anywhere in a line)
TEST_MARK = "# Autograder test"
TEST_SOURCE = (
    TEST_MARK + " (nbgrader, locked): the check above must pass; when it fails, its hint is the feedback.\n"
    "_autograded = {call}.assert_passed()"
)
DEFAULT_POINTS = 1
SCHEMA = 3
LINES_PER_SLIDE = 30  # source lines; outputs come on top, and tall slides scroll
RISE = {"scroll": True, "center": False, "transition": "none"}
HEADING = re.compile(r"^(#{1,6})\s+\S")
FENCE = re.compile(r"^\s*(```|~~~)")


class ClassroomError(Exception):
    """A notebook the kit cannot annotate as it stands (the message says which cell and why)."""


# ----------------------------------------------------------------------------------------------- exercises


@dataclass
class Exercise:
    solution_id: str
    test_id: str
    check_call: str  # the check call after ### END SOLUTION, e.g. "ex.check_leaves(answer)"
    answer_name: str | None  # the variable the check reads ("answer"), when it is a plain name
    region: str  # the reference answer: the lines between the delimiters


def _src(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def is_solution_cell(cell) -> bool:
    return cell.cell_type == "code" and BEGIN in _src(cell)


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and _src(cell).startswith(TEST_MARK)


def is_widget_cell(cell) -> bool:
    meta = cell.metadata.get("autograd_lab")
    return cell.cell_type == "code" and isinstance(meta, dict) and "twin" in meta


def split_solution(source: str, where: str = "") -> tuple[list[str], list[str], list[str]]:
    """(lines before, the solution region, lines after) of a worked-solution cell."""
    lines = source.split("\n")
    begins = [i for i, line in enumerate(lines) if BEGIN in line]
    ends = [i for i, line in enumerate(lines) if END in line]
    if len(begins) != 1 or len(ends) != 1 or not begins[0] < ends[0]:
        raise ClassroomError(f"{where}: expected one '### {BEGIN}' line followed by one '### {END}' line")
    b, e = begins[0], ends[0]
    return lines[:b], lines[b + 1 : e], lines[e + 1 :]


def _test_id(solution_id: str) -> str:
    base = solution_id[: -len("-solution")] if solution_id.endswith("-solution") else solution_id
    return f"{base}-test"


def exercise_of(cell, where: str = "") -> Exercise:
    """Parse a worked-solution cell: its region and the check call that ends it."""
    where = f"{where} cell {cell.get('id')!r}"
    _, region, after = split_solution(_src(cell), where)
    tail = "\n".join(after).strip()
    try:
        tree = ast.parse(tail)
    except SyntaxError as err:
        raise ClassroomError(f"{where}: the code after '### {END}' is not plain Python ({err.msg})") from None
    last = tree.body[-1] if tree.body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
        raise ClassroomError(
            f"{where}: a worked solution must end with its check call after '### {END}', e.g. ex.check_x(answer)"
        )
    call = ast.get_source_segment(tail, last.value)
    first = last.value.args[0] if last.value.args else None
    name = first.id if isinstance(first, ast.Name) else None
    cell_id = cell.get("id")
    if not cell_id:
        raise ClassroomError(f"{where}: cells need ids (nbformat 4.5); re-save the notebook with nbformat >= 5.1")
    return Exercise(cell_id, _test_id(cell_id), call, name, "\n".join(region))


def exercises(nb, where: str = "") -> list[Exercise]:
    return [exercise_of(c, where) for c in nb.cells if is_solution_cell(c)]


def _solution_meta(grade_id: str) -> dict:
    return {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA, "solution": True, "task": False}


def _test_meta(grade_id: str, points) -> dict:
    return {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": points,
        "schema_version": SCHEMA,
        "solution": False,
        "task": False,
    }


# ---------------------------------------------------------------------------------------------- slides


def _heading_level(source: str) -> int | None:
    """The highest heading level (1 = '#') of a markdown cell, outside code fences; None without heading."""
    level, fenced = None, False
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            level = min(level or 6, len(m.group(1)))
    return level


def slide_types(cells) -> list[str]:
    types = []
    new_sub = False  # the previous cell asks the next one to start a sub-slide
    lines = 0  # source lines on the current (sub-)slide so far
    for i, cell in enumerate(cells):
        level = _heading_level(_src(cell)) if cell.cell_type == "markdown" else None
        height = len(_src(cell).strip().splitlines()) + 1
        if i == 0 or (level is not None and level <= 2):
            kind = "slide"
        elif level is not None:
            kind = "subslide"
        elif is_test_cell(cell):
            types.append("skip")
            new_sub = True
            continue
        elif is_widget_cell(cell) or is_solution_cell(cell) or new_sub:
            kind = "subslide"
        elif cell.cell_type == "markdown" and cells[i - 1].cell_type == "code" and not _closing_remark(cells, i):
            kind = "subslide"  # new prose after code: the next step of the argument
        elif cell.cell_type == "code" and cells[i - 1].cell_type == "code" and lines + height > LINES_PER_SLIDE:
            kind = "subslide"  # a long run of code: the projector shows about this many lines
        else:
            kind = "-"
        types.append(kind)
        lines = height if kind in ("slide", "subslide") else lines + height
        new_sub = is_widget_cell(cell) or _is_twin(cells, cell)
    return types


def _closing_remark(cells, i) -> bool:
    """A short markdown cell that ends its section: it stays with the output it interprets."""
    nxt = cells[i + 1] if i + 1 < len(cells) else None
    ends = nxt is None or (nxt.cell_type == "markdown" and _heading_level(_src(nxt)) is not None)
    return ends and len(_src(cells[i]).strip().splitlines()) <= 3


def _is_twin(cells, cell) -> bool:
    return any(is_widget_cell(c) and c.metadata["autograd_lab"].get("twin") == cell.get("id") for c in cells)


# -------------------------------------------------------------------------------------------- annotate


def annotate(nb, where: str = "notebook") -> list[Exercise]:
    """Add the nbgrader and slide metadata to ``nb`` in place; return its exercises."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (BEGIN in _src(cell) or END in _src(cell)):
            raise ClassroomError(
                f"{where} cell {cell.get('id')!r}: markdown mentions '{BEGIN}'/'{END}', which nbgrader "
                "would take for a solution region; reword it"
            )
    old_tests = {c.get("id"): c for c in nb.cells if is_test_cell(c)}
    found = []
    cells = []
    for cell in nb.cells:
        if is_test_cell(cell):
            continue  # re-attached right after its solution below (a stale one disappears)
        cell.metadata.pop("nbgrader", None)
        cells.append(cell)
        if not is_solution_cell(cell):
            continue
        ex = exercise_of(cell, where)
        found.append(ex)
        cell.metadata["nbgrader"] = _solution_meta(ex.solution_id)
        test = old_tests.get(ex.test_id)
        source = TEST_SOURCE.format(call=ex.check_call)
        if test is None:
            test = nbformat.v4.new_code_cell(source)
            test.id = ex.test_id
        elif _src(test) != source:
            test.source = source
            test.outputs, test.execution_count = [], None  # stale output: the hygiene test asks for a re-run
        points = test.metadata.get("nbgrader", {}).get("points", DEFAULT_POINTS)
        test.metadata["nbgrader"] = _test_meta(ex.test_id, points)
        cells.append(test)
    ids = [c.get("id") for c in cells]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ClassroomError(f"{where}: duplicate cell ids {dup} (a test id is <exercise>-test)")
    nb.cells = cells
    for cell, kind in zip(cells, slide_types(cells)):
        cell.metadata["slideshow"] = {"slide_type": kind}
    nb.metadata["rise"] = dict(RISE)
    return found


def annotate_file(path: Path, check: bool = False) -> bool:
    """Annotate one notebook file; True when it changed (with check=True: would change)."""
    before = path.read_text()
    nb = nbformat.reads(before, as_version=4)
    annotate(nb, path.name)
    after = nbformat.writes(nb) + "\n"
    changed = after.rstrip("\n") != before.rstrip("\n")
    if changed and not check:
        nbformat.validate(nb)
        nbformat.write(nb, path)
    return changed


# --------------------------------------------------------------------------------------------- student


def _env() -> dict:
    """nbgrader runs `alembic` (the gradebook's migrations) from PATH: put this environment's scripts first."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def nbgrader(args: list[str], course: Path, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory (where it reads nbgrader_config.py)."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    if quiet:
        cmd.append("--log-level=WARN")
    proc = subprocess.run(cmd, cwd=course, env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClassroomError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def code_stub(config: Path = KIT / "nbgrader_config.py") -> str:
    """The text that replaces a worked solution in the release (ClearSolutions.code_stub of our config)."""
    from traitlets.config import Config

    c = Config()
    exec(compile(config.read_text(), str(config), "exec"), {"get_config": lambda: c})
    return c.ClearSolutions.code_stub["python"]


def assignment_id(path: Path) -> str:
    return path.stem


def setup_course(notebooks: list[Path], course: Path) -> list[str]:
    """An nbgrader course directory with one assignment per notebook, its source annotated."""
    course.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(KIT / "nbgrader_config.py", course / "nbgrader_config.py")
    ids = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        annotate(nb, path.name)  # a no-op on annotated notebooks; lets a draft be released too
        aid = assignment_id(path)
        src = course / "source" / aid
        src.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, src / path.name)
        ids.append(aid)
    return ids


def generate(notebooks: list[Path], course: Path, out: Path | None) -> list[Path]:
    """nbgrader generate_assignment for every notebook; the releases also copied flat into ``out``."""
    ids = setup_course(notebooks, course)
    every = {p.name for p in (course / "source").iterdir() if p.is_dir()}
    # One nbgrader process for all of them when it can be (each start costs seconds).
    for aid in ["*"] if set(ids) == every else ids:
        nbgrader(["generate_assignment", aid, "--force"], course)
    released = [course / "release" / aid / f"{aid}.ipynb" for aid in ids]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for path in released:
            shutil.copyfile(path, out / path.name)  # flat: the notebooks' links to each other resolve
        released = [out / p.name for p in released]
    return released


# -------------------------------------------------------------------------------------------- handouts

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
LINK = re.compile(r"\]\(((?:\.\./notebooks/|\./)?)(\d\d_[\w-]+)\.ipynb(#[^)\s]*)?\)")
HANDOUT_CSS = """
<style>
.al-widget-note, .al-expected-error {border-left: 4px solid #1f77b4; background: #eef5fb; padding: 6px 10px; margin: 4px 0;
  font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px}
.al-expected-error {border-color: #a05a00; background: #fff4e5}
.al-expected-error pre {margin: 4px 0 0 0; white-space: pre-wrap}
.al-hidden-source > summary {cursor: pointer; color: #1f77b4; padding: 4px 0 4px 8px;
  font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px}
.al-handout-nav {font-family: var(--jp-ui-font-family, sans-serif); margin: 8px 0 16px 0}
</style>
"""


def _link_to_html(text: str) -> str:
    return LINK.sub(lambda m: f"]({m.group(2)}.html{m.group(3) or ''})", text)


def _format_set(values: dict) -> str:
    return ", ".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in values.items())


MATH_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
MATH_INLINE = re.compile(r"(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def math_svg(tex: str, display: bool = False) -> str | None:
    """A LaTeX formula as an inline SVG <img> drawn by matplotlib's mathtext; None when mathtext cannot."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import math_to_image

    rcParams["svg.hashsalt"] = "autograd-lab"  # the same page every time
    buf = io.BytesIO()
    try:
        depth = math_to_image(f"${tex.strip()}$", buf, prop=FontProperties(size=13 if display else 11), dpi=72, format="svg")
    except Exception:  # mathtext knows a subset of LaTeX: leave the formula to MathJax
        return None
    svg = re.sub(r"<metadata>.*?</metadata>", "", buf.getvalue().decode(), flags=re.S)
    data = base64.b64encode(svg.encode()).decode()
    style = "display:block;margin:0.5em auto" if display else f"vertical-align:-{depth:.1f}pt"
    return f'<img class="al-math" alt="{html.escape(tex.strip())}" style="{style}" src="data:image/svg+xml;base64,{data}">'


def render_math(markdown: str) -> tuple[str, bool]:
    """Replace the $...$ and $$...$$ formulas of a markdown text (outside code) by SVG images.

    Returns the text and whether a formula is left for MathJax."""
    left = False

    def swap(display):
        def repl(m):
            nonlocal left
            img = math_svg(m.group(1), display)
            if img is None:
                left = True
                return m.group(0)
            return img

        return repl

    def in_text(text):
        out, pos = [], 0
        for m in CODE_SPAN.finditer(text):
            out.append(MATH_INLINE.sub(swap(False), MATH_DISPLAY.sub(swap(True), text[pos : m.start()])))
            out.append(m.group(0))
            pos = m.end()
        out.append(MATH_INLINE.sub(swap(False), MATH_DISPLAY.sub(swap(True), text[pos:])))
        return "".join(out)

    blocks, fenced, chunk = [], False, []
    for line in markdown.split("\n"):
        if FENCE.match(line):
            blocks.append((fenced, "\n".join(chunk)))
            chunk, fenced = [], not fenced
            blocks.append((True, line))
            continue
        chunk.append(line)
    blocks.append((fenced, "\n".join(chunk)))
    text = "\n".join(part if code else in_text(part) for code, part in blocks if part is not None)
    return text, left


def handout_notebook(nb):
    """The notebook as a handout shows it: widgets through their twins, expected errors labelled,
    links to the other notebooks pointing at their pages, maths drawn as SVG.

    Returns (notebook, whether some formula still needs MathJax)."""
    nb = copy.deepcopy(nb)
    needs_mathjax = False
    nb.cells = [c for c in nb.cells if not is_test_cell(c)]  # grader plumbing, without output
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text, left = render_math(_link_to_html(_src(cell)))
            cell.source, needs_mathjax = text, needs_mathjax or left
            continue
        if cell.cell_type != "code":
            continue
        cell.source = re.sub(r"^# NBVAL_\w+[ \t]*\n?", "", _src(cell), flags=re.M)  # nbval's markers: test plumbing
        if is_solution_cell(cell):
            cell.metadata["al_handout"] = "solution"  # the page folds it under "Worked solution"
        if is_widget_cell(cell):
            meta = cell.metadata["autograd_lab"]
            note = (
                '<div class="al-widget-note"><b>Live widget.</b> In a running notebook these controls redraw the output. '
                f"Here, without a kernel, the next code cell shows what the widget shows at "
                f"<code>{html.escape(_format_set(meta.get('set', {})))}</code>.</div>"
            )
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": note})]
            continue
        outputs = []
        for out in cell.get("outputs", []):
            if out.output_type == "error" and "raises-exception" in cell.metadata.get("tags", []):
                msg = f"{out.ename}: {out.evalue}"
                block = (
                    '<div class="al-expected-error"><b>This cell raises an error on purpose</b> '
                    f"(the text explains why):<pre>{html.escape(msg)}</pre></div>"
                )
                outputs.append(nbformat.v4.new_output("display_data", data={"text/html": block}))
            elif out.output_type in ("display_data", "execute_result") and WIDGET_MIME in out.get("data", {}):
                continue
            else:
                outputs.append(out)
        cell.outputs = outputs
    return nb, needs_mathjax


def notebook_title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in _src(cell).splitlines():
                m = re.match(r"^#\s+(.*)", line)
                if m:
                    return re.sub(r"[`*_]", "", m.group(1)).strip()
    return fallback


def render_handout(path: Path, nav: str) -> str:
    from nbconvert import HTMLExporter

    nb, needs_mathjax = handout_notebook(nbformat.read(path, as_version=4))
    exporter = HTMLExporter(
        template_name="handout", extra_template_basedirs=[str(KIT)], theme="light", embed_images=True
    )
    resources = {"metadata": {"name": notebook_title(nb, path.stem)}, "needs_mathjax": needs_mathjax}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    body = body.replace("</head>", HANDOUT_CSS + "</head>", 1)
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1)
    return body


def handouts(notebooks: list[Path], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    pages, rows = [], []
    for i, path in enumerate(notebooks):
        nb = nbformat.read(path, as_version=4)
        title = notebook_title(nb, path.stem)
        links = ['<a href="index.html">Contents</a>']
        if i > 0:
            links.append(f'<a href="{notebooks[i - 1].stem}.html">Previous</a>')
        if i + 1 < len(notebooks):
            links.append(f'<a href="{notebooks[i + 1].stem}.html">Next</a>')
        nav = f'<nav class="al-handout-nav">{" | ".join(links)}</nav>'
        page = out / f"{path.stem}.html"
        page.write_text(render_handout(path, nav))
        pages.append(page)
        rows.append(f'<li><a href="{page.name}">{html.escape(title)}</a></li>')
    index = out / "index.html"
    index.write_text(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Autograd Lab: handouts</title>"
        "<style>body{font-family:sans-serif;max-width:46em;margin:2em auto;line-height:1.5}</style></head><body>\n"
        "<h1>Autograd Lab: handouts</h1>\n<p>Every notebook of the course as it looks after running, one page each. "
        "The pages need no kernel; to change code and move the widgets, open the notebooks in JupyterLab "
        "(see the course's README).</p>\n<ol start=\"0\">\n" + "\n".join(rows) + "\n</ol>\n</body></html>\n"
    )
    return [index, *pages]


# ------------------------------------------------------------------------------------------------- CLI


def _paths(names: list[str]) -> list[Path]:
    paths = [Path(n) for n in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    return sorted(paths, key=lambda p: p.name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("annotate", help="add nbgrader and slide metadata to the notebooks (idempotent)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not annotated")
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("student", help="the student release of every notebook (nbgrader generate_assignment)")
    p.add_argument("--course", type=Path, default=BUILD / "nbgrader", help="the nbgrader course directory")
    p.add_argument("--out", type=Path, default=BUILD / "student", help="where the release notebooks go, flat")
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("handouts", help="every executed notebook as a self-contained HTML page, with a contents page")
    p.add_argument("--out", type=Path, default=BUILD / "handouts")
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("nbgrader", help="run an nbgrader command in the course directory (e.g. autograde NB)")
    p.add_argument("--course", type=Path, default=BUILD / "nbgrader")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "nbgrader":
        if not (args.course / "nbgrader_config.py").exists():
            raise SystemExit(f"no nbgrader course in {args.course}: run `make student` first")
        cmd = [sys.executable, "-m", "nbgrader", *args.args]
        return subprocess.call(cmd, cwd=args.course, env=_env())
    paths = _paths(args.notebooks)
    try:
        if args.cmd == "annotate":
            changed = [p for p in paths if annotate_file(p, check=args.check)]
            for p in changed:
                print(f"{p}: {'not annotated: run tools/classroom.py annotate' if args.check else 'annotated'}")
            if args.check:
                return 1 if changed else 0
            if changed:
                print("now re-execute them: make notebooks")
        elif args.cmd == "student":
            for p in generate(paths, args.course.resolve(), args.out.resolve()):
                print(f"student release: {p.relative_to(REPO) if p.is_relative_to(REPO) else p}")
        elif args.cmd == "handouts":
            for p in handouts(paths, args.out.resolve()):
                print(f"handout: {p.relative_to(REPO) if p.is_relative_to(REPO) else p}")
    except ClassroomError as err:
        print(f"classroom: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
