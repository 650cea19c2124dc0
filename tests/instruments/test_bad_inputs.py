"""What a learner may pass the instruments: every bad input ends quickly, leaves no process,
and is refused at the boundary with a message naming the argument -- or gives a correct result.

One table per module (measure, readiness and engine, widgets, distributed, timeline); the graph drawing and the
exercise checks have tables of their own beside their tests.
"""

from __future__ import annotations

import functools
import os
import stat
import time

import psutil
import pytest
import torch

import autograd_lab as lab
from autograd_lab import engine as lab_engine
from autograd_lab import readiness
from autograd_lab.distributed import port_is_free, torchrun
from autograd_lab.measure import held_bytes
from autograd_lab.widgets import control_for, live

pytestmark = pytest.mark.timeout(20)  # no hang: every call here is bounded

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def no_process_left():
    """No call may leave a process of ours running (a child, or a grandchild of one)."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in me.children(recursive=True) if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == [], [p.cmdline() for p in left]


def refused(call, error, names):
    """``call()`` raises ``error`` at once, with a message holding every word of ``names``."""
    start = time.monotonic()
    with pytest.raises(error) as info:
        call()
    assert time.monotonic() - start < 5
    for word in names.split():
        assert word in str(info.value), (word, str(info.value))


# ------------------------------------------------------------------------------------------ measure


@pytest.mark.parametrize("value", ["loss", None, 3, {}, [torch.ones(1), "x"]])
def test_count_nodes_wants_tensors(value):
    refused(lambda: lab.count_nodes(value), TypeError, "count_nodes torch.Tensor")


def test_count_nodes_walks_a_deep_graph_without_recursion():
    w = torch.ones((), requires_grad=True)
    x = w
    for _ in range(20_000):  # far deeper than Python's recursion limit
        x = x * 1.0
    assert lab.count_nodes(x) == 20_001  # one MulBackward0 per step and AccumulateGrad(w)


@pytest.mark.parametrize("exclude, error", [(3, TypeError), ([1, 2], TypeError), ([torch.ones(1), None], TypeError)])
def test_saved_tensors_exclude_must_hold_tensors(exclude, error):
    refused(lambda: lab.SavedTensors(exclude=exclude), error, "exclude")


def test_saved_tensors_takes_one_tensor_as_exclude():
    w = torch.randn(10, requires_grad=True)
    with lab.SavedTensors(exclude=w) as saved:
        w * w  # saves w twice, excluded
    with lab.SavedTensors() as counted:
        w * w
    assert (saved.bytes, saved.tensors, counted.bytes) == (0, 2, 40)


@pytest.mark.parametrize(
    "value, error",
    [(NAN, ValueError), (INF, ValueError), (-1.0, ValueError), (0, ValueError),
     ("0.2", TypeError), (None, TypeError), (True, TypeError), (200, ValueError)],
)
def test_time_call_min_run_time_must_be_a_finite_positive_number(value, error):
    refused(lambda: lab.time_call(lambda: None, min_run_time=value), error, "min_run_time")


@pytest.mark.parametrize("kwargs, error, names", [
    ({"threads": 0}, ValueError, "threads"),
    ({"threads": 1.5}, ValueError, "threads"),
    ({"threads": True}, ValueError, "threads"),
    ({"label": 3}, TypeError, "label"),
])
def test_time_call_options(kwargs, error, names):
    refused(lambda: lab.time_call(lambda: None, min_run_time=0.01, **kwargs), error, names)


def test_time_call_wants_a_function():
    refused(lambda: lab.time_call(torch.ones(2)), TypeError, "function")


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True, "2"])
def test_held_bytes_repeats(repeats):
    refused(lambda: held_bytes(lambda: None, repeats=repeats), ValueError, "repeats")


# ------------------------------------------------------------------------------- readiness and engine


def fake_dot(folder, body: str, monkeypatch):
    """A `dot` program, first on PATH and selected as the engine (``AUTOGRAD_LAB_DOT=dot``), that runs ``body``."""
    dot = folder / "dot"
    dot.write_text("#!/bin/sh\n" + body)
    dot.chmod(dot.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("AUTOGRAD_LAB_DOT", "dot")
    monkeypatch.setenv("PATH", str(folder) + os.pathsep + os.environ["PATH"])


needs_sh = pytest.mark.skipif(os.name != "posix", reason="the fake dot is a shell script")


@needs_sh
def test_a_dot_that_cannot_load_its_libraries_reads_not_ready_with_the_repair(tmp_path, monkeypatch):
    fake_dot(tmp_path, (
        'echo "dot: error while loading shared libraries: libgvc.so.6: cannot open shared object file" >&2\n'
        "exit 127\n"), monkeypatch)
    report = readiness.environment_report()
    assert report["ready"] is False and report["graphs drawn by"] == "BROKEN"
    assert "libgvc.so.6" in report["repair"] and "exited with 127" in report["repair"]
    assert lab_engine.graphviz_install_hint() in report["repair"]
    assert lab_engine.graphviz_check()[0] is None


@needs_sh
def test_a_dot_that_runs_but_cannot_draw_is_broken_too(tmp_path, monkeypatch):
    fake_dot(tmp_path, (
        'if [ "$1" = "-V" ]; then echo "dot - graphviz version 9.0.0 (0)" >&2; exit 0; fi\n'
        'echo "Format: \\"svg\\" not recognized. Use one of:" >&2; exit 1\n'), monkeypatch)
    found, problem = lab_engine.graphviz_check()
    assert found is None and "9.0.0" in problem and "cannot draw" in problem and "not recognized" in problem


@needs_sh
def test_a_dot_that_hangs_is_given_up_on(tmp_path, monkeypatch):
    fake_dot(tmp_path, "sleep 60\n", monkeypatch)  # sleep, a child, holds the output open
    monkeypatch.setattr(lab_engine, "DOT_CHECK_TIMEOUT_S", 0.5)
    start = time.monotonic()
    found, problem = lab_engine.graphviz_check()
    assert found is None and "no answer within 0.5 s" in problem
    assert time.monotonic() - start < 3


def test_no_engine_at_all_reads_missing_with_the_repair(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("AUTOGRAD_LAB_DOT", raising=False)
    monkeypatch.setattr(lab_engine, "_installed_pure", lambda: None)  # as where pip installed no graphviz-pure
    report = readiness.environment_report()
    assert report["ready"] is False and report["graphs drawn by"] == "MISSING"
    assert "graphviz-pure, the course's layout engine, is not installed" in report["repair"]
    assert "no Graphviz `dot` program is on PATH either" in report["repair"]
    assert "pip install graphviz-pure" in report["repair"] and lab_engine.graphviz_install_hint() in report["repair"]


def test_a_setting_that_names_no_program_reads_missing_and_says_how_to_undo_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AUTOGRAD_LAB_DOT", "dot")
    report = readiness.environment_report()
    assert report["ready"] is False and report["graphs drawn by"] == "MISSING"
    assert "AUTOGRAD_LAB_DOT=dot selects a program that was not found" in report["repair"]
    assert "Unset AUTOGRAD_LAB_DOT to draw with graphviz-pure" in report["repair"]


def test_the_install_hint_lists_every_system_with_this_one_first(monkeypatch):
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(lab_engine.sys, "platform", "darwin")
    lines = lab_engine.graphviz_install_hint().splitlines()
    assert lines[0].split()[0] == "macOS" and len(lines) == len(lab_engine.GRAPHVIZ_INSTALL)
    assert any("sudo dnf install graphviz" in line for line in lines)
    monkeypatch.setenv("CONDA_PREFIX", "somewhere")
    assert lab_engine.graphviz_install_hint().splitlines()[0].split()[0] == "conda"


# ------------------------------------------------------------------------------------------ widgets


@pytest.mark.parametrize("spec, error, names", [
    ((1, 10, 0), ValueError, "step n= positive"),
    ((1, 10, -1), ValueError, "step n= positive"),
    ((0.0, 1.0, NAN), ValueError, "step n= finite"),
    ((NAN, 1.0), ValueError, "min n= finite"),
    ((0.0, INF), ValueError, "max n= finite"),
    ((5, 1), ValueError, "n= greater"),
    ((1, "a"), TypeError, "n="),
    ((1, 2, 3, 4), TypeError, "n="),
    ((), TypeError, "n="),
    ([], TypeError, "n="),
    ({}, TypeError, "n="),
    ("text", TypeError, "n="),
    (None, TypeError, "n="),
    ((True, False), TypeError, "n="),
])
def test_slider_and_control_specs(spec, error, names):
    refused(lambda: control_for("n", spec), error, names)


def test_a_widget_without_a_value_is_refused():
    import ipywidgets as W

    refused(lambda: control_for("n", W.Button()), TypeError, "n Button")


def test_live_wants_a_function_and_controls_it_can_take():
    def fn(n, m=1):
        return n + m

    refused(lambda: live(3, n=(1, 2)), TypeError, "function")
    refused(lambda: live(fn, k=(1, 2)), TypeError, "fn k")
    refused(lambda: live(fn, m=(1, 2)), TypeError, "fn")  # n has no control and no default
    refused(lambda: live(functools.partial(fn, m=2)), TypeError, "fn")


@pytest.mark.parametrize("failure", [ValueError("bad n"), ZeroDivisionError("division by zero"), KeyError("k")])
def test_live_shows_a_failing_function_and_stays_usable(failure):
    def fn(n=1):
        if n == 2:
            raise failure
        return n

    panel = live(fn, n=(1, 3))
    panel.controls["n"].value = 2
    assert type(failure).__name__ in panel.status.value
    panel.controls["n"].value = 3
    assert "updated" in panel.status.value


def test_live_with_a_callable_object():
    class Scale:
        def __call__(self, n=1):
            return n * 10

    panel = live(Scale(), n=(1, 3))
    assert "updated" in panel.status.value


# ------------------------------------------------------------------------------------------ distributed


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "never.py"
    path.write_text("raise SystemExit('must not run')\n")
    return path


@pytest.mark.parametrize("kwargs, error, names", [
    ({"env": {"SEED": 1}}, TypeError, "env SEED '1'"),
    ({"env": {1: "x"}}, TypeError, "env"),
    ({"env": "SEED=1"}, TypeError, "env dict"),
    ({"timeout": NAN}, ValueError, "timeout"),
    ({"timeout": INF}, ValueError, "timeout"),
    ({"timeout": -5}, ValueError, "timeout"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"timeout": 60_000}, ValueError, "timeout seconds"),
    ({"timeout": "60"}, TypeError, "timeout"),
    ({"timeout": None}, TypeError, "timeout"),
    ({"nproc": 0}, ValueError, "nproc"),
    ({"nproc": 2.0}, ValueError, "nproc"),
    ({"nproc": True}, ValueError, "nproc"),
    ({"nproc": 10_000}, ValueError, "nproc"),
    ({"port": -1}, ValueError, "port"),
    ({"port": 70_000}, ValueError, "port"),
    ({"port": "29500"}, ValueError, "port"),
])
def test_torchrun_checks_its_arguments_before_starting_anything(script, kwargs, error, names):
    refused(lambda: torchrun(script, **kwargs), error, names)


def test_torchrun_script_must_be_an_existing_file(tmp_path):
    refused(lambda: torchrun(3), TypeError, "script")
    refused(lambda: torchrun(tmp_path / "nothere.py"), FileNotFoundError, "nothere.py")


@pytest.mark.parametrize("port", [0, -1, 65536, "80", None, 1.5])
def test_port_is_free_wants_a_port_number(port):
    refused(lambda: port_is_free(port), ValueError, "port")

