"""Every notebook is stored the way the course promises: executed in order, clean, navigable, and with
nothing in the learner's view that only the tests need.

- no nbval marker comment in any source (nbval reads cell tags: ``nbval-ignore-output``,
  ``raises-exception``, ``nbval-skip``); no nbgrader metadata (the classroom kit derives it);
- no stored output shows an exercise's "Correct" feedback: the solutions are one deliberate step away;
- every exercise is an answer cell followed by its reveal cell, which loads a solution file in
  ``notebooks/solutions/`` ending with the same check call (tools/classroom reads that layout), and
  every solution file belongs to an exercise;
- a cell that only asserts is tagged ``check`` and collapsed; no visible cell is assert-only; a ``check``
  cell shows nothing;
- ``%xmode`` (how Jupyter prints errors) is set, if at all, once in the setup cells, where it is explained.
"""

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
ADDRESS = re.compile(r"object at 0x[0-9a-fA-F]+|\bat 0x[0-9a-fA-F]{6,}")
MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/)")
NBVAL_COMMENT = re.compile(r"^\s*#\s*(NBVAL_|PYTEST_VALIDATE_)", re.M)
IGNORE_TAG = "nbval-ignore-output"
SETUP_CELLS = ("setup", "imports")

from tools import classroom  # noqa: E402 (the repository root is on sys.path: conftest.py)


def cells(path):
    return json.loads(path.read_text())["cells"]


def source(cell) -> str:
    return "".join(cell["source"])


def tags(cell) -> list:
    return cell["metadata"].get("tags", [])


def only_asserts(code: str) -> bool:
    """True when every statement of the cell is an assert (or a loop/branch/with holding only asserts)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:  # an IPython magic: not an assert-only cell
        return False

    def holds_only_asserts(s):
        if isinstance(s, ast.Assert):
            return True
        nested = isinstance(s, (ast.For, ast.If, ast.With)) and asserts(s.body)
        return nested and (not getattr(s, "orelse", None) or asserts(s.orelse))

    def asserts(stmts):
        return bool(stmts) and all(holds_only_asserts(s) for s in stmts)

    return asserts(body)


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_start_here.ipynb"


def test_the_notebooks_folder_holds_only_notebooks_and_solutions():
    """A notebook writes its scripts into a temporary folder: a file it left here would ship to every learner."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=NOTEBOOKS[0].parents[1], capture_output=True,
                             text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    strays = [f for f in tracked if not (f.endswith(".ipynb") or f.startswith("notebooks/solutions/"))]
    assert not strays, f"files in notebooks/ that are neither notebooks nor solutions: {strays}"


def test_only_asserts_tells_checks_from_teaching():
    assert only_asserts("# why\nassert a\nfor x in y:\n    assert x")
    assert not only_asserts("assert a\nprint(a)") and not only_asserts("x = 1") and not only_asserts("%xmode Minimal")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_top_to_bottom_in_one_fresh_kernel(path):
    counts = [c["execution_count"] for c in cells(path) if c["cell_type"] == "code" and source(c).strip()]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: re-run `make notebooks NB={path}`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stale_widget_state_no_errors_no_addresses_no_paths(path):
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], "stored widget state: re-run `make notebooks`"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                assert "raises-exception" in tags(cell), (
                    f"{path.name} cell {i}: error output, not tagged raises-exception"
                )
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            text += "".join(out.get("traceback", []))
            if IGNORE_TAG not in tags(cell):
                assert not ADDRESS.search(text), f"{path.name} cell {i}: a memory address in a checked output"
            assert not MACHINE_PATH.search(text), f"{path.name} cell {i}: a machine path in an output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_widget_has_a_checked_twin(path):
    by_id = {c.get("id"): c for c in cells(path)}
    for cell in cells(path):
        meta = cell["metadata"].get("autograd_lab")
        if not meta:
            continue
        assert IGNORE_TAG in tags(cell), f"{path.name}: widget cell {cell['id']} must carry the tag {IGNORE_TAG}"
        twin = by_id.get(meta["twin"])
        assert twin is not None, f"{path.name}: widget cell {cell['id']} names a missing twin {meta['twin']}"
        assert IGNORE_TAG not in tags(twin), f"{path.name}: twin {meta['twin']} must be checked by nbval"
        assert twin.get("outputs"), f"{path.name}: twin {meta['twin']} has no stored output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_test_scaffolding_in_the_learners_view(path):
    for cell in cells(path):
        where = f"{path.name} cell {cell.get('id')!r}"
        assert "nbgrader" not in cell["metadata"], f"{where}: nbgrader metadata (the classroom kit derives it)"
        if cell["cell_type"] != "code":
            continue
        code = source(cell)
        assert not NBVAL_COMMENT.search(code), f"{where}: an nbval comment; use the cell tag instead"
        if "%xmode" in code:
            assert cell.get("id") in SETUP_CELLS, f"{where}: a traceback-mode switch in the learner's flow"
        outputs = json.dumps(cell.get("outputs", []))
        assert "al-correct" not in outputs and '"Correct: ' not in outputs, f"{where}: shows an exercise's solution"
        hidden = cell["metadata"].get("jupyter", {}).get("source_hidden", False)
        if only_asserts(code):
            assert hidden and "check" in tags(cell), f"{where}: an assert-only cell must be tagged check and collapsed"
        if "check" in tags(cell):
            assert hidden and not cell.get("outputs"), f"{where}: a check cell is collapsed and shows nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_its_reveal_cell_and_solution_file(path):
    nb = nbformat.read(path, as_version=4)
    problems = classroom.structure_problems(nb, path.parent, path.name)
    assert not problems, "\n".join(problems)
    for ex in classroom.exercises(nb, path.parent, path.name):
        answer = next(c for c in nb.cells if c.get("id") == ex.solution_id)
        shown = "".join("".join(o.get("data", {}).get("text/plain", "")) for o in answer.outputs)
        assert shown.startswith("Your turn"), f"{path.name} {ex.solution_id}: the stored feedback is not 'Your turn'"


def test_every_solution_file_belongs_to_an_exercise():
    used = set()
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        used |= {ex.solution_file.resolve() for ex in classroom.exercises(nb, path.parent, path.name)}
    files = {p.resolve() for p in (NOTEBOOK_DIR / "solutions").glob("*")}
    assert files == used, f"orphan solution files: {sorted(p.name for p in files - used)}"
    for f in files:
        assert re.fullmatch(r"\d\d_\w+\.py", f.name), f"{f.name}: solution files are named NN_<short>.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_to_course_map_and_between_notebooks_resolve(path):
    text = "".join(source(c) for c in cells(path) if c["cell_type"] == "markdown")
    for target in re.findall(r"\]\(([^)#\s]+\.ipynb)", text):
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"
    if path.name != "00_start_here.ipynb":
        assert "00_start_here.ipynb" in text, f"{path.name}: link back to the course map"


# What VS Code, Colab and GitHub show: every cell, collapsed or not. Read that way, a notebook holds only what
# teaches: no assert (a fact worth guarding is a printed line nbval compares, or a test in tests/), and no word
# about the course's own machinery.
MACHINERY = re.compile(
    r"\b(nbval|pytest|CI|make (?:bench|test|notebooks)|unit tests?|test suite|stored outputs?|TIMING_CLAIMS|"
    r"hidden checks?|check cells?|regression checks?)\b|tests/"
)


def assert_lines(code: str) -> list:
    """The line numbers of every assert statement in a cell, nested ones included (IPython magics skipped)."""
    kept = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    try:
        tree = ast.parse(kept)
    except SyntaxError:
        return [i + 1 for i, line in enumerate(code.splitlines()) if re.match(r"\s*assert\b", line)]
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert))


def test_assert_lines_finds_nested_asserts_and_skips_magics():
    assert assert_lines("%load x.py\nfor i in range(2):\n    assert i < 2\nx = 'assert'") == [3]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_read_as_plain_cells_nothing_is_there_only_for_the_tests(path):
    problems = []
    for cell in cells(path):
        where = f"cell {cell.get('id')!r}"
        text = source(cell)
        if "check" in tags(cell):
            problems.append(f"{where}: a cell tagged check (collapsed cells show in VS Code, Colab and GitHub)")
        if cell["cell_type"] == "code" and assert_lines(text):
            problems.append(f"{where}: assert on line(s) {assert_lines(text)}")
        for match in MACHINERY.finditer(text):
            problems.append(f"{where}: names the course's machinery ({match.group(0)!r})")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems[:40])


EXERCISE_HEADING = re.compile(r"^(#{2,4}\s+\S|\*\*Exercise)", re.M)  # a heading, or a bold exercise title


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_heading_and_a_prompt_that_says_what_its_check_enforces(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for ex in classroom.exercises(nb, path.parent, path.name):
        at = next(i for i, c in enumerate(nb.cells) if c.get("id") == ex.solution_id)
        above = []  # the markdown back to the exercise's heading (a cell that prints the task may stand between)
        for cell in reversed(nb.cells[:at]):
            if cell.cell_type == "code" and ("ex.check_" in cell.source or "solution-reveal" in tags(cell)):
                break
            if cell.cell_type == "markdown":
                above.insert(0, cell.source)
                if EXERCISE_HEADING.search(cell.source):
                    break
        prompt = "\n".join(above)
        where = f"the exercise of cell {ex.solution_id!r}"
        words = len(re.sub(r"^#.*$", "", prompt, flags=re.M).split())
        if not EXERCISE_HEADING.search(prompt):
            problems.append(f"{where}: no heading in the markdown right above it")
        elif words < 20:
            problems.append(f"{where}: a prompt of {words} words; say what to do and what the check enforces")
        elif not re.search(r"\bcheck", prompt, re.I):
            problems.append(f"{where}: the prompt never says what the check runs or enforces")
    assert not problems, f"{path.name}: " + "; ".join(problems)
