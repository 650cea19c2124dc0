"""Programs that never outlive their caller: each started in a session of its own, stopped with its whole group.

A program started with :func:`start` leads a new session (on POSIX), so it and everything it starts share
one process group that a signal reaches at once; :func:`stop` ends that group. The instruments run
Graphviz's ``dot`` and torchrun this way, and the course's tools and tests their servers.

A program of its own session no longer hears what happens to its caller's: a kernel killed outright
(SIGKILL, what a restart does when the kernel does not answer) would leave it running. So :func:`run`, which
lays graphs out, starts its program with ``die_with_parent``: on Linux the kernel itself delivers SIGKILL
to the program the moment its caller's thread ends, however it ends (``prctl(PR_SET_PDEATHSIG)``).

Standard library only: tools and the test suites import this module without importing torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys

__all__ = ["run", "start", "stop"]

KILL_WAIT_S = 10.0  # how long a killed program may take to be reaped

_POSIX = os.name == "posix"
PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal a process gets when the thread that started it ends


def _death_signal():
    """A function for the child, between fork and exec, that asks Linux to SIGKILL it when its parent ends
    (None where Linux's prctl is not there). It looks everything up before the fork, and exits at once when
    the parent has ended already (the signal would never come)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, kill, exit_now = os.getpid(), int(signal.SIGKILL), os._exit

    def ask():
        if prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0) != 0 or os.getppid() != parent:
            exit_now(1)

    return ask


def start(args, *, die_with_parent: bool = False, **popen) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen)``, the program leading a session (and a process group) of its own.

    ``die_with_parent``: on Linux, the program is killed when this thread ends, even by SIGKILL (elsewhere
    it is stopped as usual, by :func:`stop` or an interrupt).
    """
    if die_with_parent and (ask := _death_signal()) is not None:
        popen["preexec_fn"] = ask
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
    (KeyboardInterrupt) kills it too: the program and anything it started never outlive this call. A caller
    killed outright takes the program with it (``die_with_parent``, Linux).
    ``OSError`` when it cannot start.
    """
    proc = start(args, die_with_parent=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except BaseException:  # a timeout or an interrupt: the group goes, also what still holds the pipes
        _kill_group(proc)
        proc.communicate()
        raise
    return proc.returncode, out, err
