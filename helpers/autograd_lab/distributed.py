"""Instruments for notebook 06: launch a script on several local processes, and draw what they did.

``torchrun(script, nproc=2)`` runs ``python -m torch.distributed.run --standalone
--nproc-per-node 2 script`` (torchrun) from a notebook, on this machine only:

- loopback only: the ranks meet at ``MASTER_ADDR=127.0.0.1`` (``--local-addr``) and gloo
  talks over the loopback interface (``GLOO_SOCKET_IFNAME``). ``--standalone`` lets the
  rendezvous store take a free port from the operating system (no port to collide with);
  pass ``port=`` to pin it (``--rdzv-endpoint 127.0.0.1:PORT``), as on a cluster.
  PyTorch's own TCPStore listens on the wildcard address of that port for the seconds
  of the run; it offers no option to narrow that.
- bounded: the run gets ``timeout`` seconds. On a timeout, a failed rank, or an
  interrupt (the notebook's stop button), every process of the run is stopped --
  torchrun, its ranks (each of which sits in a session of its own), and their
  children, also those that detached themselves -- and ``DistributedRunError`` says what
  went wrong: the port was in use, which rank failed (its exit code or the signal that
  ended it, and the end of its output), or the time ran out.
- bound to its caller: a guard process stops the run and removes its folder when the
  kernel that started it dies; a folder left by a caller that died anyway is removed at
  the next start.
- results: each rank writes a JSON file into the folder named by the environment
  variable ``LAB_RESULTS`` (``rank0.json``, ``rank1.json``, ...); ``torchrun`` returns
  them in rank order. The folder, the logs and everything else live in a temporary
  folder that is removed afterwards.

The training script itself (DDP, ``no_sync()``, the communication hook) is written out
in the notebook; this module only launches it and draws its timeline.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# This file also runs as a script (the guard process, see _start_guard): top-level imports stay absolute
# (the standard library and psutil), so that it starts without the package.
import psutil

__all__ = [
    "DistributedRunError",
    "Run",
    "draw_update_timeline",
    "free_port",
    "loopback_interface",
    "port_is_free",
    "run_button",
    "torchrun",
]

RESULTS_ENV = "LAB_RESULTS"
RUN_ENV = "AUTOGRAD_LAB_RUN"  # every process of a run carries the run's id in this variable
WORK_PREFIX = "autograd-lab-run-"  # a run's temporary folder: WORK_PREFIX + run id + a random suffix
OWNER_FILE = "owner.json"  # [pid, start time] of the process that started the run
GRACE_S = 3.0  # how long stopped processes get to exit after SIGTERM, before SIGKILL
KILL_WAIT_S = 5.0  # how long to wait for processes to vanish after SIGKILL
POLL_S = 0.05  # how often the launcher looks whether torchrun has ended
TREE_LOOK_S = 0.5  # how often it records torchrun's process tree
MAX_NPROC = 64  # more local processes than this is a typo, not an experiment
MAX_TIMEOUT_S = 3600.0  # a longer run belongs in a terminal, not in a notebook cell
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


# --------------------------------------------------------------------------- ports and interfaces


def loopback_interface() -> str:
    """The name of the loopback network interface: ``lo`` on Linux, ``lo0`` on macOS."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        names = []
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return "lo0" if sys.platform == "darwin" else "lo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now: the operating system's answer to binding port 0."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _check_port(port) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be a TCP port number from 1 to 65535, got {port!r}.")
    return port


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port``, on loopback or on any address (where the store binds)."""
    _check_port(port)
    for host in ("127.0.0.1", ""):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# --------------------------------------------------------------------------- processes
#
# Every process of a run carries RUN_ENV=<run id> in its environment (the ranks inherit it from
# torchrun, their children from them), so that a run's processes are found even after they left
# the process tree (a rank's short-lived child, a grandchild detached with setsid or a double fork).
# A guard process, started beside torchrun, waits on a pipe from the caller: when the caller dies
# (a killed kernel, a restart) the pipe closes and the guard stops the run and removes its folder.


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


def _tree(pid: int) -> set:
    """The process ``pid`` and everything below it, as psutil processes (empty once it has ended)."""
    try:
        root = psutil.Process(pid)
        return {root, *root.children(recursive=True)}
    except psutil.Error:
        return set()


def _stop(procs, grace: float | None = None) -> None:
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


def _stop_run(run_id: str, known: set) -> None:
    """Stop every process of the run: those seen in torchrun's tree and those carrying its marker."""
    _stop(known | _marked(run_id))


def _guard(run_id: str, work: str) -> None:
    """The guard's whole life: wait until the caller closes the pipe (or dies), then clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the caller is not for the guard
    sys.stdin.buffer.read()
    _stop_run(run_id, set())
    shutil.rmtree(work, ignore_errors=True)


def _start_guard(run_id: str, work: Path) -> subprocess.Popen:
    """The guard process for a run (it does not carry the run's marker, so it never stops itself)."""
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    return subprocess.Popen([sys.executable, __file__, "--guard", run_id, str(work)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _end_guard(guard: subprocess.Popen) -> None:
    """Let the guard go: the run is over and cleaned up, so its sweep finds nothing to do."""
    with contextlib.suppress(OSError):
        guard.stdin.close()
    try:
        guard.wait(timeout=GRACE_S + KILL_WAIT_S + 5)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


def _clean_stale_runs() -> None:
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
            _stop_run(work.name[len(WORK_PREFIX):].split("-")[0], set())
            shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- the launcher


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    rows = [row for row in text.rstrip().splitlines() if row.strip()]
    return "\n".join(rows[-lines:])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _rank_logs(logs: Path, nproc: int, name: str) -> list:
    out = []
    for rank in range(nproc):
        found = sorted(logs.glob(f"*/attempt_*/{rank}/{name}"))
        out.append(_read(found[-1]) if found else "")
    return out


def _root_cause(torchrun_err: str):
    """(rank, exit code) of torchrun's 'Root Cause' entry, or (None, None)."""
    part = torchrun_err.split("Root Cause", 1)[-1] if "Root Cause" in torchrun_err else ""
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", part, re.M)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", part, re.M)
    return (int(rank.group(1)) if rank else None, int(code.group(1)) if code else None)


def _exit_words(code: int | None) -> str:
    """'exit code 1', or for a rank ended by a signal 'killed by SIGABRT (exit code -6)'."""
    if code is None:
        return "exit code ?"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code} (exit code {code})"
    return f"exit code {code}"


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
    """The arguments of ``torchrun``, checked: (script path, timeout in seconds, env), or a clear error."""
    from .measure import check_seconds

    if sys.platform == "win32":
        raise OSError("starting torchrun from a notebook is supported on Linux and macOS; on Windows, "
                      "run the course inside WSL.")
    if not isinstance(script, (str, os.PathLike)):
        raise TypeError(f"script must be a file name (str or Path), got {type(script).__name__}.")
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no script named {script.name}: write it first (the %%writefile cell).")
    if isinstance(nproc, bool) or not isinstance(nproc, int) or not 1 <= nproc <= MAX_NPROC:
        raise ValueError(f"nproc must be an int from 1 to {MAX_NPROC} (processes on this machine), got {nproc!r}.")
    timeout = check_seconds("timeout", timeout, at_most=MAX_TIMEOUT_S)
    if port is not None and not port_is_free(port):
        raise DistributedRunError(
            "port in use",
            f"port {port} is already in use (another run, or another program, listens on it). "
            "Leave port=None to let torchrun --standalone pick a free one, or choose another port.")
    return script, timeout, _check_env(env)


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
        import torch

        for folder in (self.script.parent, self.work, Path(torch.__file__).parent.parent):
            text = text.replace(str(folder) + os.sep, "")
        return text

    def rank_tails(self, lines: int) -> list:
        """The end of each rank's error output (its standard output when that is empty)."""
        stdouts = _rank_logs(self.logs, self.nproc, "stdout.log")
        stderrs = _rank_logs(self.logs, self.nproc, "stderr.log")
        return [self.clean(_tail(err or out, lines)) for out, err in zip(stdouts, stderrs)]


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


def _supervise(launch: _Launch) -> int:
    """Run torchrun until it ends or the time runs out; return its exit code. Leaves no process behind."""
    known: set = set()
    start = time.monotonic()
    with open(launch.work / "torchrun.out", "wb") as out, open(launch.work / "torchrun.err", "wb") as err:
        proc = subprocess.Popen(launch.cmd, cwd=launch.script.parent, env=launch.env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            next_look = 0.0
            while proc.poll() is None:
                now = time.monotonic()
                if now - start > launch.timeout:
                    raise _TimedOut
                if now >= next_look:  # remember the ranks, to stop them even if torchrun dies first
                    known |= _tree(proc.pid)
                    next_look = now + TREE_LOOK_S
                time.sleep(POLL_S)
        finally:  # a normal end, a timeout, or the notebook's stop button (KeyboardInterrupt)
            _stop_run(launch.run_id, known | _tree(proc.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT_S)
    return proc.returncode


class _TimedOut(Exception):
    """Raised inside _supervise when the run's time is up."""


def _timeout_error(launch: _Launch) -> DistributedRunError:
    tails = "\n".join(f"--- rank {r}, last lines ---\n{tail or '(nothing)'}"
                      for r, tail in enumerate(launch.rank_tails(TIMEOUT_TAIL_LINES)))
    return DistributedRunError(
        "timeout",
        f"timeout: the run did not finish within {launch.timeout:g} s, so all its processes were "
        f"stopped (a rank waiting forever in a collective that another rank never joins "
        f"looks like this).\n{tails}")


def _failure(launch: _Launch, returncode: int, port) -> DistributedRunError:
    """The error for a torchrun that exited with ``returncode`` != 0: which rank, why, its last output."""
    torchrun_err = _read(launch.work / "torchrun.err")
    stderrs = _rank_logs(launch.logs, launch.nproc, "stderr.log")
    everything = torchrun_err + "".join(stderrs)
    if re.search(r"EADDRINUSE|address already in use", everything, re.I):
        return DistributedRunError("port in use", f"port in use: the rendezvous could not bind its port. "
                                   f"{'Leave port=None. ' if port is not None else ''}"
                                   f"Last lines:\n{launch.clean(_tail(everything, TIMEOUT_TAIL_LINES))}")
    rank, code = _root_cause(torchrun_err)
    if rank is None:  # no summary from torchrun: the first rank with a traceback
        rank = next((r for r, e in enumerate(stderrs) if "Traceback" in e), None)
    if rank is None:
        return DistributedRunError("rank failed", f"torchrun failed ({_exit_words(returncode)}):\n"
                                   f"{launch.clean(_tail(torchrun_err))}")
    tail = launch.rank_tails(TAIL_LINES)[rank]
    return DistributedRunError(
        "rank failed",
        f"rank {rank} failed ({_exit_words(code)}); torchrun stopped the other ranks. "
        f"The end of rank {rank}'s output:\n{tail or '(empty)'}",
        rank=rank, tail=tail)


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
    script, timeout, env = _check_arguments(script, nproc, timeout, port, env)
    _clean_stale_runs()
    launch = _prepare(script, args, nproc, timeout, port, env)
    guard = _start_guard(launch.run_id, launch.work)
    try:
        start = time.monotonic()
        try:
            returncode = _supervise(launch)
        except _TimedOut:
            raise _timeout_error(launch) from None
        seconds = time.monotonic() - start
        if returncode != 0:
            raise _failure(launch, returncode, port)
        ranks = _collect(launch)
        stdouts = _rank_logs(launch.logs, nproc, "stdout.log")
        return Run(ranks=ranks, seconds=seconds, command=launch.shown, stdout=stdouts)
    finally:
        shutil.rmtree(launch.work, ignore_errors=True)
        _end_guard(guard)


# --------------------------------------------------------------------------- pictures and controls

COLOURS = {"forward": "#a6cee3", "backward": "#1f78b4", "all-reduce": "#ff7f00", "step": "#33a02c"}


def _checked_events(events_by_rank) -> list:
    """``events_by_rank`` as lists of (kind, start, end) with finite times, end >= start; else a clear error."""
    try:
        ranks = [list(events) for events in events_by_rank]
    except TypeError:
        raise TypeError("events_by_rank must list, for each rank, its (kind, start, end) events.") from None
    for rank, events in enumerate(ranks):
        for event in events:
            ok = isinstance(event, (tuple, list)) and len(event) == 3 and isinstance(event[0], str)
            times = event[1:] if ok else ()
            ok = ok and all(isinstance(t, (int, float)) and math.isfinite(t) for t in times) and times[0] <= times[1]
            if not ok:
                raise ValueError(f"events_by_rank[{rank}] holds {event!r}; each event must be (kind, start, end) "
                                 "with finite times and start <= end.")
    return ranks


def draw_update_timeline(events_by_rank, *, title: str = "", unit: str = "ms"):
    """Draw one optimizer update per rank: compute on one lane, all-reduce calls on the lane below.

    ``events_by_rank`` lists, for each rank, ``(kind, start, end)`` triples in ``unit``
    since the update began; kind "all-reduce" goes to the communication lane, any
    other kind ("forward", "backward", "step") to the compute lane.
    Returns a ``Drawing`` (SVG): a widget redraws it in about a millisecond.
    """
    events_by_rank = _checked_events(events_by_rank)
    from .svg import Drawing, nice_step  # here, not at the top: the guard runs this file as a script

    lane_h, top, left, right = 26, 34, 150, 560
    lanes = 2 * len(events_by_rank)
    axis_y = top + lanes * lane_h
    d = Drawing(700, axis_y + 48, title=title)
    end = max((t1 for events in events_by_rank for _, _, t1 in events), default=0.0)
    span = end * 1.02 or 1.0
    scale = (right - left) / span
    if title:
        d.text(left, 18, title, role="title", size=12)
    for rank, events in enumerate(events_by_rank):
        for lane, name in enumerate(("compute", "all-reduce")):
            y = top + (2 * rank + lane) * lane_h
            d.text(left - 8, y + lane_h / 2 + 4, f"rank {rank} {name}", role="lane-label", size=10, anchor="end")
            for kind, t0, t1 in events:
                if (kind == "all-reduce") == (name == "all-reduce"):
                    d.rect(left + t0 * scale, y + 3, max((t1 - t0) * scale, 1.0), lane_h - 6,
                           fill=COLOURS.get(kind, "grey"), stroke="white", role=kind)
    d.line(left, axis_y, right, axis_y, role="axis")
    step = nice_step(span)
    for i in range(int(span / step) + 1):
        x = left + i * step * scale
        d.line(x, axis_y, x, axis_y + 4, role="tick")
        d.text(x, axis_y + 16, f"{i * step:g}", role="tick-label", size=10, anchor="middle")
    d.text((left + right) / 2, axis_y + 38, f"time since the update began ({unit})", role="axis-label", size=11,
           anchor="middle")
    for i, (kind, colour) in enumerate(COLOURS.items()):
        y = top + i * 20
        d.rect(right + 16, y, 12, 12, fill=colour, role="legend")
        d.text(right + 34, y + 10, kind, role="legend", size=10)
    return d


PROGRESS_TICK_S = 0.25  # how often the run button's progress bar moves
PROGRESS_CAP = 0.97  # the bar never looks finished before the run is


def _failed(exc: BaseException, where: str = "") -> str:
    """One line of HTML for a failure: the error's first line (a DistributedRunError's reason says what)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    text = first if isinstance(exc, DistributedRunError) else f"{type(exc).__name__}: {first}".rstrip(": ")
    return f"<small><b>failed{where}:</b> {html.escape(text)}</small>"


def _wait_with_progress(start, bar, status, expected_s: float):
    """Call ``start()`` in a thread of its own, moving ``bar`` meanwhile; return or raise what it did."""
    t0 = time.monotonic()
    box = {}

    def target():
        try:
            box["result"] = start()
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread, shown to the reader
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    while thread.is_alive():
        elapsed = time.monotonic() - t0
        bar.value = min(elapsed / expected_s, PROGRESS_CAP)
        status.value = f"<small>running ... {elapsed:.0f} s</small>"
        thread.join(PROGRESS_TICK_S)
    if "error" in box:
        raise box["error"]
    return box["result"]


def run_button(start, on_done, *, description: str = "Run again", expected_s: float = 10.0):
    """A button that calls ``start()`` in a background thread, with a progress bar while it runs.

    ``on_done(result)`` receives what ``start()`` returned. An error in either
    (a ``DistributedRunError`` or any other) is shown beside the button instead, and
    the button can be clicked again. The click itself returns at once.
    """
    import ipywidgets as W

    from .measure import check_seconds

    for name, fn in (("start", start), ("on_done", on_done)):
        if not callable(fn):
            raise TypeError(f"run_button: {name} must be a function, got {type(fn).__name__}.")
    expected_s = check_seconds("expected_s", expected_s)
    button = W.Button(description=description, icon="play")
    bar = W.FloatProgress(value=0.0, min=0.0, max=1.0, layout=W.Layout(width="180px"))
    bar.layout.visibility = "hidden"
    status = W.HTML(value="")

    def work():
        t0 = time.monotonic()
        try:
            result = _wait_with_progress(start, bar, status, expected_s)
            try:
                on_done(result)
            except BaseException as exc:  # noqa: BLE001 -- shown, never raised into the widget
                message = _failed(exc, " showing the run")
            else:
                message = f"<small>fresh run done in {time.monotonic() - t0:.1f} s</small>"
        except BaseException as exc:  # noqa: BLE001 -- shown, never raised into the widget
            message = _failed(exc)
        finally:
            bar.layout.visibility = "hidden"
            status.value = message
            button.disabled = False

    def click(_):
        if button.disabled:  # a run is going on already
            return
        button.disabled = True
        bar.value = 0.0
        bar.layout.visibility = "visible"
        threading.Thread(target=work, daemon=True).start()

    button.on_click(click)
    return W.HBox([button, bar, status])


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--guard":
    _guard(sys.argv[2], sys.argv[3])
