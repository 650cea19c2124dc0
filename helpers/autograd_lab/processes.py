"""Programs that never outlive their caller: each started in a session of its own, stopped with its whole group.

A program started with :func:`start` leads a new session (on POSIX), so it and everything it starts share
one process group that a signal reaches at once; :func:`stop` ends that group. The instruments run
Graphviz's ``dot`` and torchrun this way, and the course's tools and tests their servers.

Standard library only: tools and the test suites import this module without importing torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["run", "start", "stop"]

KILL_WAIT_S = 10.0  # how long a killed program may take to be reaped

_POSIX = os.name == "posix"


def start(args, **popen) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen)``, the program leading a session (and a process group) of its own."""
    return subprocess.Popen(args, start_new_session=_POSIX, **popen)


def _signal_group(proc: subprocess.Popen, sig) -> None:
    with contextlib.suppress(OSError):  # the group has ended meanwhile
        if _POSIX:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        if _POSIX:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


def stop(proc: subprocess.Popen, first=None, *, grace: float = 0.0, leader_only: bool = False) -> None:
    """End ``proc`` (started by :func:`start`) and its group; return once ``proc`` has been reaped.

    ``first`` (a signal such as SIGTERM) goes to the whole group, or to ``proc`` alone with ``leader_only``
    (a server that stops its own children); they get ``grace`` seconds to exit. Then the whole group is
    killed. A program that has ended already is left alone.
    """
    if proc.poll() is not None:
        return
    if first is not None:
        if leader_only:
            with contextlib.suppress(OSError):
                proc.send_signal(first)
        else:
            _signal_group(proc, first)
    if grace > 0:
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc)
    proc.wait(timeout=KILL_WAIT_S)


def run(args: list, stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
    """``(exit code, stdout, stderr)`` of a program fed ``stdin``, run by :func:`start`.

    On a timeout the whole group is killed and ``subprocess.TimeoutExpired`` raised; an interrupt
    (KeyboardInterrupt) kills it too: the program and anything it started never outlive this call.
    ``OSError`` when it cannot start.
    """
    proc = start(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except BaseException:  # a timeout or an interrupt: the group goes, also what still holds the pipes
        _kill_group(proc)
        proc.communicate()
        raise
    return proc.returncode, out, err
