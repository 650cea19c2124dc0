"""What the test suites share: the training scripts the notebooks write, and the seconds tables printed at the end.

The helper modules in this folder (``backward_by_hand``, ...) are imported by name: pytest puts this folder on
``sys.path`` as it loads this file.

- ``script``: the training script a notebook writes with its ``%%writefile`` cells (the first cell writes, the
  others append), saved in a temporary folder. A test module names the notebook in ``NOTEBOOK`` and the
  script's file name in ``SCRIPT_NAME``.
- ``probed``: a folder for tests/notebooks/ddp_probe.py's counts.
- ``seconds_table(title)``: a table of seconds per phase that a suite fills as it runs (the browser tests per
  notebook, the class on JupyterHub per phase); every table is printed after the test summary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_TABLES: dict[str, list] = {}  # title -> [(name, seconds, detail)]


def notebook_script(notebook, name: str) -> str:
    """The script ``name`` as the notebook's %%writefile cells write it: the first cell writes, the others append."""
    parts = []
    for cell in json.loads(notebook.read_text())["cells"]:
        magic, _, body = "".join(cell["source"]).partition("\n")
        if cell["cell_type"] == "code" and magic.startswith("%%writefile") and magic.endswith(" " + name):
            assert ("-a" in magic.split()) == bool(parts), (cell.get("id"), magic)
            parts.append(body + "\n")
    assert len(parts) >= 2 and "def main():" in parts[-1]
    return "".join(parts)


@pytest.fixture(scope="module")
def script(request, tmp_path_factory):
    name = request.module.SCRIPT_NAME  # as the notebook names it: a scratch folder of its own may come first
    path = tmp_path_factory.mktemp("script") / Path(name).name
    path.write_text(notebook_script(request.module.NOTEBOOK, name))
    return path


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    return tmp_path_factory.mktemp("ddp-probe")


class SecondsTable:
    """Rows of (name, seconds, detail) under one title."""

    def __init__(self, rows: list):
        self._rows = rows

    def add(self, name: str, seconds: float, detail: str = "") -> None:
        self._rows.append((name, seconds, detail))


@pytest.fixture(scope="session")
def seconds_table():
    """``seconds_table(title)``: the table of that title, printed at the end of the session."""
    return lambda title: SecondsTable(_TABLES.setdefault(title, []))


def pytest_terminal_summary(terminalreporter):
    for title, rows in _TABLES.items():
        if not rows:
            continue
        terminalreporter.section(title)
        width = max(len(name) for name, _, _ in rows + [("all together", 0, "")])
        for name, seconds, detail in rows:
            terminalreporter.write_line(f"{name:<{width}} {seconds:6.1f}" + (f"  ({detail})" if detail else ""))
        terminalreporter.write_line(f"{'all together':<{width}} {sum(s for _, s, _ in rows):6.1f}")
