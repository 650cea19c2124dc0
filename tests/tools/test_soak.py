"""tools/soak.py: the commands it runs are the tools' own with their defaults, an executed copy counts as ended
only when complete, and the verdict holds every run to the factor of its quiet time."""

from __future__ import annotations

import nbformat
import pytest

from tools import soak


def test_the_commands_are_the_tools_own_with_their_defaults(tmp_path):
    nb = tmp_path / "04_x.ipynb"
    nbconvert = soak.command("nbconvert", nb, tmp_path / "out")
    assert nbconvert[0].endswith("jupyter") and nbconvert[1:5] == ["nbconvert", "--to", "notebook", "--execute"]
    assert not any("timeout" in part for part in nbconvert)
    papermill = soak.command("papermill", nb, tmp_path / "out")
    assert papermill[0].endswith("papermill") and papermill[1:] == [str(nb), str(tmp_path / "out" / nb.name)]
    with pytest.raises(ValueError, match="unknown tool"):
        soak.command("voila", nb, tmp_path)


def _executed(tmp_path, *cells):
    nb = nbformat.v4.new_notebook()
    for count, tags, error in cells:
        cell = nbformat.v4.new_code_cell("x = 1", execution_count=count, metadata={"tags": tags})
        if error:
            cell.outputs = [nbformat.v4.new_output("error", ename="RuntimeError", evalue="no", traceback=[])]
        nb.cells.append(cell)
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    return path


def test_an_executed_copy_has_ended_well_only_when_complete(tmp_path):
    assert soak.finished(_executed(tmp_path, (1, [], False), (2, ["raises-exception"], True)))
    assert not soak.finished(_executed(tmp_path, (1, [], True)))  # an error where none belongs
    assert not soak.finished(_executed(tmp_path, (1, [], False), (None, [], False)))  # a cell never ran
    assert not soak.finished(tmp_path / "absent.ipynb")


def test_the_verdict_holds_every_run_to_the_factor():
    quiet = {("00_a.ipynb", "nbconvert"): 10.0, ("04_b.ipynb", "nbconvert"): 10.0}

    def run(name, seconds, status="ok"):
        return soak.Run(name, "nbconvert", True, seconds, status, 2.0)

    runs = [run("00_a.ipynb", 12), run("00_a.ipynb", 29), run("04_b.ipynb", 12), run("04_b.ipynb", 31)]
    lines, passed = soak.table(runs, quiet, 3.0)
    assert not passed
    assert lines[1].startswith("00_a.ipynb") and lines[1].endswith("PASS")
    assert "FAIL: 1 run(s)" in lines[2]
    _, passed = soak.table([run("00_a.ipynb", 5, "stalled (killed after 120 s)")], quiet, 3.0)
    assert not passed


def test_counts_below_one_are_refused():
    with pytest.raises(SystemExit):
        soak.parse(["--runs", "0"])
