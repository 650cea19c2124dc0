"""The classroom kit: nbgrader assignments, slides and HTML handouts from the course notebooks.

Run from the repository root with the course's Python (``.venv/bin/python -m tools classroom ...``):

    annotate NOTEBOOK...          add the slide metadata to the notebooks, in place (idempotent)
    annotate --check NOTEBOOK...  change nothing; exit 1 and name every notebook that is not annotated or
                                  whose exercises are not laid out as below
    student NOTEBOOK...           the student release (nbgrader generate_assignment) -> build/student/,
                                  the nbgrader course it comes from (source, release, gradebook) -> build/nbgrader/
    handouts NOTEBOOK...          each executed notebook as one self-contained HTML page -> build/handouts/,
                                  with a contents page, index.html
    nbgrader ARGS...              any nbgrader command, run in the course (build/nbgrader) with this
                                  environment's tools on PATH, e.g. `nbgrader autograde 01_leaf_tensors`

One source for the learner and the class

* An exercise in a committed notebook is two code cells after its prompt. The *answer cell* ends with the
  check call (``answer = ...`` then ``ex.check_leaves(answer)``); its stored output is the "Your turn"
  feedback. The *reveal cell* right after it (tag ``solution-reveal``) is two comment lines, the second
  ``# %load solutions/01_leaves.py``: uncommented and run, IPython replaces the cell with that file, the
  worked solution (``notebooks/solutions/``), which ends with the same check call. *Run All* therefore
  never shows a solution nor overwrites the learner's answer.
* The nbgrader *source* notebook is derived (``source_notebook``): the answer cell becomes the solution
  cell (its lines before the check call, then the solution file between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION``, then the check call), the reveal cell gives way to a locked autograder *test* cell
  (id ``<answer cell id>-test``, 1 point) that makes the very same call raise the learner's feedback:
  ``_autograded = ex.check_leaves(answer).assert_passed()`` (an assignment: it shows nothing when it passes;
  a trailing ``;`` would not, under nbval, which runs cells outside IPython's history). Grading and the
  feedback a learner reads therefore cannot disagree.
* Cells that only hold checks for CI carry the tag ``check``; ``annotate`` keeps their source collapsed.
* Slides (``slideshow.slide_type``, presented live by jupyterlab-slideshow): one idea per slide. A
  markdown cell with a level 1-2 heading starts a slide, a deeper heading a sub-slide (reached by "down",
  or by space). Within a section, prose that follows code starts a sub-slide (the next step of the
  argument), except a short closing remark (at most 3 lines, last in its section), which stays with the
  output it interprets; a code cell after code starts one when the slide already holds about 30 source
  lines. A widget cell gets a sub-slide of its own, and so does what follows it (the same function called
  without the widget). Reveal, check and autograder cells are skipped. Everything else continues the slide
  before it and carries no ``slideshow`` metadata at all: nbconvert and jupyterlab-slideshow (the live
  slides) both read a missing slide type as "continue", while jupyterlab-slideshow 0.3.4 does not know
  nbformat's ``"-"`` and hides such a cell.
"""

from __future__ import annotations

import argparse
import ast
import copy
import html
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

KIT = Path(__file__).resolve().parent  # this package: the code, nbgrader_config.py and the handout template
REPO = KIT.parents[1]
BUILD = REPO / "build"

BEGIN, END = "BEGIN SOLUTION", "END SOLUTION"  # nbgrader's delimiters (ClearSolutions matches them anywhere in a line)
TEST_MARK = "# Autograder test"
TEST_SOURCE = (
    TEST_MARK + " (nbgrader, locked): the check above must pass; when it fails, its hint is the feedback.\n"
    "_autograded = {call}.assert_passed()"
)
REVEAL_TAG = "solution-reveal"
CHECK_TAG = "check"  # a cell that only holds checks for CI: collapsed, skipped in slides
REVEAL_SOURCE = (  # one line of instructions, short enough for a projector, then the line to uncomment
    '# Worked solution: after trying, delete the "# " before %load and run: the cell fills with it. '
    'Run again to check.\n'
    "# %load {path}"
)
LOAD_LINE = re.compile(r"^#\s*%load\s+(\S+\.py)\s*$", re.M)
CHECK_CALL = re.compile(r"^\w+\.check_\w+\(.*\)$")  # the last line of an answer cell: ex.check_leaves(answer)
DEFAULT_POINTS = 1
SCHEMA = 3
CONTINUE = "-"  # nbformat's name for "continue the slide before"; annotate writes it as no metadata
LINES_PER_SLIDE = 30  # source lines; outputs come on top, and tall slides scroll
HEADING = re.compile(r"^(#{1,6})\s+\S")
FENCE = re.compile(r"^\s*(```|~~~)")


class ClassroomError(Exception):
    """A notebook the kit cannot use as it stands (the message says which cell and why)."""


# ----------------------------------------------------------------------------------------------- exercises


@dataclass
class Exercise:
    solution_id: str  # the answer cell's id: in the nbgrader source it is the solution cell
    test_id: str
    check_call: str  # the answer cell's last line, e.g. "ex.check_leaves(answer)"
    answer_name: str | None  # the variable the check reads ("answer"), when it is a plain name
    scaffold: str  # the answer cell's lines before the check call (what the learner starts from)
    solution_file: Path
    region: str  # the worked solution: the solution file without its final check call


def _src(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def _tags(cell) -> list:
    return cell.metadata.get("tags", [])


def _last_line(source: str) -> str:
    lines = [line for line in source.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def is_answer_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.match(_last_line(_src(cell))))


def is_reveal_cell(cell) -> bool:
    return cell.cell_type == "code" and REVEAL_TAG in _tags(cell)


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and CHECK_TAG in _tags(cell)


def is_solution_cell(cell) -> bool:
    """A cell with nbgrader's solution delimiters: in a derived source notebook, never in a committed one."""
    return cell.cell_type == "code" and BEGIN in _src(cell)


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and _src(cell).startswith(TEST_MARK)


def is_widget_cell(cell) -> bool:
    meta = cell.metadata.get("autograd_lab")
    return cell.cell_type == "code" and isinstance(meta, dict) and "twin" in meta


def reveal_source(solution: str) -> str:
    """The reveal cell for a solution file named relative to the notebook, e.g. 'solutions/01_leaves.py'."""
    return REVEAL_SOURCE.format(path=solution)


def _answer_name(call: str) -> str | None:
    node = ast.parse(call, mode="eval").body
    first = node.args[0] if isinstance(node, ast.Call) and node.args else None
    return first.id if isinstance(first, ast.Name) else None


def exercise_of(answer, reveal, root: Path, where: str = "") -> Exercise:
    """Read one exercise: its answer cell, its reveal cell and the solution file that cell loads."""
    where = f"{where} cell {answer.get('id')!r}"
    if reveal is None or not is_reveal_cell(reveal):
        raise ClassroomError(f"{where}: an answer cell must be followed by its reveal cell (tag {REVEAL_TAG!r})")
    load = LOAD_LINE.search(_src(reveal))
    if load is None or _src(reveal).strip() != reveal_source(load.group(1)):
        raise ClassroomError(
            f"{where}: its reveal cell must read exactly {reveal_source('solutions/NN_x.py')!r} "
            "(tools/classroom annotate rewrites a reveal cell with a %load line into that form)"
        )
    path = root / load.group(1)
    if not path.is_file():
        raise ClassroomError(f"{where}: its reveal cell loads {load.group(1)}, which does not exist")
    call = _last_line(_src(answer))
    solution = path.read_text().rstrip()
    if _last_line(solution) != call:
        raise ClassroomError(f"{where}: {load.group(1)} must end with the answer cell's check call {call!r}")
    if not answer.get("id"):
        raise ClassroomError(f"{where}: cells need ids (nbformat 4.5); re-save the notebook with nbformat >= 5.1")
    scaffold = _src(answer).rstrip()[: -len(call)].rstrip()
    region = solution[: -len(call)].rstrip()
    return Exercise(answer.id, f"{answer.id}-test", call, _answer_name(call), scaffold, path, region)


def exercises(nb, root: Path, where: str = "") -> list[Exercise]:
    """The exercises of a committed notebook whose solution files lie under ``root`` (its folder)."""
    cells = nb.cells
    return [
        exercise_of(cell, cells[i + 1] if i + 1 < len(cells) else None, root, where)
        for i, cell in enumerate(cells)
        if is_answer_cell(cell)
    ]


def structure_problems(nb, root: Path, where: str = "notebook") -> list[str]:
    """What keeps a committed notebook from the layout above (empty when it follows it)."""
    problems = []
    for i, cell in enumerate(nb.cells):
        before = nb.cells[i - 1] if i else None
        if is_reveal_cell(cell) and (before is None or not is_answer_cell(before)):
            problems.append(f"{where} cell {cell.get('id')!r}: a reveal cell must follow an answer cell")
        if is_solution_cell(cell) or is_test_cell(cell) or "nbgrader" in cell.metadata:
            problems.append(f"{where} cell {cell.get('id')!r}: nbgrader cells belong in the derived source only")
        if cell.cell_type == "markdown" and (BEGIN in _src(cell) or END in _src(cell)):
            problems.append(
                f"{where} cell {cell.get('id')!r}: markdown mentions '{BEGIN}'/'{END}', which nbgrader "
                "would take for a solution region; reword it"
            )
    try:
        exercises(nb, root, where)
    except ClassroomError as err:
        problems.append(str(err))
    return problems


def _solution_meta(grade_id: str) -> dict:
    return {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA, "solution": True,
            "task": False}


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


def _skipped(cell) -> bool:
    return is_reveal_cell(cell) or is_check_cell(cell) or is_test_cell(cell)


def slide_types(cells) -> list[str]:
    types = []
    new_sub = False  # the previous cell asks the next one to start a sub-slide
    lines = 0  # source lines on the current (sub-)slide so far
    prev = None  # the last cell shown in the slides
    for i, cell in enumerate(cells):
        if i and _skipped(cell):
            types.append("skip")
            continue
        level = _heading_level(_src(cell)) if cell.cell_type == "markdown" else None
        height = len(_src(cell).strip().splitlines()) + 1
        if i == 0 or (level is not None and level <= 2):
            kind = "slide"
        elif level is not None:
            kind = "subslide"
        elif is_widget_cell(cell) or new_sub:
            kind = "subslide"
        elif cell.cell_type == "markdown" and prev.cell_type == "code" and not _closing_remark(cells, i):
            kind = "subslide"  # new prose after code: the next step of the argument
        elif cell.cell_type == "code" and prev.cell_type == "code" and lines + height > LINES_PER_SLIDE:
            kind = "subslide"  # a long run of code: the projector shows about this many lines
        else:
            kind = CONTINUE
        types.append(kind)
        lines = height if kind in ("slide", "subslide") else lines + height
        new_sub = is_widget_cell(cell) or _is_twin(cells, cell)
        prev = cell
    return types


def _closing_remark(cells, i) -> bool:
    """A short markdown cell that ends its section: it stays with the output it interprets."""
    nxt = next((c for c in cells[i + 1 :] if not _skipped(c)), None)
    ends = nxt is None or (nxt.cell_type == "markdown" and _heading_level(_src(nxt)) is not None)
    return ends and len(_src(cells[i]).strip().splitlines()) <= 3


def _is_twin(cells, cell) -> bool:
    return any(is_widget_cell(c) and c.metadata["autograd_lab"].get("twin") == cell.get("id") for c in cells)


# -------------------------------------------------------------------------------------------- annotate


def annotate(nb, where: str = "notebook") -> None:
    """Add the slide metadata to a committed notebook in place, collapse its check cells and word its
    reveal cells the one way (REVEAL_SOURCE)."""
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if is_check_cell(cell):
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        load = LOAD_LINE.search(_src(cell)) if is_reveal_cell(cell) else None
        if load:
            cell.source = reveal_source(load.group(1))
    for cell, kind in zip(nb.cells, slide_types(nb.cells)):
        if kind == CONTINUE:
            cell.metadata.pop("slideshow", None)
        else:
            cell.metadata["slideshow"] = {"slide_type": kind}
    nb.metadata.pop("rise", None)  # settings of jupyterlab-rise, which the course no longer uses


def annotate_file(path: Path, check: bool = False) -> list[str]:
    """Annotate one notebook file; return what is (with check=True: would be) wrong with it, empty when nothing."""
    before = path.read_text()
    nb = nbformat.reads(before, as_version=4)
    annotate(nb, path.name)
    after = nbformat.writes(nb) + "\n"
    problems = structure_problems(nb, path.parent, path.name)
    if after.rstrip("\n") != before.rstrip("\n"):
        if check:
            problems.insert(0, f"{path}: not annotated: run tools/classroom annotate {path}")
        else:
            nbformat.validate(nb)
            nbformat.write(nb, path)
    return problems


def source_notebook(nb, root: Path, where: str = "notebook"):
    """The nbgrader source of a committed notebook: answers as solution cells, reveal cells as locked tests."""
    nb = copy.deepcopy(nb)
    annotate(nb, where)
    found = {ex.solution_id: ex for ex in exercises(nb, root, where)}
    cells = []
    for cell in nb.cells:
        if is_reveal_cell(cell):
            continue
        cells.append(cell)
        ex = found.get(cell.get("id"))
        if ex is None:
            continue
        parts = [ex.scaffold, f"### {BEGIN}", ex.region, f"### {END}", ex.check_call]
        cell.source = "\n".join(p for p in parts if p)
        cell.metadata["nbgrader"] = _solution_meta(ex.solution_id)
        test = nbformat.v4.new_code_cell(TEST_SOURCE.format(call=ex.check_call))
        test.id = ex.test_id
        test.metadata["nbgrader"] = _test_meta(ex.test_id, DEFAULT_POINTS)
        test.metadata["slideshow"] = {"slide_type": "skip"}
        cells.append(test)
    ids = [c.get("id") for c in cells]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ClassroomError(f"{where}: duplicate cell ids {dup} (a test id is <answer cell id>-test)")
    nb.cells = cells
    return nb

# --------------------------------------------------------------------------------------------- student


def _env() -> dict:
    """nbgrader runs `alembic` (the gradebook's migrations) from PATH: put this environment's scripts first."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


NBGRADER_TIMEOUT_S = 1200  # a whole course autograded on a slow laptop takes a few minutes


def nbgrader(args: list[str], course: Path, quiet: bool = True,
             timeout_s: float = NBGRADER_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory (where it reads nbgrader_config.py)."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    if quiet:
        cmd.append("--log-level=WARN")
    try:
        proc = subprocess.run(cmd, cwd=course, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        out = [o.decode(errors="replace") if isinstance(o, bytes) else (o or "") for o in (err.stdout, err.stderr)]
        raise ClassroomError(f"nbgrader {' '.join(args)} did not finish within {timeout_s:g} s and was stopped; "
                             f"its last output:\n{out[0][-2000:]}\n{out[1][-2000:]}") from None
    if proc.returncode != 0:
        raise ClassroomError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def code_stub(config: Path = KIT / "nbgrader_config.py") -> str:
    """The text that replaces a worked solution in the release (ClearSolutions.code_stub of our config)."""
    from traitlets.config import Config

    c = Config()
    exec(compile(config.read_text(), str(config), "exec"), {"get_config": lambda: c, "__file__": str(config)})
    return c.ClearSolutions.code_stub["python"]


def assignment_id(path: Path) -> str:
    return path.stem


def setup_course(notebooks: list[Path], course: Path) -> list[str]:
    """An nbgrader course directory with one assignment per notebook, its source derived (source_notebook)."""
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(
        "# The course's nbgrader settings, read from the repository (written by tools/classroom).\n"
        f"load_subconfig({str(KIT / 'nbgrader_config.py')!r})  # noqa: F821 (traitlets provides it)\n"
    )
    ids = []
    for path in notebooks:
        nb = source_notebook(nbformat.read(path, as_version=4), path.parent, path.name)
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
.al-widget-note, .al-expected-error {border-left: 4px solid #1f77b4; background: #eef5fb; padding: 6px 10px;
  margin: 4px 0; font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px}
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
        size = FontProperties(size=13 if display else 11)
        one_line = " ".join(tex.split())  # mathtext reads one line; a display formula is often written on several
        depth = math_to_image(f"${one_line}$", buf, prop=size, dpi=72, format="svg")
    except Exception:  # mathtext knows a subset of LaTeX: leave the formula to MathJax
        return None
    svg = re.sub(r"<metadata>.*?</metadata>", "", buf.getvalue().decode(), flags=re.S)
    data = base64.b64encode(svg.encode()).decode()
    style = "display:block;margin:0.5em auto" if display else f"vertical-align:-{depth:.1f}pt"
    alt = html.escape(tex.strip())
    return f'<img class="al-math" alt="{alt}" style="{style}" src="data:image/svg+xml;base64,{data}">'


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


def handout_notebook(nb, root: Path):
    """The notebook as a handout shows it: check cells left out, worked solutions folded in from their files,
    widgets through their fixed-input calls, expected errors labelled, links to the other notebooks pointing
    at their pages, maths drawn as SVG.

    Returns (notebook, whether some formula still needs MathJax)."""
    nb = copy.deepcopy(nb)
    needs_mathjax = False
    solutions = {ex.solution_id: ex for ex in exercises(nb, root)}
    nb.cells = [c for c in nb.cells if not is_check_cell(c)]  # CI's checks: no output, nothing to read
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text, left = render_math(_link_to_html(_src(cell)))
            cell.source, needs_mathjax = text, needs_mathjax or left
        elif is_reveal_cell(cell):
            ex = solutions[nb.cells[i - 1].get("id")]
            cell.source = ex.solution_file.read_text().rstrip()
            cell.metadata["al_handout"] = "solution"  # the page folds it under "Worked solution"
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            cell.outputs = []
        elif cell.cell_type == "code":
            cell.outputs = _handout_outputs(cell)
    return nb, needs_mathjax


def _handout_outputs(cell) -> list:
    if is_widget_cell(cell):
        meta = cell.metadata["autograd_lab"]
        note = (
            '<div class="al-widget-note"><b>Live widget.</b> In a running notebook these controls redraw the output. '
            f"Here, without a kernel, the next code cell shows what the widget shows at "
            f"<code>{html.escape(_format_set(meta.get('set', {})))}</code>.</div>"
        )
        return [nbformat.v4.new_output("display_data", data={"text/html": note})]
    outputs = []
    for out in cell.get("outputs", []):
        if out.output_type == "error" and "raises-exception" in _tags(cell):
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
    return outputs


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

    nb, needs_mathjax = handout_notebook(nbformat.read(path, as_version=4), path.parent)
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
    p = sub.add_parser("annotate", help="add the slide metadata to the notebooks (idempotent)")
    p.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a notebook is not annotated or not laid out"
    )
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
            problems = [line for p in paths for line in annotate_file(p, check=args.check)]
            for line in problems:
                print(line)
            return 1 if problems else 0
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
