"""Every notebook runs, renders and answers its widgets in real JupyterLab, in headless Chromium, in the
learner's own copy.

The copy is made by the course's own command (``make lab``, ``autograd_lab.course``) in the test server's root,
and each notebook is opened from there, as a learner meets it. For each notebook in notebooks/ (discovered, not
listed):

- before anything runs, no code cell shows an output or an execution count: a prediction is made unseen;
- Run All Cells in the kernel its session started, then, once the kernel is idle: no error output, except in
  cells tagged ``raises-exception``; every code cell ran; every widget view is drawn (no "Error displaying
  widget"); every graph (an ``image/svg+xml`` output) is drawn as a loaded image, and every cell whose
  committed output holds a graph produces one;
- every widget cell (cell metadata ``{"autograd_lab": {"twin": <cell id>, "set": {<control>: value}}}``):
  its output differs from its twin's at first; after each control named in ``set`` is operated
  like a learner would (slider readout typed, checkbox clicked, option selected, button clicked),
  the widget's output text equals the twin cell's output text;
- every kind of control present in the notebook is operated at least once: a kind that no ``set``
  names is moved away and back, and the output must change and then return to what it was;
- saved by JupyterLab after the run, the notebook still reads as the course's version (``course.fingerprint``):
  running cells is not a change, so the next ``make lab`` may update it;
- the worked solutions that no cheaper test can run are revealed with real key presses (``reveal_solution``):
  each one of a notebook whose solutions read what its cells computed (tests/notebooks/test_reveal_cells.py
  runs every other solution alone, in one process), and the course's first. The reveal cell loads the solution
  from the copy's solutions/ and its check says "Correct";
- the notebook leaves no scratch folder in the copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

from autograd_lab import course
from tools.classroom.layout import exercises  # the repository root is on sys.path: conftest.py
from tools.classroom.names import standalone_runs

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = float(os.environ.get("AUTOGRAD_LAB_RUN_TIMEOUT", 300))  # run all, per notebook
WIDGET_TIMEOUT = float(os.environ.get("AUTOGRAD_LAB_WIDGET_TIMEOUT", 30))  # one widget reaching its twin
SVG = "image/svg+xml"
WIDGET = "application/vnd.jupyter.widget-view+json"


def _short(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " [...] " + text[-limit // 2 :]


def _where(cell: dict) -> str:
    first = next((line for line in cell["source"].splitlines() if line.strip()), "")
    return f"cell {cell['id']!r} (#{cell['index'] + 1}: {first.strip()[:60]!r})"


def _stored_graph_cells(path: Path) -> set[str]:
    nb = json.loads(path.read_text())
    return {
        cell.get("id", "")
        for cell in nb["cells"]
        if cell["cell_type"] == "code" and any(SVG in out.get("data", {}) for out in cell.get("outputs", []))
    }


def _first_difference(a: str, b: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at character {i}: widget ...{a[max(0, i - 40):i + 40]!r}... twin ...{b[max(0, i - 40):i + 40]!r}..."


def run_problems(cells: list[dict], stored_graphs: set[str], kernel_statuses: list[str]) -> list[str]:
    problems = []
    if "dead" in kernel_statuses or "autorestarting" in kernel_statuses:
        problems.append("the kernel died during Run All (out of memory? a crash in native code?)")
    for cell in cells:
        where = _where(cell)
        raises = "raises-exception" in cell["tags"]
        for out in cell["outputs"]:
            if out["type"] == "error" and not raises:
                problems.append(f"{where} raised {out['ename']}: {_short(out['evalue'] or '', 300)}")
            if SVG in out["mimes"] and out["shownAs"] != SVG:
                problems.append(f"{where}: a graph is shown as {out['shownAs']!r}, not as an SVG image")
            elif SVG in out["mimes"] and not out["imageLoaded"]:
                problems.append(f"{where}: a graph's SVG image did not load (not valid SVG?)")
            if WIDGET in out["mimes"] and (out["shownAs"] != "widget" or out["widgetError"]):
                problems.append(f"{where}: a widget is not drawn ({_short(out['shownAs'] or 'nothing', 200)})")
        if cell["livePanels"] and not cell["lab"]:
            problems.append(
                f"{where} draws a live() panel without autograd_lab metadata (twin, set): nothing checks its answers"
            )
        if cell["widgetError"]:
            problems.append(f"{where} shows 'Error displaying widget'")
        ran = cell["executionCount"] is not None
        if ran and cell["id"] in stored_graphs and not any(SVG in out["mimes"] for out in cell["outputs"]):
            problems.append(f"{where}: the stored notebook shows a graph here, the run produced none")
    not_run = [c for c in cells if c["executionCount"] is None and c["source"].strip()]
    if not_run:
        problems.append(
            f"{len(not_run)} code cell(s) did not run, from {_where(not_run[0])} on "
            "(a cell before it stopped Run All: an error, or the kernel died)"
        )
    return problems


def operate(lab, cell_id: str, control: dict, value):
    """Move one control to ``value`` the way a learner does, and wait until it shows it."""
    page = lab.page
    el = page.locator(f'[data-al-cell-id="{cell_id}"] .al-control').nth(control["index"])
    el.scroll_into_view_if_needed()
    kind = control["kind"]
    if kind == "slider":
        if control.get("editable"):  # the readout is editable: type the value, as a learner can
            readout = el.locator(".widget-readout")
            readout.fill(str(value))
            readout.press("Enter")
        else:  # no readout to type into: the keyboard on the handle, one step at a time
            handle = el.locator(".noUi-handle")
            handle.focus()
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not numeric:
                handle.press("Home")  # a selection slider: walk its options from the first
            for _ in range(1000):
                if lab.js("([c, i, v]) => window.alTest.controlShows(c, i, v)", [cell_id, control["index"], value]):
                    break
                now = lab.js("([c, i]) => window.alTest.controls(c)[i].number", [cell_id, control["index"]])
                handle.press("ArrowLeft" if numeric and now is not None and now > value else "ArrowRight")
    elif kind == "checkbox":
        el.locator("input[type=checkbox]").set_checked(bool(value))
    elif kind == "dropdown":
        el.locator("select").select_option(label=str(value))
    elif kind == "toggle-buttons":
        el.get_by_role("button", name=str(value), exact=True).click()
    elif kind == "radio":
        el.get_by_label(str(value), exact=True).check()
    elif kind == "toggle":
        if control["value"] != bool(value):
            el.click()
    elif kind == "button":
        clicks = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
        for _ in range(clicks):
            el.click()
    elif kind == "text":
        box = el.locator("input, textarea").first
        box.fill(str(value))
        box.press("Enter")
    else:
        raise AssertionError(f"control {control['name']!r} in cell {cell_id!r}: no way to operate a {kind!r} control")
    try:
        lab.wait(
            "([c, i, v]) => window.alTest.controlShows(c, i, v)",
            [cell_id, control["index"], value],
            timeout_s=WIDGET_TIMEOUT,
            what=f"control {control['name']!r} in cell {cell_id!r} to show {value!r}",
        )
    except AssertionError as err:
        now = lab.js("([c, i]) => window.alTest.controls(c)[i]", [cell_id, control["index"]])
        raise AssertionError(f"{err}; the control shows {now}") from None
    lab.operated[kind] = lab.operated.get(kind, 0) + 1


def another_value(control: dict):
    """A value different from the control's current one (to move it away and back)."""
    kind, current = control["kind"], control["value"]
    if kind == "slider" and control["number"] is not None:
        return control["min"] if control["number"] != control["min"] else control["max"]
    if kind in ("checkbox", "toggle"):
        return not current
    if kind in ("dropdown", "toggle-buttons", "radio"):
        return next((o for o in control["options"] if o != current), None)
    return None


def restore_value(control: dict):
    if control["kind"] == "slider" and control["number"] is not None:
        return control["number"]
    return control["value"]


def check_widget(lab, cell: dict, kinds_present: dict):
    cell_id = cell["id"]
    meta = cell["lab"]
    twin_id, wanted = meta.get("twin"), meta.get("set") or {}
    lab.focus_cell = cell_id
    where = _where(cell)
    assert twin_id and wanted, f"{where}: autograd_lab metadata needs 'twin' and a non-empty 'set', got {meta!r}"
    twin_text = lab.js("(id) => window.alTest.outputText(id)", twin_id)
    assert twin_text is not None, f"{where}: its twin cell {twin_id!r} is not in the notebook"
    assert twin_text, f"{where}: its twin cell {twin_id!r} has no output to compare with"
    state = lab.js("(id) => window.alTest.widgetState(id)", cell_id)
    assert state["panels"] >= 1, f"{where}: no live() panel (class al-live) was drawn"
    assert not state["problems"], f"{where}: the widget shows an error before any control moved:\n{state['problems'][0]}"
    assert state["text"] != twin_text, (
        f"{where}: the widget already shows its twin's output before any control moved, so the test cannot "
        f"tell that the controls work. Choose `set` values different from the initial ones, or check that "
        f"the function uses its parameters. Output: {_short(twin_text, 300)!r}"
    )
    controls = lab.js("(id) => window.alTest.controls(id)", cell_id)
    by_name = {c["name"]: c for c in controls}
    missing = [name for name in wanted if name not in by_name]
    assert not missing, f"{where}: `set` names {missing} but the panel's controls are {sorted(by_name)}"
    for c in controls:
        kinds_present.setdefault(c["kind"], (cell, c))
    for name, value in wanted.items():
        operate(lab, cell_id, by_name[name], value)
    wait_for_output(
        lab, cell, twin_text, what="the widget's output to equal its twin's",
        failure=f"after setting {wanted} the widget's output is not its twin's ({twin_id!r})", label="twin",
    )


def wait_for_output(lab, cell: dict, expected: str, *, what: str, failure: str, label: str):
    """Wait until the widget of `cell` shows `expected`; on a time-out say where the texts part. No error shown."""
    cell_id, where = cell["id"], _where(cell)
    try:
        lab.wait(
            "([id, text]) => window.alTest.widgetTextIs(id, text)",
            [cell_id, expected],
            timeout_s=WIDGET_TIMEOUT,
            what=what,
        )
    except AssertionError as err:
        now = lab.js("(id) => window.alTest.widgetState(id)", cell_id)["text"]
        raise AssertionError(
            f"{where}: {failure}: {err}\nwidget: {_short(now)!r}\n{label + ':':<7} {_short(expected)!r}\n"
            f"{_first_difference(now, expected)}"
        ) from None
    state = lab.js("(id) => window.alTest.widgetState(id)", cell_id)
    assert not state["problems"], f"{where}: the widget shows an error ({failure.split(':')[0]}):\n{state['problems'][0]}"


def move_away_and_back(lab, cell: dict, control: dict):
    """For a kind of control no `set` names: its output must change, then come back exactly."""
    cell_id, where = cell["id"], _where(cell)
    lab.focus_cell = cell_id
    control = next(c for c in lab.js("(id) => window.alTest.controls(id)", cell_id) if c["index"] == control["index"])
    other = another_value(control)
    assert other is not None, (
        f"{where}: the {control['kind']} {control['name']!r} is never operated: name it in the cell's `set` "
        "(its twin then shows the expected output)"
    )
    before = lab.js("(id) => window.alTest.widgetState(id)", cell_id)["text"]
    original = restore_value(control)
    operate(lab, cell_id, control, other)
    lab.wait(
        "([id, text]) => window.alTest.widgetTextIsNot(id, text)",
        [cell_id, before],
        timeout_s=WIDGET_TIMEOUT,
        what=f"the output of cell {cell_id!r} to change when {control['name']!r} moves to {other!r}",
    )
    operate(lab, cell_id, control, original)
    wait_for_output(
        lab, cell, before, what="the output to come back",
        failure=f"moving {control['name']!r} to {other!r} and back to {original!r} did not restore the output",
        label="before",
    )


def _first_exercise(folder: Path):
    """The first notebook with exercises in ``folder`` and its first exercise, or None where none has one."""
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        found = exercises(nbformat.read(path, as_version=4), path.parent, path.name)
        if found:
            return path, found[0]
    return None


def first_exercise(folder: Path = REPO / "notebooks"):
    """The first notebook with exercises in ``folder``, and its first exercise (a course without any: skipped)."""
    return _first_exercise(folder) or pytest.skip("no notebook has exercises")


def to_reveal(notebook: Path) -> list:
    """The exercises whose worked solutions this test reveals in ``notebook`` (module docstring)."""
    found = exercises(nbformat.read(notebook, as_version=4), notebook.parent, notebook.name)
    if found and standalone_runs(notebook) is None:
        return found
    first = _first_exercise(notebook.parent)
    return [first[1]] if first and first[0].name == notebook.name else []


def run_cell_with_keys(lab, cell_id: str, edit=None):
    """Click into a cell's editor, optionally edit it with key presses, and run it with Shift+Enter."""
    before = lab.js("(id) => window.alTest.cell(id).executionCount", cell_id)
    lab.js("(id) => window.alTest.scrollToCell(id)", cell_id)
    lab.page.locator(f'[data-al-cell-id="{cell_id}"] .jp-InputArea-editor').click()
    if edit:
        edit(lab.page.keyboard)
    lab.page.keyboard.press("Shift+Enter")
    lab.wait(
        "([id, n]) => window.alTest.ranAgain(id, n)", [cell_id, before], timeout_s=60, what=f"cell {cell_id} to run"
    )


def uncomment_last_line(keyboard):
    keyboard.press("Control+End")  # the end of the cell: the "# %load ..." line
    keyboard.press("Home")
    keyboard.press("Delete")  # "#"
    keyboard.press("Delete")  # " "


def reveal_solution(lab, exercise):
    """In the open notebook, after Run All: the exercise's reveal cell, used as its instruction says with real
    key presses, loads the worked solution (from solutions/ beside the notebook); run, its check says "Correct"."""
    reveal_id = f"{exercise.solution_id}-reveal"
    answer = lab.js("(id) => window.alTest.cell(id)", exercise.solution_id)
    assert lab.js("(id) => window.alTest.outputText(id)", exercise.solution_id).startswith("Your turn")
    reveal = lab.js("(id) => window.alTest.cell(id)", reveal_id)
    assert reveal and not reveal["outputs"], f"{reveal_id}: the reveal cell shows nothing until it is used"

    lab.focus_cell = reveal_id
    run_cell_with_keys(lab, reveal_id, uncomment_last_line)
    lab.wait(
        "([id, text]) => window.alTest.cell(id).source.includes(text)",
        [reveal_id, exercise.region.splitlines()[-1]],
        timeout_s=30,
        what=f"%load to put the solution into the reveal cell {reveal_id}",
    )
    loaded = lab.js("(id) => window.alTest.cell(id).source", reveal_id)
    assert loaded.rstrip().endswith(exercise.check_call) and exercise.region.strip() in loaded, reveal_id
    assert lab.js("(id) => window.alTest.cell(id).source", exercise.solution_id) == answer["source"], "the answer stays"

    run_cell_with_keys(lab, reveal_id)
    # The execution count can change a moment before the check's output is in the cell's model.
    lab.wait("(id) => window.alTest.outputText(id).length > 0", reveal_id, timeout_s=RUN_TIMEOUT,
             what=f"the check's feedback under the reveal cell {reveal_id}")
    shown = lab.js("(id) => window.alTest.outputText(id)", reveal_id)
    assert shown.startswith("Correct"), f"{reveal_id}: {shown}"


@pytest.mark.timeout(RUN_TIMEOUT + 300)  # a hang outside the waits above still ends (pytest-timeout)
def test_notebook_in_jupyterlab(lab, learner_copy, notebook):  # notebook: parametrized by conftest.py
    path = f"{learner_copy.name}/{notebook.name}"
    if not (notebook.exists() and (learner_copy / notebook.name).exists()):
        pytest.skip(f"{notebook.name} was removed after the test session started")
    lab.open(path)
    shown = [c for c in lab.js("() => window.alTest.cells()") if c["outputs"] or c["executionCount"] is not None]
    assert not shown, f"{path}: {len(shown)} code cell(s) show an output before anything ran, first {shown[0]['id']!r}"

    lab.js("() => window.alTest.startRun()")
    try:
        lab.wait("() => window.alTest.finished()", timeout_s=RUN_TIMEOUT, what="Run All Cells")
    except AssertionError as err:
        status = lab.js("() => window.alTest.kernelStatus()")
        raise AssertionError(
            f"{path}: {err} (kernel {status}; set AUTOGRAD_LAB_RUN_TIMEOUT for a slow machine)"
        ) from None
    dialog = lab.js("() => window.alTest.dialog()")
    assert dialog is None, f"{path}: a dialog blocked Run All Cells: {dialog!r}"
    run = lab.js("() => window.alTest.run")
    # run["result"] is False when a cell raised: run_problems says which and why
    assert run["error"] is None, f"{path}: Run All Cells failed: {run['error']}"

    lab.phase("run all")
    cells = lab.js("() => window.alTest.cells()")
    problems = run_problems(cells, _stored_graph_cells(notebook), run["statuses"])
    if problems:
        lab.focus_cell = next((c["id"] for c in cells if _where(c) in problems[0]), None)
    assert not problems, f"{path} after Run All Cells:\n- " + "\n- ".join(problems)

    lab.phase("check")
    kinds_present: dict = {}
    for cell in cells:
        if cell["lab"]:
            check_widget(lab, cell, kinds_present)
    for kind, (cell, control) in sorted(kinds_present.items()):
        if kind not in lab.operated:
            move_away_and_back(lab, cell, control)
    assert not lab.js("() => window.alTest.pageHasWidgetError()"), f"{path}: 'Error displaying widget' after using the widgets"
    lab.phase("widgets")

    lab.js("() => window.jupyterapp.commands.execute('docmanager:save')")  # resolves once the file is written
    saved = learner_copy / notebook.name
    assert '"execution_count": 1' in saved.read_text(), f"{path}: saving did not write the run's outputs"
    assert course.fingerprint(saved) == course.fingerprint(notebook), (
        f"{path}: saved by JupyterLab after a run, it no longer reads as the course's version: the next make lab "
        "would count running its cells as a change")
    lab.phase("save")

    for exercise in to_reveal(notebook):
        reveal_solution(lab, exercise)
    left = sorted(p.name for p in learner_copy.glob(f"scratch-{notebook.name[:2]}*"))
    assert not left, f"{path} leaves its scratch folder {left} in the learner's copy"
    lab.phase("reveal")
