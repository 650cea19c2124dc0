"""``torchrun(script, nproc=2)``: a script on several local processes, from a notebook, bounded in time.

It runs ``python -m torch.distributed.run --standalone --nproc-per-node 2 script`` (torchrun), starts
the guard beside it (:mod:`.guard`), watches it until it ends or its time runs out, then stops every
process of the run (:mod:`.sweep`) and reads each rank's results, or says what went wrong
(:mod:`.failures`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .. import processes
from ..arguments import check_int, check_seconds
from .failures import TAIL_LINES, DistributedRunError, failure, rank_logs, tail, timeout_error
from .ports import loopback_interface, port_is_free
from .sweep import GRACE_S, KILL_WAIT_S, OWNER_FILE, POLL_S, RUN_ENV, WORK_PREFIX, clean_stale_runs, stop_run, tree

__all__ = ["RESULTS_ENV", "Run", "torchrun"]

RESULTS_ENV = "LAB_RESULTS"
TREE_LOOK_S = 0.5  # how often the launcher records torchrun's process tree
MAX_NPROC = 64  # more local processes than this is a typo, not an experiment
MAX_TIMEOUT_S = 3600.0  # a longer run belongs in a terminal, not in a notebook cell
GUARD_WAIT_S = GRACE_S + KILL_WAIT_S + 5  # how long a released guard may take to finish its sweep
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds autograd_lab/


@dataclass
class Run:
    """What a finished run gave back: each rank's JSON results (in rank order) and output."""

    ranks: list
    seconds: float
    command: str
    stdout: list = field(default_factory=list, repr=False)

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def _check_env(env) -> dict:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str to str, got {type(env).__name__}.")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str (environment variables are text): env[{key!r}] is "
                            f"{type(value).__name__} {value!r}; write it as a string, e.g. '{value}'.")
    return env


def _check_arguments(script, nproc, timeout, port, env):
    """The arguments of ``torchrun``, checked: (script path, nproc, timeout in seconds, env), or a clear error."""
    if sys.platform == "win32":
        raise OSError("starting torchrun from a notebook is supported on Linux and macOS; on Windows, "
                      "run the course inside WSL.")
    if not isinstance(script, (str, os.PathLike)):
        raise TypeError(f"script must be a file name (str or Path), got {type(script).__name__}.")
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no script named {script.name}: write it first (the %%writefile cell).")
    nproc = check_int("nproc", nproc, f"an int from 1 to {MAX_NPROC} (processes on this machine)", low=1,
                      high=MAX_NPROC)
    timeout = check_seconds("timeout", timeout, at_most=MAX_TIMEOUT_S)
    if port is not None and not port_is_free(port):
        raise DistributedRunError(
            "port in use",
            f"port {port} is already in use (another run, or another program, listens on it). "
            "Leave port=None to let torchrun --standalone pick a free one, or choose another port.")
    return script, nproc, timeout, _check_env(env)


def _torch_folder() -> Path | None:
    """The folder torch is installed in (site-packages), found without importing torch."""
    spec = importlib.util.find_spec("torch")
    return Path(spec.origin).parent.parent if spec is not None and spec.origin else None


@dataclass
class _Launch:
    """One run being launched: what it runs, where its files go, and how to make its messages readable."""

    script: Path
    args: tuple
    nproc: int
    timeout: float
    run_id: str
    work: Path
    cmd: list = field(default_factory=list)
    shown: str = ""
    env: dict = field(default_factory=dict)

    @property
    def results(self) -> Path:
        return self.work / "results"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    def clean(self, text: str) -> str:
        """``text`` without paths a reader does not need: the scratch folders, site-packages."""
        for folder in (self.script.parent, self.work, _torch_folder()):
            if folder is not None:
                text = text.replace(str(folder) + os.sep, "")
        return text

    def rank_tails(self, lines: int) -> list:
        """The end of each rank's error output (its standard output when that is empty)."""
        stdouts = rank_logs(self.logs, self.nproc, "stdout.log")
        stderrs = rank_logs(self.logs, self.nproc, "stderr.log")
        return [self.clean(tail(err or out, lines)) for out, err in zip(stdouts, stderrs)]


def _prepare(script: Path, args: tuple, nproc: int, timeout: float, port, env: dict) -> _Launch:
    """Make the run's folder and its command line and environment."""
    run_id = uuid.uuid4().hex
    work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{run_id}-"))
    (work / OWNER_FILE).write_text(json.dumps([os.getpid(), psutil.Process().create_time()]))
    launch = _Launch(script, args, nproc, timeout, run_id, work)
    launch.results.mkdir()
    rdzv = ["--standalone"] if port is None else [
        "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id]
    flags = [*rdzv, "--nproc-per-node", str(nproc), "--local-addr", "127.0.0.1", "--max-restarts", "0"]
    launch.shown = " ".join(["torchrun", *flags, script.name, *map(str, args)])
    launch.cmd = [sys.executable, "-m", "torch.distributed.run", *flags, "--log-dir", str(launch.logs),
                  "--redirects", "3", str(script), *map(str, args)]
    lo = loopback_interface()
    launch.env = {**os.environ, **env}
    launch.env.update({
        RESULTS_ENV: str(launch.results),
        RUN_ENV: run_id,
        "GLOO_SOCKET_IFNAME": lo,  # gloo's transport on loopback only
        "TP_SOCKET_IFNAME": lo,
        "OMP_NUM_THREADS": launch.env.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
        "PYTHON_COLORS": "0",  # Python 3.13+ colours tracebacks; a rank's last line is reported as plain text
    })
    return launch


def _start_guard(launch: _Launch) -> subprocess.Popen:
    """The guard process for a run (it does not carry the run's marker, so it never stops itself)."""
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return processes.start([sys.executable, "-m", "autograd_lab.distributed.guard", launch.run_id, str(launch.work)],
                           env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _release_guard(guard: subprocess.Popen) -> None:
    """Let the guard go: the run is over and cleaned up, so its sweep finds nothing to do."""
    with contextlib.suppress(OSError):
        guard.stdin.close()
    processes.stop(guard, grace=GUARD_WAIT_S)


class _TimedOut(Exception):
    """Raised inside _supervise when the run's time is up."""


def _supervise(launch: _Launch) -> int:
    """Run torchrun until it ends or the time runs out; return its exit code. Leaves no process behind."""
    known: set = set()
    start = time.monotonic()
    with open(launch.work / "torchrun.out", "wb") as out, open(launch.work / "torchrun.err", "wb") as err:
        proc = processes.start(launch.cmd, cwd=launch.script.parent, env=launch.env, stdin=subprocess.DEVNULL,
                               stdout=out, stderr=err)
        try:
            next_look = 0.0
            while proc.poll() is None:
                now = time.monotonic()
                if now - start > launch.timeout:
                    raise _TimedOut
                if now >= next_look:  # remember the ranks, to stop them even if torchrun dies first
                    known |= tree(proc.pid)
                    next_look = now + TREE_LOOK_S
                time.sleep(POLL_S)
        finally:  # a normal end, a timeout, or the notebook's stop button (KeyboardInterrupt)
            stop_run(launch.run_id, known | tree(proc.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT_S)
    return proc.returncode


def _collect(launch: _Launch) -> list:
    """Each rank's JSON results, in rank order."""
    ranks = []
    for rank in range(launch.nproc):
        path = launch.results / f"rank{rank}.json"
        if not path.is_file():
            raise DistributedRunError(
                "no results", f"no results: rank {rank} finished without writing rank{rank}.json into the "
                f"folder named by ${RESULTS_ENV}.", rank=rank, tail=launch.rank_tails(TAIL_LINES)[rank])
        ranks.append(json.loads(path.read_text()))
    return ranks


def torchrun(script, *args, nproc: int = 2, timeout: float = 60.0, port: int | None = None,
             env: dict | None = None) -> Run:
    """Run ``script`` on ``nproc`` local processes with torchrun and return each rank's JSON results.

    Never waits longer than ``timeout`` seconds (plus a few to stop the processes);
    raises ``DistributedRunError`` with a clear message when the run fails, and leaves
    no process behind -- also when the caller itself dies. ``port=None`` lets
    ``--standalone`` pick a free port; give a port number to pin the rendezvous to
    ``127.0.0.1:port``. ``env`` adds environment variables (str to str) for the ranks.
    """
    script, nproc, timeout, env = _check_arguments(script, nproc, timeout, port, env)
    clean_stale_runs()
    launch = _prepare(script, args, nproc, timeout, port, env)
    guard = _start_guard(launch)
    try:
        start = time.monotonic()
        try:
            returncode = _supervise(launch)
        except _TimedOut:
            raise timeout_error(launch) from None
        seconds = time.monotonic() - start
        if returncode != 0:
            raise failure(launch, returncode, port)
        ranks = _collect(launch)
        stdouts = rank_logs(launch.logs, nproc, "stdout.log")
        return Run(ranks=ranks, seconds=seconds, command=launch.shown, stdout=stdouts)
    finally:
        shutil.rmtree(launch.work, ignore_errors=True)
        _release_guard(guard)
