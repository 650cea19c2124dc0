"""What went wrong in a run, in words: which rank failed and why, with the end of its output.

Read from what torchrun leaves behind: its own error output (the "Root Cause" summary) and each rank's
log files. The launcher (:mod:`.launcher`) raises what these functions build.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

__all__ = ["DistributedRunError", "failure", "rank_logs", "read", "tail", "timeout_error"]

TAIL_LINES = 12  # lines of a failed rank's output shown in the error
TIMEOUT_TAIL_LINES = 4  # lines of each rank's output shown after a timeout


class DistributedRunError(RuntimeError):
    """A run that did not finish with every rank's results.

    ``reason`` is one of "port in use", "rank failed", "timeout", "no results";
    ``rank`` the rank at fault when known; ``tail`` the end of its output.
    """

    def __init__(self, reason: str, message: str, *, rank: int | None = None, tail: str = ""):
        super().__init__(message)
        self.reason = reason
        self.rank = rank
        self.tail = tail


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text`` that are not blank."""
    rows = [row for row in text.rstrip().splitlines() if row.strip()]
    return "\n".join(rows[-lines:])


def read(path: Path) -> str:
    """The text of ``path``, or "" when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def rank_logs(logs: Path, nproc: int, name: str) -> list:
    """Each rank's log file ``name`` (stdout.log, stderr.log) under torchrun's ``--log-dir``, in rank order."""
    out = []
    for rank in range(nproc):
        found = sorted(logs.glob(f"*/attempt_*/{rank}/{name}"))
        out.append(read(found[-1]) if found else "")
    return out


def root_cause(torchrun_err: str):
    """(rank, exit code) of torchrun's 'Root Cause' entry, or (None, None)."""
    part = torchrun_err.split("Root Cause", 1)[-1] if "Root Cause" in torchrun_err else ""
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", part, re.M)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", part, re.M)
    return (int(rank.group(1)) if rank else None, int(code.group(1)) if code else None)


def exit_words(code: int | None) -> str:
    """'exit code 1', or for a rank ended by a signal 'killed by SIGABRT (exit code -6)'."""
    if code is None:
        return "exit code ?"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code} (exit code {code})"
    return f"exit code {code}"


def timeout_error(launch) -> DistributedRunError:
    """The error for a run whose time ran out, with the last lines of every rank."""
    tails = "\n".join(f"--- rank {r}, last lines ---\n{text or '(nothing)'}"
                      for r, text in enumerate(launch.rank_tails(TIMEOUT_TAIL_LINES)))
    return DistributedRunError(
        "timeout",
        f"timeout: the run did not finish within {launch.timeout:g} s, so all its processes were "
        f"stopped (a rank waiting forever in a collective that another rank never joins "
        f"looks like this).\n{tails}")


def failure(launch, returncode: int, port) -> DistributedRunError:
    """The error for a torchrun that exited with ``returncode`` != 0: which rank, why, its last output."""
    torchrun_err = read(launch.work / "torchrun.err")
    stderrs = rank_logs(launch.logs, launch.nproc, "stderr.log")
    everything = torchrun_err + "".join(stderrs)
    if re.search(r"EADDRINUSE|address already in use", everything, re.I):
        return DistributedRunError("port in use", f"port in use: the rendezvous could not bind its port. "
                                   f"{'Leave port=None. ' if port is not None else ''}"
                                   f"Last lines:\n{launch.clean(tail(everything, TIMEOUT_TAIL_LINES))}")
    rank, code = root_cause(torchrun_err)
    if rank is None:  # no summary from torchrun: the first rank with a traceback
        rank = next((r for r, e in enumerate(stderrs) if "Traceback" in e), None)
    if rank is None:
        return DistributedRunError("rank failed", f"torchrun failed ({exit_words(returncode)}):\n"
                                   f"{launch.clean(tail(torchrun_err))}")
    last = launch.rank_tails(TAIL_LINES)[rank]
    return DistributedRunError(
        "rank failed",
        f"rank {rank} failed ({exit_words(code)}); torchrun stopped the other ranks. "
        f"The end of rank {rank}'s output:\n{last or '(empty)'}",
        rank=rank, tail=last)
