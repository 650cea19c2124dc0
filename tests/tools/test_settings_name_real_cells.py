"""Every cell a test or tool setting names exists in a notebook: an exemption that matches nothing exempts
nothing, and a renamed cell would otherwise slip out of its check unnoticed.

A setting that names cells is a module-level constant whose name ends in ``_CELLS`` (a tuple, list or set of
cell ids, or a dict keyed by them), in tests/ or tools/; ``tools/bench.py``'s TIMING_CLAIMS has a test of its
own (test_bench_claims.py).
"""

import ast
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CELL_IDS = {cell.get("id") for path in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]}


def _named_cells(path: Path):
    """(setting name, cell id) for every string in a module-level ``*_CELLS`` constant of ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if not isinstance(target, ast.Name) or not target.id.endswith("_CELLS") or node.value is None:
            continue
        value = node.value
        items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
        for item in items:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                yield target.id, item.value


SETTINGS = [(f"{path.relative_to(REPO)}:{name}", cell)
            for folder in ("tests", "tools") for path in sorted((REPO / folder).rglob("*.py"))
            for name, cell in _named_cells(path)]


def test_the_settings_are_found():
    assert any(where.endswith("SETUP_CELLS") for where, _ in SETTINGS)


@pytest.mark.parametrize("where, cell", SETTINGS, ids=[f"{w}-{c}" for w, c in SETTINGS])
def test_a_named_cell_exists(where, cell):
    assert cell in CELL_IDS, f"{where} names cell {cell!r}, which no notebook has (renamed? update the setting)"


def test_a_setting_naming_a_missing_cell_is_caught(tmp_path):
    module = tmp_path / "settings.py"
    module.write_text('EXEMPT_CELLS = ("setup", "twin-update")\nOTHER = ("not-a-setting",)\n')
    assert [c for _, c in _named_cells(module) if c not in CELL_IDS] == ["twin-update"]
