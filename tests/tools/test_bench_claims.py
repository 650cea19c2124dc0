"""The timing claims `make bench` checks for the notebooks (tools/bench.py, TIMING_CLAIMS).

No notebook cell asserts a timing that a busy machine could turn around (a difference of two timings, or a
small margin); the benchmark checks those claims on a quiet machine, in the notebook's own kernel, right after
the cell that measured them. These tests keep that table honest without timing anything: each claim names a
cell that exists and only names that the notebook has defined by then, and the probe reports held, not
held, and a broken expression apart.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import nbformat
import pytest

from tools import bench

REPO = Path(__file__).resolve().parents[2]


def defined_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, loops, imports, definitions, with targets)."""
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.parametrize("name", sorted(bench.TIMING_CLAIMS))
def test_each_claim_names_a_measuring_cell_and_only_names_defined_before_it(name):
    after, claims = bench.TIMING_CLAIMS[name]
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    ids = [c.get("id") for c in nb.cells]
    assert after in ids, f"{name}: no cell with id {after!r} (renamed? update TIMING_CLAIMS)"
    known = set(dir(builtins))
    for cell in nb.cells[: ids.index(after) + 1]:
        if cell.cell_type == "code":
            known |= defined_names(cell.source)
    assert claims
    for claim, expression in claims:
        used = {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}
        assert used <= known, f"{claim}: {sorted(used - known)} not defined by cell {after!r} of {name}"


def test_no_notebook_check_asserts_a_claim_the_bench_checks():
    for name, (_after, claims) in bench.TIMING_CLAIMS.items():
        nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
        checks = "\n".join(c.source for c in nb.cells if "check" in c.metadata.get("tags", []))
        for claim, expression in claims:
            names = {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}
            timing = names & {"split_us", "seconds"}
            assert not any(f"assert {t}" in checks or f"assert {t}[" in checks for t in timing), (name, claim)


def test_the_probe_reports_held_not_held_and_errors(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 2"), nbformat.v4.new_code_cell("x = 5")])
    nb.cells[0].id, nb.cells[1].id = "measure", "later"
    path = tmp_path / "99_probe.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setitem(bench.TIMING_CLAIMS, path.name, ("measure", [
        ("x is two", "x == 2"), ("x is three", "x == 3"), ("a typo", "y > 1")]))
    wall, widgets, held = bench.run_notebook(path)
    assert wall > 0 and widgets == {}
    assert held == {"x is two": True, "x is three": False, "a typo": "NameError: name 'y' is not defined"}
