"""Every worked solution loads and passes its check in the learner's copy (``make lab``: outputs cleared,
solutions beside the notebooks).

Here: IPython's own ``%load`` fills each reveal cell with its file from the copy's folder, and every solution
that needs only the notebook's imports passes its check, all of them in one Python process. A solution that
reads what the notebook's cells computed is revealed with real key presses after Run All in JupyterLab, in
the learner's copy (tests/browser/test_notebooks_in_lab.py), as are the course's first.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograd_lab.course import update
from tools.classroom.cells import REVEAL_TAG
from tools.classroom.layout import reveal_source
from tools.classroom.names import standalone_runs
from tools.kernels import notebook_client

REPO = Path(__file__).resolve().parents[2]
LOAD = re.compile(r"^#?\s*%load\s+(?:-y\s+)?(\S+)", re.M)
WITH_REVEALS = [p.name for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                if REVEAL_TAG in p.read_text(encoding="utf-8")]
STANDALONE = {name: runs for name in WITH_REVEALS if (runs := standalone_runs(REPO / "notebooks" / name)) is not None}


@pytest.fixture(scope="module")
def learners_copy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("learner") / "my-course"
    update(folder, REPO / "notebooks")
    return folder


def test_load_puts_each_worked_solution_into_the_cell_in_the_learners_copy(learners_copy):
    """IPython's own %load (what the learner runs once the "# " is deleted): from the copy's folder, each reveal
    cell's line fills the cell with its file, in a kernel as JupyterLab runs it."""
    from jupyter_core.utils import run_sync

    lines = sorted({LOAD.search(cell.source).group(0).lstrip("# ")
                    for name in WITH_REVEALS for cell in nbformat.read(learners_copy / name, as_version=4).cells
                    if cell.cell_type == "code" and REVEAL_TAG in cell.metadata.get("tags", [])})
    nb = nbformat.v4.new_notebook()
    client = notebook_client(nb, timeout=60, kernel_name="python3",
                             resources={"metadata": {"path": str(learners_copy)}})
    with client.setup_kernel():
        for line in lines:
            reply = run_sync(client.kc.execute_interactive)(line, timeout=60, store_history=True,
                                                            output_hook=lambda msg: None)
            assert reply["content"]["status"] == "ok", line
            (filled,) = [p["text"] for p in reply["content"]["payload"] if p["source"] == "set_next_input"]
            path = line.split()[-1]
            assert filled.endswith((learners_copy / path).read_text(encoding="utf-8")), line


# --------------------------------------------------------------------------- solutions that need only imports


RUNNER = r"""
import json, sys
results = {}
for run in json.load(open(sys.argv[1])):
    namespace = {"__name__": "__main__"}
    try:
        for part in (run["setup"], "\n".join(run["imports"]), run["cell"], run["test"]):
            exec(compile(part, run["key"], "exec"), namespace)
        results[run["key"]] = "passed"
    except BaseException as err:  # the check's feedback, or what else went wrong
        results[run["key"]] = f"{type(err).__name__}: {err}"
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def standalone_results(tmp_path_factory, learners_copy):
    """Every solution that runs alone, of every notebook, in one Python process (one import of torch), from the
    learner's copy."""
    folder = tmp_path_factory.mktemp("solutions")
    (folder / "runs.json").write_text(json.dumps([run for runs in STANDALONE.values() for run in runs]))
    done = subprocess.run([sys.executable, "-c", RUNNER, str(folder / "runs.json"), str(folder / "results.json")],
                          cwd=learners_copy, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the solutions' run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("aid", sorted(STANDALONE))
def test_every_worked_solution_that_needs_only_imports_passes_alone(standalone_results, aid):
    failed = {run["key"]: standalone_results[run["key"]] for run in STANDALONE[aid]
              if standalone_results[run["key"]] != "passed"}
    assert not failed, f"{aid}: worked solutions that fail the autograder's test line: {failed}"


def test_the_cheap_run_reads_what_a_solution_needs_from_the_notebook(tmp_path):
    """A solution reading a computed name has no run alone (its notebook runs in the learner's copy instead)."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "01_one.py").write_text("answer = computed + 1\nex.check_one(answer)\n")
    cells = [nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("computed = 2"),
             nbformat.v4.new_code_cell("from x import checks as ex"),
             nbformat.v4.new_code_cell("answer = ...\nex.check_one(answer)"),
             nbformat.v4.new_code_cell(reveal_source("solutions/01_one.py"), metadata={"tags": ["solution-reveal"]})]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "01_one.ipynb")
    assert standalone_runs(tmp_path / "01_one.ipynb") is None
    (tmp_path / "solutions" / "01_one.py").write_text("answer = 3\nex.check_one(answer)\n")
    (run,) = standalone_runs(tmp_path / "01_one.ipynb")
    assert run["imports"] == ["import torch", "from x import checks as ex"]
    assert run["cell"] == "answer = ...\nanswer = 3"
    assert run["test"].endswith("_autograded = ex.check_one(answer).assert_passed()")


# ------------------------------------------------------------------------------- the nbgrader round trip
