"""What the test suites share: the training scripts the notebooks write, and the seconds tables printed at the end.

The helper modules in this folder (``backward_by_hand``, ...) are imported by name: pytest puts this folder on
``sys.path`` as it loads this file.

- ``script``: the training script a notebook writes with its ``%%writefile`` cells (the first cell writes, the
  others append), saved in a temporary folder. A test module names the notebook in ``NOTEBOOK`` and the
  script's file name in ``SCRIPT_NAME``.
- ``probed``: a folder for tests/notebooks/ddp_probe.py's counts.
- ``seconds_table(title)``: a table of seconds per phase that a suite fills as it runs (the browser tests per
  notebook, the class on JupyterHub per phase); every table is printed after the test summary.
- ``device``: a test that takes it runs once on the CPU and once on CUDA, for a fact that must hold on every
  device the notebooks pick. ``gpu``: a test that takes it runs on CUDA only, for a fact the notebooks state of
  a GPU alone. A CUDA case carries the mark ``cuda`` (``make test-cuda`` selects them with ``-m cuda``) and is
  skipped where no GPU is visible, unless ``REQUIRE_CUDA`` is set in the environment (``make test-cuda`` sets
  it): there a skip would hide that the GPU was not used, so the case fails instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.run_cuda_tests import REQUIRE_CUDA  # set (to anything but "" or "0"): a CUDA case fails rather than skips

_TABLES: dict[str, list] = {}  # title -> [(name, seconds, detail)]
DEVICES = ("cpu", "cuda")


def cuda_missing() -> str | None:
    """Why no CUDA case can run here, or None when torch sees a GPU."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build"
    return f"torch {torch.__version__} is built for CUDA {torch.version.cuda} but sees no GPU"


def _device_or_skip(name: str):
    """torch.device(name); for "cuda" where no GPU is visible, a skip (a failure under REQUIRE_CUDA)."""
    import torch

    missing = cuda_missing() if name == "cuda" else None
    if missing is not None:
        message = f"no CUDA GPU here ({missing}); make test-cuda runs this case on a GPU"
        if os.environ.get(REQUIRE_CUDA, "") not in ("", "0"):
            pytest.fail(message)
        pytest.skip(message)
    return torch.device(name)


@pytest.fixture(params=DEVICES)
def device(request):
    """The device a fact is checked on: "cpu", then "cuda" (see the module's docstring)."""
    return _device_or_skip(request.param)


@pytest.fixture(params=["cuda"])
def gpu(request):
    """The GPU a fact of GPUs alone is checked on (see the module's docstring)."""
    return _device_or_skip(request.param)


def pytest_collection_modifyitems(items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "cuda" in (callspec.params.get("device"), callspec.params.get("gpu")):
            item.add_marker(pytest.mark.cuda)


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
