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
  children -- and ``DistributedRunError`` says what went wrong: the port was in use,
  which rank failed and the end of its error output, or the time ran out.
- results: each rank writes a JSON file into the folder named by the environment
  variable ``LAB_RESULTS`` (``rank0.json``, ``rank1.json``, ...); ``torchrun`` returns
  them in rank order. The folder, the logs and everything else live in a temporary
  folder that is removed afterwards.

The training script itself (DDP, ``no_sync()``, the communication hook) is written out
in the notebook; this module only launches it and draws its timeline.
"""

from __future__ import annotations

import json
import os
import re
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
GRACE_S = 3.0  # how long stopped processes get to exit after SIGTERM, before SIGKILL


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


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port``, on loopback or on any address (where the store binds)."""
    for host in ("127.0.0.1", ""):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# --------------------------------------------------------------------------- processes


def _children_map() -> dict:
    """{parent pid: [(child pid, start time)]} for every process we can see."""
    children: dict = {}
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()  # the command name, in (), may hold spaces
            ppid, start = int(fields[1]), fields[19]
            children.setdefault(ppid, []).append((int(entry.name), start))
        return children
    try:  # macOS and other systems without /proc
        listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "lstart="],
                                 capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return children
    for line in listing.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3:
            children.setdefault(int(parts[1]), []).append((int(parts[0]), parts[2].strip()))
    return children


def _descendants(pid: int) -> set:
    """(pid, start time) of every process below ``pid``."""
    children = _children_map()
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def _alive(procs: set) -> set:
    """Those of ``procs`` that still run (same pid and start time, not a zombie)."""
    if not procs:
        return set()
    now = {p for kids in _children_map().values() for p in kids}
    alive = set()
    for pid, start in procs & now:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "?"
        if state != "Z":
            alive.add((pid, start))
    return alive


def _signal(pids, sig):
    for pid in pids:
        for kill in (os.killpg, os.kill):  # the process's group (a rank leads its own), then the process
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _stop(proc: subprocess.Popen, known: set) -> None:
    """Stop torchrun and everything below it: SIGTERM, a grace period, then SIGKILL."""
    known |= _descendants(proc.pid)
    # only processes still running with their recorded start time: a pid that ended may since
    # belong to an unrelated process
    _signal([pid for pid, _ in _alive(known)], signal.SIGTERM)
    if proc.poll() is None:
        _signal([proc.pid], signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and (proc.poll() is None or _alive(known)):
        time.sleep(0.05)
    left = _alive(known)
    if left:  # the ranks first, so that torchrun (their parent) can still reap them
        _signal([pid for pid, _ in left], signal.SIGKILL)
        time.sleep(0.2)
    if proc.poll() is None:
        _signal([proc.pid], signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


# --------------------------------------------------------------------------- the launcher


def _tail(text: str, lines: int = 12) -> str:
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


def torchrun(script, *args, nproc: int = 2, timeout: float = 60.0, port: int | None = None,
             env: dict | None = None) -> Run:
    """Run ``script`` on ``nproc`` local processes with torchrun and return each rank's JSON results.

    Never waits longer than ``timeout`` seconds (plus a few to stop the processes);
    raises ``DistributedRunError`` with a clear message when the run fails, and leaves
    no process behind. ``port=None`` lets ``--standalone`` pick a free port; give a port
    number to pin the rendezvous to ``127.0.0.1:port``.
    """
    if sys.platform == "win32":
        raise OSError("starting torchrun from a notebook is supported on Linux and macOS; on Windows, "
                      "run the course inside WSL.")
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no script named {script.name}: write it first (the %%writefile cell).")
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive int, got {nproc!r}.")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive (seconds), got {timeout!r}.")
    if port is not None and not port_is_free(port):
        raise DistributedRunError(
            "port in use",
            f"port {port} is already in use (another run, or another program, listens on it). "
            "Leave port=None to let torchrun --standalone pick a free one, or choose another port.")

    rdzv = ["--standalone"] if port is None else [
        "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--rdzv-id", uuid.uuid4().hex]
    flags = [*rdzv, "--nproc-per-node", str(nproc), "--local-addr", "127.0.0.1", "--max-restarts", "0"]
    shown = " ".join(["torchrun", *flags, script.name, *map(str, args)])

    with tempfile.TemporaryDirectory(prefix="autograd-lab-run-") as work:
        work = Path(work)
        results, logs = work / "results", work / "logs"
        results.mkdir()
        lo = loopback_interface()
        run_env = {**os.environ, **(env or {})}
        run_env.update({
            RESULTS_ENV: str(results),
            "GLOO_SOCKET_IFNAME": lo,  # gloo's transport on loopback only
            "TP_SOCKET_IFNAME": lo,
            "OMP_NUM_THREADS": run_env.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        })
        cmd = [sys.executable, "-m", "torch.distributed.run", *flags,
               "--log-dir", str(logs), "--redirects", "3", str(script), *map(str, args)]

        def clean(text: str) -> str:  # paths a reader does not need: the scratch folders, site-packages
            import torch

            for folder, name in ((script.parent, ""), (work, ""), (Path(torch.__file__).parent.parent, "")):
                text = text.replace(str(folder) + os.sep, name)
            return text

        start = time.monotonic()
        known: set = set()
        with open(work / "torchrun.out", "wb") as out, open(work / "torchrun.err", "wb") as err:
            proc = subprocess.Popen(cmd, cwd=script.parent, env=run_env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
            try:
                next_look = 0.0
                while proc.poll() is None:
                    now = time.monotonic()
                    if now - start > timeout:
                        _stop(proc, known)
                        stdouts = _rank_logs(logs, nproc, "stdout.log")
                        stderrs = _rank_logs(logs, nproc, "stderr.log")
                        tails = "\n".join(
                            f"--- rank {r}, last lines ---\n{clean(_tail(stderrs[r] or stdouts[r], 4)) or '(nothing)'}"
                            for r in range(nproc))
                        raise DistributedRunError(
                            "timeout",
                            f"timeout: the run did not finish within {timeout:g} s, so all its processes were "
                            f"stopped (a rank waiting forever in a collective that another rank never joins "
                            f"looks like this).\n{tails}")
                    if now >= next_look:  # remember the ranks, to stop them even if torchrun dies first
                        known |= _descendants(proc.pid)
                        next_look = now + 0.5
                    time.sleep(0.05)
            except BaseException:  # a timeout above, or the notebook's stop button (KeyboardInterrupt)
                if proc.poll() is None or _alive(known):
                    _stop(proc, known)
                raise
            left = _alive(known)
            if left:  # torchrun exited but left something running: stop it too
                _signal([pid for pid, _ in left], signal.SIGKILL)
        seconds = time.monotonic() - start

        torchrun_err = _read(work / "torchrun.err")
        stdouts = _rank_logs(logs, nproc, "stdout.log")
        stderrs = _rank_logs(logs, nproc, "stderr.log")
        if proc.returncode != 0:
            everything = torchrun_err + "".join(stderrs)
            if re.search(r"EADDRINUSE|address already in use", everything, re.I):
                raise DistributedRunError("port in use", f"port in use: the rendezvous could not bind its port. "
                                          f"{'Leave port=None. ' if port is not None else ''}"
                                          f"Last lines:\n{clean(_tail(everything, 4))}")
            rank, code = _root_cause(torchrun_err)
            if rank is None:  # no summary from torchrun: the first rank with a traceback
                rank = next((r for r, e in enumerate(stderrs) if "Traceback" in e), None)
            tail = clean(_tail(stderrs[rank])) if rank is not None else ""
            if rank is None:
                raise DistributedRunError("rank failed", f"torchrun failed (exit code {proc.returncode}):\n"
                                          f"{clean(_tail(torchrun_err))}")
            raise DistributedRunError(
                "rank failed",
                f"rank {rank} failed (exit code {code if code is not None else '?'}); torchrun stopped the "
                f"other ranks. The end of rank {rank}'s error output:\n{tail or '(empty)'}",
                rank=rank, tail=tail)

        ranks = []
        for rank in range(nproc):
            path = results / f"rank{rank}.json"
            if not path.is_file():
                raise DistributedRunError(
                    "no results", f"no results: rank {rank} finished without writing rank{rank}.json into the "
                    f"folder named by ${RESULTS_ENV}.", rank=rank, tail=clean(_tail(stderrs[rank])))
            ranks.append(json.loads(path.read_text()))
    return Run(ranks=ranks, seconds=seconds, command=shown, stdout=stdouts)


# --------------------------------------------------------------------------- pictures and controls

COLOURS = {"forward": "#a6cee3", "backward": "#1f78b4", "all-reduce": "#ff7f00", "step": "#33a02c"}


def draw_update_timeline(events_by_rank, *, title: str = "", unit: str = "ms"):
    """Draw one optimizer update per rank: compute on one lane, all-reduce calls on the lane below.

    ``events_by_rank`` lists, for each rank, ``(kind, start, end)`` triples in ``unit``
    since the update began; kind "all-reduce" goes to the communication lane, any
    other kind ("forward", "backward", "step") to the compute lane.
    Returns the matplotlib Figure (closed, so a notebook shows it once).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events_by_rank = list(events_by_rank)
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.75 * len(events_by_rank)), dpi=90)
    labels, ticks, end = [], [], 0.0
    for rank, events in enumerate(events_by_rank):
        base = 2 * (len(events_by_rank) - 1 - rank)
        lanes = {base: ([], []), base + 1: ([], [])}  # one collection per lane keeps a redraw quick
        for kind, t0, t1 in events:
            spans, colours = lanes[base if kind == "all-reduce" else base + 1]
            spans.append((t0, max(t1 - t0, 1e-3)))
            colours.append(COLOURS.get(kind, "grey"))
            end = max(end, t1)
        for lane, (spans, colours) in lanes.items():
            if spans:
                ax.broken_barh(spans, (lane + 0.1, 0.8), facecolors=colours, edgecolor="white", linewidth=0.5)
        ticks += [base + 0.5, base + 1.5]
        labels += [f"rank {rank} all-reduce", f"rank {rank} compute"]
    ax.set_yticks(ticks, labels)
    ax.set_xlim(0, end * 1.02 or 1)
    ax.set_xlabel(f"time since the update began ({unit})")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, fontsize=10)
    fig.subplots_adjust(left=0.2, right=0.8, bottom=0.8 / fig.get_figheight(), top=1 - 0.35 / fig.get_figheight())
    plt.close(fig)
    return fig


def run_button(start, on_done, *, description: str = "Run again", expected_s: float = 10.0):
    """A button that calls ``start()`` in a background thread, with a progress bar while it runs.

    ``on_done(result)`` receives what ``start()`` returned; a ``DistributedRunError``
    (or any other error) is shown under the button instead. The click itself returns at once.
    """
    import ipywidgets as W

    button = W.Button(description=description, icon="play")
    bar = W.FloatProgress(value=0.0, min=0.0, max=1.0, layout=W.Layout(width="180px"))
    bar.layout.visibility = "hidden"
    status = W.HTML(value="")

    def work():
        t0 = time.monotonic()
        box = {}

        def target():
            try:
                box["result"] = start()
            except Exception as exc:  # noqa: BLE001 -- shown to the reader, never raised into the widget
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        while thread.is_alive():
            elapsed = time.monotonic() - t0
            bar.value = min(elapsed / expected_s, 0.97)
            status.value = f"<small>running ... {elapsed:.0f} s</small>"
            thread.join(0.25)
        bar.layout.visibility = "hidden"
        button.disabled = False
        if "error" in box:
            err = box["error"]
            status.value = f"<small><b>failed:</b> {str(err).splitlines()[0]}</small>"
            return
        on_done(box["result"])
        status.value = f"<small>fresh run done in {time.monotonic() - t0:.1f} s</small>"

    def click(_):
        if button.disabled:  # a run is going on already
            return
        button.disabled = True
        bar.value = 0.0
        bar.layout.visibility = "visible"
        threading.Thread(target=work, daemon=True).start()

    button.on_click(click)
    return W.HBox([button, bar, status])
