"""The layout engine under a time limit: what a layout costs is known before the engine runs, and the engine
never outlives its call -- not when it runs out of time, not on an interrupt; a broken one gets the repair hint.
The fake engines here are a system ``dot``, selected as a learner would (``AUTOGRAD_LAB_DOT=dot``)."""

import os
import signal
import stat
import time

import pytest
import torch
from losses import data, looped_loss, seed_model, summed_loss

from autograd_lab import draw_graph
from autograd_lab.engine import MAX_BENDS, MAX_NODES, GraphTooSlow, GraphvizMissing, layout_cost, run_dot
from autograd_lab.graphmodel import walk


def test_layout_cost_sees_long_edges_to_a_shared_leaf():
    x, y = data(60)
    boxes, bends = layout_cost(walk(summed_loss(seed_model(), x, y)))
    assert boxes <= MAX_NODES and bends > MAX_BENDS  # few boxes, but every sample's path reaches far down
    assert layout_cost(walk(looped_loss(seed_model(), x, y)))[1] == 0  # all paths of one length


def fake_dot(tmp_path, body, monkeypatch):
    """A `dot` program that runs ``body`` (a shell script), alone on PATH and selected as the engine."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AUTOGRAD_LAB_DOT", "dot")
    path = tmp_path / "dot"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def alive(pid, wait=2.0):
    """Whether ``pid`` still runs ``wait`` seconds from now (a SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + wait
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _running(pid)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


posix_only = pytest.mark.skipif(not os.path.exists("/proc"), reason="reads /proc to see processes")


@posix_only
def test_a_slow_dot_is_stopped_and_leaves_no_process(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    fake_dot(tmp_path, f"/bin/sleep 30 &\necho $! > {pidfile}\nwait\n", monkeypatch)
    start = time.perf_counter()
    with pytest.raises(GraphTooSlow, match="within 0.5 s"):
        run_dot("digraph {}", timeout=0.5)
    assert time.perf_counter() - start < 5
    assert not alive(int(pidfile.read_text()))


@posix_only
def test_an_interrupt_while_dot_runs_leaves_no_process(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    fake_dot(tmp_path, f"/bin/sleep 30 &\necho $! > {pidfile}\nwait\n", monkeypatch)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            run_dot("digraph {}", timeout=20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not alive(int(pidfile.read_text()))


@posix_only
def test_a_broken_dot_gives_the_repair_hint_not_a_traceback(tmp_path, monkeypatch):
    message = "dot: error while loading shared libraries: libgvc.so.6: cannot open shared object file"
    fake_dot(tmp_path, f"echo '{message}' >&2\nexit 127\n", monkeypatch)
    w = torch.tensor(1.0, requires_grad=True)
    g = draw_graph(w * 2, params={"w": w})
    with pytest.raises(GraphvizMissing, match="installed but does not run") as err:
        g.svg()
    assert message in str(err.value) and "apt-get install graphviz" in str(err.value)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain"} and message in bundle["text/plain"]
    assert "AccumulateGrad -> leaf w" in bundle["text/plain"]


# A kernel that prints its pid, then lays out a graph that takes minutes (a random tangle of 300 boxes)
KERNEL = """
import random, sys
import psutil
from autograd_lab.engine import run_dot
random.seed(0)
edges = " ".join(f"a{random.randrange(300)} -> a{random.randrange(300)};" for _ in range(600))
print(psutil.Process().pid, flush=True)
run_dot("digraph {" + edges + "}", timeout=300)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status") or os.uname().sysname != "Linux",
                    reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM])
def test_no_layout_process_outlives_a_killed_kernel(kill):
    import subprocess
    import sys

    import psutil

    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
    engine = []
    try:
        psutil.Process(int(kernel.stdout.readline()))
        deadline = time.monotonic() + 20
        while not engine and time.monotonic() < deadline:  # wait for the layout to start
            engine = psutil.Process(kernel.pid).children()
            time.sleep(0.05)
        assert engine, "the layout engine never started"
        time.sleep(0.5)  # well into the layout
        kernel.send_signal(kill)  # what a kernel restart does when the kernel does not answer
        kernel.wait(timeout=10)
        assert not alive(engine[0].pid, wait=5), "the layout engine outlived the kernel"
    finally:
        if kernel.poll() is None:
            kernel.kill()
        kernel.stdout.close()
        for proc in engine:  # a failed check leaves nothing running either
            if proc.is_running():
                proc.kill()
