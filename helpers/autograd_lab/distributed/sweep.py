"""Every process of a run, found and stopped: also those that left torchrun's process tree.

Every process of a run carries ``RUN_ENV=<run id>`` in its environment (the ranks inherit it from
torchrun, their children from them), so that a run's processes are found even after they left the
process tree: a rank's short-lived child, a grandchild detached with setsid or a double fork. The ranks
sit in sessions of their own, so no one process group holds a run: it is stopped process by process.

Standard library and psutil only: the guard process (:mod:`.guard`) imports this without torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

__all__ = ["RUN_ENV", "WORK_PREFIX", "OWNER_FILE", "clean_stale_runs", "stop_all", "stop_run", "tree"]

RUN_ENV = "AUTOGRAD_LAB_RUN"  # every process of a run carries the run's id in this variable
WORK_PREFIX = "autograd-lab-run-"  # a run's temporary folder: WORK_PREFIX + run id + a random suffix
OWNER_FILE = "owner.json"  # [pid, start time] of the process that started the run
GRACE_S = 3.0  # how long stopped processes get to exit after SIGTERM, before SIGKILL
KILL_WAIT_S = 5.0  # how long to wait for processes to vanish after SIGKILL
POLL_S = 0.05  # how often a stop looks whether the processes have gone


def _running(procs) -> set:
    """Those of ``procs`` (psutil processes) that still run: not ended, not zombies, pid not reused."""
    alive = set()
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.add(p)
        except psutil.Error:
            pass
    return alive


def _marked(run_id: str) -> set:
    """This user's processes whose environment carries ``RUN_ENV=run_id``."""
    found = set()
    for p in psutil.process_iter(["environ"], ad_value=None):
        if p.pid != os.getpid() and (p.info["environ"] or {}).get(RUN_ENV) == run_id:
            found.add(p)
    return found


def tree(pid: int) -> set:
    """The process ``pid`` and everything below it, as psutil processes (empty once it has ended)."""
    try:
        root = psutil.Process(pid)
        return {root, *root.children(recursive=True)}
    except psutil.Error:
        return set()


def stop_all(procs, grace: float | None = None) -> None:
    """Stop ``procs``: SIGTERM, up to ``grace`` seconds (default GRACE_S) to exit, then SIGKILL."""
    grace = GRACE_S if grace is None else grace
    procs = _running(procs)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace
    while procs and time.monotonic() < deadline:
        time.sleep(POLL_S)
        procs = _running(procs)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + KILL_WAIT_S
    while _running(procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def stop_run(run_id: str, known: set = frozenset()) -> None:
    """Stop every process of the run: those ``known`` (seen in torchrun's tree) and those carrying its marker."""
    stop_all(set(known) | _marked(run_id))


def clean_stale_runs() -> None:
    """Remove the folders (and stop the processes) of earlier runs whose caller died without cleaning up."""
    for work in Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*"):
        try:
            owner_pid, owner_start = json.loads((work / OWNER_FILE).read_text())
            owner_alive = abs(psutil.Process(owner_pid).create_time() - owner_start) < 0.01
        except psutil.NoSuchProcess:
            owner_alive = False
        except (OSError, ValueError, TypeError, psutil.Error):
            continue  # not ours to judge (another user's, or a folder being set up right now)
        if not owner_alive:
            stop_run(work.name[len(WORK_PREFIX):].split("-")[0])
            shutil.rmtree(work, ignore_errors=True)
