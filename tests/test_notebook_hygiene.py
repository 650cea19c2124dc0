"""Every notebook is stored the way the course promises: executed in order, clean, navigable."""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ADDRESS = re.compile(r"object at 0x[0-9a-fA-F]+|\bat 0x[0-9a-fA-F]{6,}")
MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/|site-packages)")


def cells(path):
    return json.loads(path.read_text())["cells"]


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_start_here.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_top_to_bottom_in_one_fresh_kernel(path):
    counts = [c["execution_count"] for c in cells(path) if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: re-run `make notebooks NB={path}`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stale_widget_state_no_errors_no_addresses_no_paths(path):
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], "stored widget state: re-run `make notebooks`"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        tags = cell["metadata"].get("tags", [])
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                assert "raises-exception" in tags, f"{path.name} cell {i}: error output in a cell not tagged raises-exception"
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            text += "".join(out.get("traceback", []))
            if "NBVAL_IGNORE_OUTPUT" not in src:
                assert not ADDRESS.search(text), f"{path.name} cell {i}: a memory address in a checked output"
            assert not MACHINE_PATH.search(text), f"{path.name} cell {i}: a machine path in an output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_widget_has_a_checked_twin(path):
    by_id = {c.get("id"): c for c in cells(path)}
    for cell in cells(path):
        meta = cell["metadata"].get("autograd_lab")
        if not meta:
            continue
        src = "".join(cell["source"])
        assert src.startswith("# NBVAL_IGNORE_OUTPUT"), f"{path.name}: widget cell {cell['id']} must be ignored by nbval"
        twin = by_id.get(meta["twin"])
        assert twin is not None, f"{path.name}: widget cell {cell['id']} names a missing twin {meta['twin']}"
        twin_src = "".join(twin["source"])
        assert "NBVAL_IGNORE_OUTPUT" not in twin_src, f"{path.name}: twin {meta['twin']} must be checked by nbval"
        assert twin.get("outputs"), f"{path.name}: twin {meta['twin']} has no stored output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_to_course_map_and_between_notebooks_resolve(path):
    text = "".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")
    for target in re.findall(r"\]\(([^)#\s]+\.ipynb)", text):
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"
    if path.name != "00_start_here.ipynb":
        assert "00_start_here.ipynb" in text, f"{path.name}: link back to the course map"
