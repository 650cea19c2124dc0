"""tools/run_tests.py: make test's two suites side by side, one verdict, the browser log printed after."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tools import run_tests

pytest_plugins = ["pytester"]


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("rest_code, browser_code, verdict", [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 1)])
def test_the_verdict_needs_both_suites(tmp_path, monkeypatch, capfd, rest_code, browser_code, verdict):
    monkeypatch.setattr(run_tests, "LOG", tmp_path / "browser-tests.log")
    monkeypatch.setattr(run_tests, "ROOT", tmp_path)
    rest = py(f"print('REST RAN'); raise SystemExit({rest_code})")
    browser = py(f"import time; time.sleep(0.3); print('BROWSER RAN'); raise SystemExit({browser_code})")
    assert run_tests.side_by_side(rest, browser) == verdict
    out = capfd.readouterr().out
    assert out.index("REST RAN") < out.index("BROWSER RAN"), "the browser suite's output comes after, in one piece"
    assert ("browser tests passed" if browser_code == 0 else "browser tests FAILED") in out
    assert ("unit tests and nbval passed" if rest_code == 0 else "unit tests and nbval FAILED") in out


def test_the_last_line_says_the_cpu_seconds_every_process_of_both_suites_used(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(run_tests, "LOG", tmp_path / "browser-tests.log")
    monkeypatch.setattr(run_tests, "ROOT", tmp_path)
    spin = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; t = time.process_time()\\n" \
           "while time.process_time() - t < 1: pass'])"  # a grandchild's CPU time counts too
    assert run_tests.side_by_side(py(spin), py(spin)) == 0
    last = capfd.readouterr().out.strip().splitlines()[-1]
    cpu = int(re.search(r"(\d+) CPU-s on \d+ cores", last).group(1))
    assert cpu >= 2, last


MARKS = ("browser", "hub", "autograde", "package", "slow")


@pytest.mark.parametrize("fast", [False, True], ids=["make test", "make test-fast"])
def test_each_suite_selects_its_tests_by_mark(pytester, fast):
    """Run on a folder with one test per mark, each command line collects the tests its docstring names."""
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {mark}: a mark\n" for mark in MARKS))
    (pytester.path / "notebooks").mkdir()
    (pytester.path / "tests" / "browser").mkdir(parents=True)
    for folder in ("tests", "tests/browser"):  # a browser test outside tests/browser/ is refused below
        (pytester.path / folder / f"test_marks_{folder.replace('/', '_')}.py").write_text(
            "import pytest\n\n"
            + "".join(f"@pytest.mark.{mark}\ndef test_{mark}():\n    pass\n\n" for mark in MARKS)
            + "def test_unmarked():\n    pass\n"
        )

    def collected(cmd):
        assert cmd[:3] == [sys.executable, "-m", "pytest"]
        result = pytester.runpytest(*cmd[3:], "--collect-only", "-q")
        return {line.split("::")[0].split("/")[-2] + "::" + line.split("::")[-1]
                for line in result.outlines if "::" in line}

    rest, browser = run_tests.commands(0, fast=fast)
    expected = {"test_unmarked"} if fast else {"test_unmarked", "test_slow"}
    assert collected(rest) == {f"{folder}::{name}" for folder in ("tests", "browser") for name in expected}
    assert collected(browser) == {"browser::test_browser"}
    assert rest[-2:] == ["tests", "notebooks"], "the rest runs the unit tests and nbval on every notebook"


MARKED = re.compile(r"@pytest\.mark\.browser|pytestmark\s*=.*mark\.browser")


def test_every_browser_test_lives_where_the_browser_suite_collects():
    """The browser suite collects tests/browser/ only; a browser test elsewhere would run in no suite."""
    root = Path(run_tests.ROOT)
    elsewhere = [path.relative_to(root).as_posix() for path in (root / "tests").rglob("test_*.py")
                 if MARKED.search(path.read_text(encoding="utf-8"))
                 and not path.is_relative_to(root / run_tests.BROWSER_TESTS)]
    assert elsewhere == [], f"browser tests outside {run_tests.BROWSER_TESTS}/: {elsewhere}"


def test_each_test_process_and_what_it_starts_runs_one_torch_thread():
    """conftest.py: one torch thread per process (or the caller's OMP_NUM_THREADS), set before torch is
    imported here and inherited by what a test starts (kernels, torchrun, JupyterLab)."""
    import os
    import subprocess

    import torch

    chosen = int(os.environ["OMP_NUM_THREADS"])
    assert torch.get_num_threads() == chosen
    child = subprocess.run(py("import torch; print(torch.get_num_threads())"), capture_output=True, text=True,
                           check=True)
    assert int(child.stdout) == chosen


class _Item:
    """What the ordering reads of a collected test: its id and whether it is marked slow."""

    def __init__(self, nodeid: str, slow: bool = False):
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None


def _project_conftest(config):
    here = Path(run_tests.__file__).resolve().parents[1] / "conftest.py"
    return next(p for p in config.pluginmanager.get_plugins() if Path(getattr(p, "__file__", "") or ".") == here)


def test_the_workers_take_the_scopes_with_the_most_slow_tests_first_each_scope_whole_and_in_order(pytestconfig):
    items = [_Item("tests/a.py::x"), _Item("tests/b.py::y", slow=True), _Item("tests/a.py::z"),
             _Item("tests/c.py::s1", slow=True), _Item("tests/d.py::w"), _Item("tests/c.py::s2", slow=True)]
    order = [item.nodeid for item in _project_conftest(pytestconfig).longest_first(items)]
    assert order == ["tests/c.py::s1", "tests/c.py::s2", "tests/b.py::y", "tests/a.py::x", "tests/a.py::z",
                     "tests/d.py::w"]
    rest, _ = run_tests.commands(2)
    assert rest[rest.index("--dist") + 1] == "loadscope" and "--no-loadscope-reorder" in rest


def test_in_this_session_each_notebook_comes_before_every_scope_without_a_slow_test(request):
    conftest = _project_conftest(request.config)
    items = request.session.items
    notebooks = [i for i, item in enumerate(items) if item.nodeid.startswith("notebooks/")]
    plain = {conftest.scope_of(item) for item in items} - {
        conftest.scope_of(item) for item in items
        if item.nodeid.startswith("notebooks/") or item.get_closest_marker("slow") is not None}
    first_plain = min((i for i, item in enumerate(items) if conftest.scope_of(item) in plain), default=len(items))
    assert all(i < first_plain for i in notebooks)
