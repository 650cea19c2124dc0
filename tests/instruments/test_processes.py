"""Programs that never outlive their caller: started in a session of their own, stopped with their whole group."""

import os
import signal
import subprocess
import sys
import time

import pytest

from autograd_lab import processes

posix_only = pytest.mark.skipif(os.name != "posix", reason="process groups and sessions are POSIX")

# a program that ignores SIGTERM, with a child in its group that does too; it prints the child's pid
DEAF_WITH_A_CHILD = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has ended
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@posix_only
def test_a_started_program_leads_a_process_group_of_its_own():
    proc = processes.start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    finally:
        processes.stop(proc)
    assert proc.returncode is not None


@posix_only
def test_stop_ends_the_whole_group_also_what_ignores_the_polite_signal():
    proc = processes.start([sys.executable, "-c", DEAF_WITH_A_CHILD], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    start = time.monotonic()
    processes.stop(proc, signal.SIGTERM, grace=0.5)
    assert time.monotonic() - start < 5
    assert proc.returncode == -signal.SIGKILL and _gone(child)
    proc.stdout.close()


@posix_only
def test_a_program_that_ends_in_its_grace_is_not_killed():
    proc = processes.start([sys.executable, "-c", "import time; time.sleep(60)"])
    processes.stop(proc, signal.SIGTERM, grace=5, leader_only=True)
    assert proc.returncode == -signal.SIGTERM
    processes.stop(proc, signal.SIGTERM, grace=5)  # it has ended: nothing to do


def test_run_returns_what_the_program_said_and_kills_it_on_a_timeout():
    code, out, err = processes.run([sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"],
                                   b"echo", timeout=30)
    assert (code, out, err) == (0, b"echo", b"")
    with pytest.raises(subprocess.TimeoutExpired):
        processes.run([sys.executable, "-c", "import time; time.sleep(60)"], b"", timeout=0.5)
