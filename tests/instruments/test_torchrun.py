"""The launcher of notebook 06, ``torchrun``: a rank that fails, a run that hangs (with a rank that ignores
SIGTERM), a port in use, a caller killed mid-run, a stale folder -- each ends with a clear error, in bounded
time, with no process left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from autograd_lab.distributed import (
    DistributedRunError,
    failures,
    free_port,
    loopback_interface,
    port_is_free,
    sweep,
    torchrun,
)

MACHINE_PATH = re.compile(r"(/root/|/tmp/|/home/\w+/|/work/|site-packages)")


def _marker_processes(marker: str) -> list:
    """Live processes (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _no_process_left(marker: str, within: float = 2.0) -> list:
    deadline = time.monotonic() + within
    while (left := _marker_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


needs_proc = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find leftover processes")


@needs_proc
@pytest.mark.slow
def test_a_failing_rank_gives_its_rank_and_error_and_stops_the_others(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[2], 'pid%s' % os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise ValueError('shard 1 is corrupt')\n"
        "time.sleep(600)\n")
    marker = f"lab-test-{uuid.uuid4().hex}"
    start = time.monotonic()
    with pytest.raises(DistributedRunError) as info:
        torchrun(script, marker, tmp_path, nproc=2, timeout=60)
    err = info.value
    assert time.monotonic() - start < 60
    assert err.reason == "rank failed" and err.rank == 1
    assert "rank 1 failed" in str(err) and "ValueError: shard 1 is corrupt" in str(err)
    assert 'File "broken.py"' in err.tail and not MACHINE_PATH.search(str(err))
    assert _no_process_left(marker) == []


@needs_proc
@pytest.mark.slow
def test_a_hang_ends_at_the_timeout_and_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "GRACE_S", 1.0)  # the SIGTERM-deaf rank is killed after this grace
    script = tmp_path / "hang.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # deaf to the polite stop\n"
        "open(os.path.join(sys.argv[2], 'pid%s' % os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "print('waiting for a peer that never comes', flush=True)\n"
        "time.sleep(600)\n")
    marker = f"lab-test-{uuid.uuid4().hex}"
    timeout = 10.0  # long enough for torchrun to start both ranks on a busy machine
    start = time.monotonic()
    with pytest.raises(DistributedRunError) as info:
        torchrun(script, marker, tmp_path, nproc=2, timeout=timeout)
    took = time.monotonic() - start
    assert info.value.reason == "timeout" and "timeout" in str(info.value)
    assert timeout <= took < timeout + sweep.GRACE_S + 6
    assert (tmp_path / "pid1").exists(), "the ranks should have started before the timeout"
    assert "waiting for a peer" in str(info.value)
    assert _no_process_left(marker) == []
    for rank in (0, 1):
        pid = int((tmp_path / f"pid{rank}").read_text())
        assert pid not in _marker_processes(marker)


def test_a_port_in_use_is_reported_before_anything_starts(tmp_path):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_is_free(port)
        start = time.monotonic()
        with pytest.raises(DistributedRunError) as info:
            torchrun(script, nproc=2, port=port, timeout=30)
        assert time.monotonic() - start < 1
    assert info.value.reason == "port in use" and f"port {port} is already in use" in str(info.value)


def test_missing_script_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.py"):
        torchrun(tmp_path / "nothere.py")
    script = tmp_path / "s.py"
    script.write_text("")
    with pytest.raises(ValueError, match="nproc"):
        torchrun(script, nproc=0)
    with pytest.raises(ValueError, match="timeout"):
        torchrun(script, timeout=0)


def test_free_port_and_loopback_interface():
    port = free_port()
    assert 1024 <= port < 65536 and port_is_free(port)
    assert loopback_interface() in {name for _, name in socket.if_nameindex()} | {"lo", "lo0"}


def test_root_cause_is_read_from_torchrun_summary():
    summary = ("Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 3)\n"
               "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
               "  exitcode  : 1 (pid: 4)\n")
    assert failures.root_cause(summary) == (1, 1)
    assert failures.root_cause("nothing useful") == (None, None)


def _wait_for(predicate, within: float) -> bool:
    deadline = time.monotonic() + within
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def _folders_of(pid: int) -> list:
    """The run folders in the temporary directory whose recorded owner is ``pid``."""
    found = []
    for work in Path(tempfile.gettempdir()).glob(f"{sweep.WORK_PREFIX}*"):
        try:
            if json.loads((work / sweep.OWNER_FILE).read_text())[0] == pid:
                found.append(work)
        except (OSError, ValueError):
            pass
    return found


HANGING_RANKS = (
    "import os, signal, sys, time\n"
    "if os.environ['RANK'] == '1':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # deaf to the polite stop\n"
    "open(os.path.join(sys.argv[2], 'pid%s' % os.environ['RANK']), 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n")


@needs_proc
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_killed_caller_takes_its_run_and_folder_with_it(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANGING_RANKS)
    marker = f"lab-test-{uuid.uuid4().hex}"
    caller = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom autograd_lab import torchrun\n"
        f"torchrun({str(script)!r}, {marker!r}, {str(tmp_path)!r}, nproc=2, timeout=300)\n")])
    try:
        assert _wait_for(lambda: all((tmp_path / f"pid{r}").exists() for r in (0, 1)), 60), "ranks never started"
        assert _marker_processes(marker) and _folders_of(caller.pid)
    finally:
        caller.send_signal(signal.SIGKILL)  # no finally, no atexit: only the guard can clean up
        caller.wait()
    assert _no_process_left(marker, within=sweep.GRACE_S + sweep.KILL_WAIT_S + 5) == []
    assert _wait_for(lambda: not _folders_of(caller.pid), 5), _folders_of(caller.pid)


@needs_proc
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_detached_and_short_lived_children_of_a_rank_are_stopped(tmp_path):
    script = tmp_path / "detach.py"
    script.write_text(
        "import json, os, subprocess, sys\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]]\n"
        "subprocess.Popen(sleeper, start_new_session=True)          # setsid\n"
        "subprocess.Popen(['sh', '-c', '\"$@\" &', 'sh', *sleeper])   # double fork: the sh exits at once\n"
        "path = os.path.join(os.environ['LAB_RESULTS'], 'rank%s.json' % os.environ['RANK'])\n"
        "json.dump({'rank': int(os.environ['RANK'])}, open(path, 'w'))\n")
    marker = f"lab-test-{uuid.uuid4().hex}"
    run = torchrun(script, marker, nproc=2, timeout=60)
    assert [r["rank"] for r in run.ranks] == [0, 1]
    assert _no_process_left(marker) == []


@needs_proc
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_rank_ended_by_a_signal_is_reported_by_name_with_its_last_output(tmp_path):
    script = tmp_path / "abort.py"
    script.write_text(
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('step 3 of 5, about to abort', flush=True)\n"
        "    os.abort()\n"
        "time.sleep(600)\n")
    with pytest.raises(DistributedRunError) as info:
        torchrun(script, nproc=2, timeout=60)
    err = info.value
    assert err.rank == 1 and "killed by SIGABRT" in str(err)
    assert "about to abort" in err.tail


@needs_proc
def test_a_stale_run_is_cleaned_at_the_next_start(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = psutil.Process(dead.pid).create_time()
    dead.wait()
    run_id = uuid.uuid4().hex
    work = Path(tempfile.mkdtemp(prefix=f"{sweep.WORK_PREFIX}{run_id}-"))
    (work / sweep.OWNER_FILE).write_text(json.dumps([dead.pid, dead_start]))
    marker = f"lab-test-{uuid.uuid4().hex}"
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker],
                              env={**os.environ, sweep.RUN_ENV: run_id}, start_new_session=True)
    mine = Path(tempfile.mkdtemp(prefix=f"{sweep.WORK_PREFIX}{uuid.uuid4().hex}-"))
    (mine / sweep.OWNER_FILE).write_text(json.dumps([os.getpid(), psutil.Process().create_time()]))
    try:
        sweep.clean_stale_runs()
        assert not work.exists() and orphan.wait(timeout=10) is not None
        assert mine.exists()  # its owner (this process) still lives
    finally:
        orphan.kill()
        orphan.wait()
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
