"""tools/kernels.py: every way the course's tools start a kernel gets IPC and the steady shell polls.

nbclient binds ``start_new_kernel_client = run_sync(async_start_new_kernel_client)`` to its own coroutine,
so a subclass that overrides only the coroutine is skipped by the sync way in (``setup_kernel()``), which is
the way nbconvert's ExecutePreprocessor -- and so nbgrader's autograde -- and ``make bench`` take. Without
the steady polls a widget cell's reply can sit unread for the whole cell timeout (jupyter/nbclient#312):
nbgrader's autograde of notebook 04 once took 127 s instead of 6.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tools import kernels

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def spied(monkeypatch):
    """Record every kernel client that ``steady_shell`` is applied to."""
    seen = []
    real = kernels.steady_shell

    def spy(kc, *args, **kwargs):
        seen.append(kc)
        return real(kc, *args, **kwargs)

    monkeypatch.setattr(kernels, "steady_shell", spy)
    return seen


def tiny_notebook():
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])


def printed(nb) -> str:
    return "".join(o.get("text", "") for o in nb.cells[0].outputs)


def test_execute_takes_the_steady_client(spied):
    nb = tiny_notebook()
    kernels.notebook_client(nb, timeout=60, kernel_name="python3").execute()
    assert printed(nb) == "42\n"
    assert len(spied) == 1


def test_the_sync_way_in_takes_the_steady_client_too(spied):
    nb = tiny_notebook()
    client = kernels.notebook_client(nb, timeout=60, kernel_name="python3")
    with client.setup_kernel():  # what make bench does
        assert client.kc is spied[0], "setup_kernel() started a kernel client without the steady polls"
        assert client.km.transport == "ipc"
        client.execute_cell(nb.cells[0], 0)
    assert printed(nb) == "42\n"


def test_nbgraders_autograde_execute_takes_the_steady_client(spied):
    pytest.importorskip("nbgrader", reason="the classroom extra is not installed")
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    config = REPO / "tools" / "classroom" / "nbgrader_config.py"
    c = Config()
    exec(compile(config.read_text(), str(config), "exec"), {"get_config": lambda: c, "__file__": str(config)})
    steady = [pp for pp in c.Autograde.autograde_preprocessors if issubclass(pp, Execute) and pp is not Execute]
    assert len(steady) == 1, "the course's nbgrader config does not replace nbgrader's Execute"
    nb = tiny_notebook()
    steady[0](timeout=60).preprocess(nb, {"metadata": {"path": str(REPO)}})  # nbconvert's sync way
    assert printed(nb) == "42\n"
    assert len(spied) == 1, "autograde's kernel client did not get the steady shell polls"
