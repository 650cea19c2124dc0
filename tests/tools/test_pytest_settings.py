"""The project's pytest settings (conftest.py at the root): ``--lf`` reruns a failed notebook cell in its notebook."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]


@pytest.mark.slow
def test_last_failed_reruns_a_notebook_cell_after_the_cells_it_needs(pytester):
    pytester.makeini("[pytest]\naddopts = --nbval --nbval-current-env\n")
    pytester.makeconftest((REPO / "conftest.py").read_text())
    first = nbformat.v4.new_code_cell("x = 1", execution_count=1)
    second = nbformat.v4.new_code_cell("print(x)", execution_count=2)
    second.outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]  # nbval compares: it fails
    nbformat.write(nbformat.v4.new_notebook(cells=[first, second]), pytester.path / "one.ipynb")
    pytester.makepyfile(test_other="def test_passes():\n    pass\n")

    pytester.runpytest_subprocess("-p", "no:xdist").assert_outcomes(passed=2, failed=1)
    rerun = pytester.runpytest_subprocess("-p", "no:xdist", "--lf", "-v")
    rerun.assert_outcomes(passed=1, failed=1)
    rerun.stdout.fnmatch_lines(["*Cell 0 PASSED*", "*Cell 1 FAILED*", "*Cell outputs differ*"])
    rerun.stdout.no_fnmatch_line("*NameError*")
    assert "test_other.py::test_passes" not in rerun.stdout.str(), "--lf still leaves out what passed"
