"""Every worked solution loads and passes its check in the learner's copy, as a learner meets it.

The learner's copy (``make lab``: outputs cleared, solutions beside the notebooks) is run top to bottom in its own
folder, as Run All runs it; at each reveal cell, in place of the learner's ``%load``, the cell looks for the file
its ``%load`` line names from where the kernel stands at that point (a notebook that changed folder above loses
it), runs the file's code as ``%load`` would put it into the cell, and prints the check's verdict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from autograd_lab.course import update
from tools.classroom.cells import REVEAL_TAG
from tools.kernels import notebook_client

REPO = Path(__file__).resolve().parents[2]
LOAD = re.compile(r"^#?\s*%load\s+(?:-y\s+)?(\S+)", re.M)
WITH_REVEALS = [p.name for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                if REVEAL_TAG in p.read_text(encoding="utf-8")]

# What the learner's %load then Shift-Enter amounts to: the file's code in the cell, its last line's value shown.
LOAD_AND_RUN = """\
import ast as _ast, os as _os
_path = {path!r}
if not _os.path.exists(_path):
    print(f"%load {{_path}}: not found from the kernel's folder")
else:
    _tree = _ast.parse(open(_path, encoding="utf-8").read())
    _last = _tree.body.pop() if _tree.body and isinstance(_tree.body[-1], _ast.Expr) else None
    exec(compile(_tree, _path, "exec"))
    _verdict = eval(compile(_ast.Expression(_last.value), _path, "eval")) if _last else None
    print(f"%load {{_path}}: {{getattr(_verdict, 'status', 'no check ran')}}")
"""


@pytest.fixture(scope="module")
def learners_copy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("learner") / "my-course"
    update(folder, REPO / "notebooks")
    return folder


def _with_reveals_run(nb) -> list[str]:
    """Replace each reveal cell by LOAD_AND_RUN of its file; the paths, in order."""
    paths = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and REVEAL_TAG in cell.metadata.get("tags", []):
            path = LOAD.search(cell.source).group(1)
            paths.append(path)
            nb.cells[i] = nbformat.v4.new_code_cell(LOAD_AND_RUN.format(path=path))
            nb.cells[i].metadata["reveal"] = path
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("name", WITH_REVEALS)
def test_every_worked_solution_loads_and_passes_in_the_learners_copy(learners_copy, name):
    nb = nbformat.read(learners_copy / name, as_version=4)
    paths = _with_reveals_run(nb)
    assert paths, f"{name}: no reveal cell found"
    notebook_client(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(learners_copy)}},
                    allow_errors=True).execute()
    verdicts = []
    for cell in nb.cells:
        if "reveal" in cell.metadata:
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            errors = [f"{o['ename']}: {o['evalue']}" for o in cell.outputs if o.get("output_type") == "error"]
            verdicts.append(errors[0] if errors else text.strip().splitlines()[-1] if text.strip() else "no output")
    expected = [f"%load {path}: correct" for path in paths]
    assert verdicts == expected, json.dumps(dict(zip(paths, verdicts)), indent=1)
    left = sorted(p.name for p in learners_copy.glob(f"scratch-{name[:2]}*"))
    assert not left, f"{name} leaves its scratch folder {left} in the learner's copy"


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
