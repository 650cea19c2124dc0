"""Fixtures for the class-on-JupyterHub test: one hub, one Chromium, both stopped and cleaned up.

- ``hub``: JupyterHub started the way an instructor starts it (``tools/hub/hub.py start``), on a free
  loopback port, with its whole state (database, homes, exchange, every temporary file of the hub, the
  users' servers and their kernels) in one temporary folder. Stopping it must leave no process of the
  ones it started, and the folder is removed.
- ``chromium``: Debian's Chromium driven by Playwright, as in tests/browser (no browser download).

Missing tools (JupyterHub, configurable-http-proxy, Chromium, Playwright, nbgrader) skip the test with
the command that installs them; with ``CI=true`` they fail it instead.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autograd_lab import processes
from autograd_lab.distributed import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HUB_TOOL = REPO / "tools" / "hub" / "hub.py"
START_TIMEOUT_S = float(os.environ.get("AUTOGRAD_LAB_HUB_START_TIMEOUT", 90))
STOP_TIMEOUT_S = 30
STUDENTS = ("alice", "bob")
INSTRUCTOR = "instructor"
SECONDS = "class on JupyterHub: seconds per phase"  # the table printed at the end of the session


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules.get(name) or importlib.util.module_from_spec(spec)
    if name not in sys.modules:
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


hubtool = _load("autograd_lab_hub_tool", HUB_TOOL)
# The browser, its flags and the install hint have one home: the browser tests' conftest.
browser_conf = _load("autograd_lab_browser_conftest", REPO / "tests" / "browser" / "conftest.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: a whole class on JupyterHub in real browsers (pytest -m hub)")


def pytest_collection_modifyitems(config, items):
    """The class takes minutes and needs the hub's own install: it runs only when asked for by name (-m hub)."""
    if "hub" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a class on JupyterHub runs with -m hub (make test-hub)")
    for item in items:
        if item.get_closest_marker("hub"):
            item.add_marker(skip)


def _missing(what: str, hint: str):
    message = f"{what}\n{hint}"
    if browser_conf.IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


class Hub:
    """JupyterHub for one instructor and two students, all of it under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.log_path = root / "hub.log"
        self.passwords = {INSTRUCTOR: secrets.token_urlsafe(32)[:32]}
        student_password = secrets.token_urlsafe(12)
        self.passwords.update({name: student_password for name in STUDENTS})
        self.env = dict(
            os.environ,
            AUTOGRAD_LAB_HUB_DIR=str(root / "state"),
            AUTOGRAD_LAB_HUB_PORT=str(free_port()),
            AUTOGRAD_LAB_INSTRUCTORS=INSTRUCTOR,
            AUTOGRAD_LAB_STUDENTS=",".join(STUDENTS),
            AUTOGRAD_LAB_STUDENT_PASSWORD=student_password,
            AUTOGRAD_LAB_INSTRUCTOR_PASSWORD=self.passwords[INSTRUCTOR],
            TMPDIR=str(root / "tmp"),  # every temporary file of the hub and of what it starts stays in root
        )
        self.settings = hubtool.settings(self.env)
        self.url = f"http://127.0.0.1:{self.settings.port}"
        self.instructor, self.students = INSTRUCTOR, STUDENTS
        self.pages: dict = {}  # user -> their browser page, for the screenshots of a failure
        self.proc: subprocess.Popen | None = None
        self.started: dict[int, str] = {}  # pid -> command line, of every process seen under the hub

    def start(self):
        (self.root / "tmp").mkdir(parents=True)
        with open(self.log_path, "ab") as log:
            self.proc = processes.start(
                [sys.executable, str(HUB_TOOL), "start"], cwd=REPO, env=self.env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the hub exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api/", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the hub did not answer within {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else "(no log)"

    def note_processes(self):
        """Remember every process now running under the hub (servers, kernels, the proxy)."""
        import psutil

        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self.started.setdefault(p.pid, " ".join(p.cmdline()[:3]))
        except psutil.Error:
            pass

    def run_as(self, user: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """A command in the user's environment, as in a terminal of their server (here: the instructor's kit)."""
        proc = hubtool.run_as(
            hubtool.settings(self.env), user, [sys.executable, *args], cwd=REPO, capture_output=True, text=True,
            timeout=timeout, env_base=self.env,
        )  # fmt: skip
        assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return proc

    def stop(self) -> list[str]:
        """Stop the hub (it stops every user's server and the proxy); return what is still running."""
        import psutil

        if self.proc is None:
            return []
        self.note_processes()
        # SIGINT to the group is what Ctrl+C does to `hub.py start` and the hub under it
        processes.stop(self.proc, signal.SIGINT, grace=STOP_TIMEOUT_S)
        left = []
        deadline = time.monotonic() + 10
        for pid, cmd in self.started.items():
            try:
                p = psutil.Process(pid)
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except psutil.NoSuchProcess:
                continue
            except psutil.TimeoutExpired:
                left.append(f"{pid} {cmd}")
                p.kill()
        return left


@pytest.fixture(scope="module")
def chromium():
    path = browser_conf.CHROMIUM
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        _missing(f"Chromium not found at {path}.", browser_conf.INSTALL_HINT)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed.", browser_conf.INSTALL_HINT)
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=browser_conf.CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


@pytest.fixture(scope="session")
def hub_proxy() -> Path:
    """configurable-http-proxy, which the hub's configuration names (from npm: tools/hub/proxy)."""
    if hubtool.proxy() is None:
        _missing("JupyterHub's proxy is not installed.", hubtool.PROXY_HINT)
    return hubtool.proxy()


@pytest.fixture(scope="module")
def hub(chromium, hub_proxy, seconds_table):
    for module, hint in (("jupyterhub", "the hub extra"), ("nbgrader", "the classroom extra"), ("psutil", "psutil")):
        if importlib.util.find_spec(module) is None:
            _missing(f"{module} is not installed.", f"Install {hint}: .venv/bin/python -m pip install -e '.[hub]'")
    root = Path(tempfile.mkdtemp(prefix="autograd-lab-hub-"))
    server = Hub(root)
    failed = None
    try:
        started = time.monotonic()
        server.start()
        seconds_table(SECONDS).add("hub starts", time.monotonic() - started)
        yield server
    finally:
        started = time.monotonic()
        left = server.stop()
        seconds_table(SECONDS).add("everything stops", time.monotonic() - started)
        if left:
            failed = f"processes left after the hub stopped (killed now): {left}\n{server.log_tail()}"
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            failed = (failed or "") + f"\nthe hub's folder could not be removed: {root}"
    if failed:
        pytest.fail(failed, pytrace=False)


class Phases:
    """Call with a phase's name when it ends: its seconds go into the session's summary."""

    def __init__(self, table):
        self.table = table
        self.last = time.monotonic()

    def __call__(self, name: str):
        now = time.monotonic()
        self.table.add(name, now - self.last)
        self.last = now


@pytest.fixture
def phase(hub, seconds_table):
    return Phases(seconds_table(SECONDS))


ARTIFACTS = Path(os.environ.get("AUTOGRAD_LAB_ARTIFACTS", REPO / "test-artifacts")) / "hub"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure: a screenshot of every user's page and the hub's log, under test-artifacts/hub/."""
    report = yield
    server = item.funcargs.get("hub") if hasattr(item, "funcargs") else None
    if isinstance(server, Hub) and report.failed and report.when == "call":
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
        ARTIFACTS.mkdir(parents=True)
        for user, page in server.pages.items():
            try:
                page.screenshot(path=str(ARTIFACTS / f"{user}.png"), timeout=15000)
            except Exception as err:  # a closed or crashed page: the log still helps
                (ARTIFACTS / f"{user}.txt").write_text(f"no screenshot: {err}\n")
        if server.log_path.exists():
            shutil.copyfile(server.log_path, ARTIFACTS / "hub.log")
        report.sections.append(("hub artifacts", f"screenshots and the hub's log: {ARTIFACTS}"))
    return report

