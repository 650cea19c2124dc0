"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per session.

- ``lab_server`` (session): JupyterLab on a free loopback port, token disabled, bound to 127.0.0.1,
  with its own temporary config, data, runtime, settings and workspace directories (no user state
  leaks in, none leaks out). It serves a *copy* of ``notebooks/``, so running cells in the browser
  can never save over the committed notebooks. Stopped at the end of the session, also after failures.
- ``learner_copy`` (session): the learner's copy made by the course's own command in the server's root,
  from which each notebook is opened and run.
- ``browser`` (session): Debian's Chromium (``/usr/bin/chromium``, or ``$AUTOGRAD_LAB_CHROMIUM``)
  driven by Playwright with ``executable_path``: no browser download, no network.
- ``lab`` (per test): a JupyterLab page with the in-page driver ``lab.js`` (``window.alTest``). The page
  is loaded once and handed from test to test, each test's documents closed after it (a page load per test
  made the suite 35 s longer on 2 cores); after a failure, or a crash, the next test gets a fresh page.
  When a test fails, its screenshot, console log and the server log go to ``test-artifacts/browser/``
  and the paths are printed with the failure.

Outside CI a machine without Chromium (or Playwright) skips these tests with an install hint;
with ``CI=true`` a missing browser fails them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autograd_lab import processes
from autograd_lab.distributed import free_port

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # pytest puts it there; tests/hub/conftest.py loads this file by path
    sys.path.insert(0, str(HERE))
from lab_page import SharedPage  # noqa: E402

REPO = HERE.parents[1]
# The notebooks under test: every *.ipynb in notebooks/ (another folder: AUTOGRAD_LAB_NOTEBOOKS=dir).
NOTEBOOKS = Path(os.environ.get("AUTOGRAD_LAB_NOTEBOOKS", REPO / "notebooks")).resolve()
ARTIFACTS = Path(os.environ.get("AUTOGRAD_LAB_ARTIFACTS", REPO / "test-artifacts")) / "browser"
CHROMIUM = os.environ.get("AUTOGRAD_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
]
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
SERVER_START_TIMEOUT = float(os.environ.get("AUTOGRAD_LAB_SERVER_TIMEOUT", 90))

INSTALL_HINT = (
    "Browser tests need Debian's Chromium and Playwright for Python:\n"
    "  sudo apt-get install chromium        (Debian; on another system set AUTOGRAD_LAB_CHROMIUM)\n"
    "  .venv/bin/python -m pip install -e '.[test]'\n"
    "AUTOGRAD_LAB_CHROMIUM may name any Chromium or Chrome binary. No browser is downloaded."
)

# JupyterLab user settings for the test server: never autosave (the copy would change under the
# test), no news. Cells are windowed as JupyterLab's default does it for a learner
# ("contentVisibility": every cell in the page, those out of view not rendered; lab.js renders a cell
# for the moment it reads its text).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False, "confirmClosingDocument": False},
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
        "doNotDisturbMode": True,
    },
}
SERVER_CONFIG = {
    "ServerApp": {"terminals_enabled": False},
    "LabApp": {"news_url": None, "extension_manager": "readonly", "expose_app_in_browser": True},
}


SECONDS = "browser tests: seconds per notebook"  # the table printed at the end of the session


def pytest_generate_tests(metafunc):
    """Parametrize ``notebook`` with every notebook found: discovered, never listed by hand."""
    if "notebook" in metafunc.fixturenames:
        found = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if not p.name.startswith("."))
        metafunc.parametrize("notebook", found, ids=[p.stem for p in found])


def _missing(reason: str):
    message = f"{reason}\n{INSTALL_HINT}"
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def _not_course_files(folder: str, names: list[str]) -> set[str]:
    """What copying notebooks/ leaves out: checkpoints, caches, and anything not a plain file or
    folder (a running kernel's IPC sockets, for one)."""
    skip = set()
    for name in names:
        path = os.path.join(folder, name)
        if name in (".ipynb_checkpoints", "__pycache__") or not (os.path.isfile(path) or os.path.isdir(path)):
            skip.add(name)
    return skip


class LabServer:
    def __init__(self, root: Path, base: Path):
        self.root = root
        self.base = base
        self.log_path = base / "jupyterlab.log"
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self._enders: list[threading.Thread] = []

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
        dirs = {name: self.base / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        (dirs["config"] / "jupyter_server_config.json").write_text(json.dumps(SERVER_CONFIG, indent=1))
        for plugin, values in LAB_SETTINGS.items():
            path = dirs["settings"] / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, indent=1))
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            IPYTHONDIR=str(dirs["ipython"]),
            PYTHONUNBUFFERED="1",
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        )
        return env

    def start(self):
        env = self._env()
        last_error = "no attempt"
        for _attempt in range(3):  # a port taken between choosing it and binding: try another
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            log = open(self.log_path, "ab")
            cmd = [
                sys.executable, "-m", "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={self.root}",
                "--IdentityProvider.token=",
                "--ServerApp.password=",
            ]  # fmt: skip
            self.proc = processes.start(
                cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            log.close()
            deadline = time.monotonic() + SERVER_START_TIMEOUT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    last_error = f"JupyterLab exited with code {self.proc.returncode}"
                    break
                try:
                    with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                        if r.status == 200:
                            return
                except (urllib.error.URLError, OSError) as err:
                    last_error = str(err)
                time.sleep(0.2)
            else:
                self.stop()
                raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_TIMEOUT:.0f} s; log: {self.log_path}")
        tail = self.log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"JupyterLab did not start ({last_error}). Log {self.log_path}:\n{tail}")

    def _api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.url}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def start_session(self, path: str) -> threading.Thread:
        """Start the notebook's kernel now, in the background: it boots while the page loads,
        and JupyterLab attaches to it (one session per path)."""
        body = json.dumps({"path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": "python3"}})

        def post():
            req = urllib.request.Request(
                f"{self.url}/api/sessions", data=body.encode(), method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                urllib.request.urlopen(req, timeout=60).close()
            except (urllib.error.URLError, OSError):
                pass  # JupyterLab then starts the kernel itself

        thread = threading.Thread(target=post, daemon=True)
        thread.start()
        return thread

    def end_session(self, session_id: str):
        """Shut a notebook's kernel down in the background: the next notebook need not wait for it."""

        def delete():
            try:
                self._api("DELETE", f"/api/sessions/{session_id}")
            except (urllib.error.URLError, OSError, ValueError):
                pass

        thread = threading.Thread(target=delete, daemon=True)
        thread.start()
        self._enders.append(thread)

    def shutdown_kernels(self):
        try:
            for kernel in self._api("GET", "/api/kernels") or []:
                self._api("DELETE", f"/api/kernels/{kernel['id']}")
        except (urllib.error.URLError, OSError, ValueError):
            pass

    def stop(self):
        for thread in self._enders:
            thread.join(timeout=20)
        if self.proc is None or self.proc.poll() is not None:
            return
        self.shutdown_kernels()
        # the server alone gets SIGTERM: it shuts its kernels down itself; its group is killed if it hangs
        processes.stop(self.proc, signal.SIGTERM, grace=20, leader_only=True)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Chromium not found at {CHROMIUM}.")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("Playwright for Python is not installed.")
    return CHROMIUM


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, chromium_path):
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        _missing("JupyterLab is not installed.")
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "root"  # served notebooks are at notebooks/<name> under it, wherever they came from
    # Serve a copy: nothing the browser does can write into the repository's notebooks.
    shutil.copytree(NOTEBOOKS, root / "notebooks", ignore=_not_course_files)
    server = LabServer(root, base)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def learner_copy(lab_server) -> Path:
    """The learner's copy of the notebooks under test, made by the course's own command (``make lab``) beside the
    served notebooks/: outputs cleared, solutions/ beside them."""
    from autograd_lab import course

    folder = lab_server.root / course.DEFAULT_FOLDER
    course.update(folder, NOTEBOOKS)
    return folder


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


class Lab:
    """A test's JupyterLab page on the test server, with the in-page driver ``window.alTest``."""

    def __init__(self, page, server: LabServer, console: list[str]):
        self.page = page
        self.server = server
        self.console = console
        self.path = None
        self.focus_cell = None  # the cell a failure is about: scrolled into view for the screenshot
        self.timings: dict[str, float] = {}
        self.operated: dict[str, int] = {}  # kind of control -> how many times the test moved one
        self.failed = False
        self._last = time.monotonic()

    def js(self, expression: str, arg=None):
        return self.page.evaluate(expression, arg)

    def open(self, path: str, timeout_s: float = 90):
        self.path = path
        kernel_starting = self.server.start_session(path)
        if self.js("() => !!(window.jupyterapp && window.alTest)"):  # the page of the test before: reused
            self.js("() => window.alTest.closeAll()")
        else:
            self.page.goto(f"{self.server.url}/lab?reset", wait_until="domcontentloaded")
            self.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout_s * 1000)
            self.page.evaluate((HERE / "lab.js").read_text())
            self.js("() => window.alTest.ready()")
        self.phase("load lab")
        kernel_starting.join(timeout=timeout_s)
        self.js("([path, ms]) => window.alTest.open(path, ms)", [path, timeout_s * 1000])
        self.phase("open notebook")

    def wait(self, expression: str, arg=None, *, timeout_s: float, what: str):
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            self.page.wait_for_function(expression, arg=arg, timeout=timeout_s * 1000, polling=100)
        except PlaywrightTimeout:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from None

    @staticmethod
    def artifacts_dir(test_name: str) -> Path:
        return ARTIFACTS / re.sub(r"[^\w.-]+", "_", test_name).strip("_")

    def screenshot_and_log(self, name: str) -> list[Path]:
        out = self.artifacts_dir(name)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        try:
            if self.focus_cell:
                self.js("(id) => window.alTest && window.alTest.scrollToCell(id)", self.focus_cell)
            shot = out / "screenshot.png"
            self.page.screenshot(path=str(shot), timeout=15000)
            paths.append(shot)
        except Exception as err:  # a crashed page: keep the log at least
            self.console.append(f"[test] screenshot failed: {err}")
        log = out / "console.log"
        log.write_text("\n".join(self.console) + "\n")
        paths.append(log)
        if self.server.log_path.exists():
            server_log = out / "jupyterlab.log"
            shutil.copyfile(self.server.log_path, server_log)
            paths.append(server_log)
        return paths

    def phase(self, name: str):
        """Record how long the phase that ends now took (printed in the session's summary)."""
        now = time.monotonic()
        self.timings[name] = now - self._last
        self._last = now

    def session_id(self):
        try:
            return self.js("() => window.alTest ? window.alTest.sessionId() : null")
        except Exception:
            return None


@pytest.fixture(scope="session")
def browser_context(browser):
    # One context for the session: its HTTP cache makes each fresh page load JupyterLab faster.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)  # clicks and page loads on a busy 2-core machine
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="session")
def shared_page(browser_context):
    shared = SharedPage(browser_context)
    try:
        yield shared
    finally:
        shared.drop()


@pytest.fixture
def lab(shared_page, lab_server, request, seconds_table):
    page = shared_page.take()
    session = Lab(page, lab_server, shared_page.console)
    request.node._al_lab = session
    request.node._al_shared = shared_page
    shutil.rmtree(session.artifacts_dir(request.node.name), ignore_errors=True)  # no stale artifacts
    try:
        yield session
    finally:
        if session.failed:
            session.phase("until it failed")
        session_id = session.session_id()
        if session.failed or getattr(request.node, "_al_failed", False):
            shared_page.drop()  # whatever state made it fail is not passed on
        else:
            with contextlib.suppress(Exception):
                session.js("() => window.alTest && window.alTest.closeAll()")
        if session_id:
            lab_server.end_session(session_id)
        if session.timings:
            name = request.node.callspec.id if hasattr(request.node, "callspec") else request.node.name
            phases = ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in session.timings.items())
            controls = ", ".join(f"{kind} x{n}" for kind, n in sorted(session.operated.items())) or "none"
            seconds_table(SECONDS).add(name, sum(session.timings.values()), f"{phases}; controls operated: {controls}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    session = getattr(item, "_al_lab", None)
    if report.failed:  # after any failure the next test gets a fresh page
        item._al_failed = True  # set-up or call: the lab fixture's teardown drops the page
        shared = getattr(item, "_al_shared", None)
        if report.when == "teardown" and shared is not None:
            shared.drop()  # a teardown failure is reported after the lab fixture's teardown: dropped here
    if session is not None and report.failed and report.when == "call":
        session.failed = True
        paths = session.screenshot_and_log(item.name)
        listing = "\n".join(f"  {p.relative_to(REPO) if p.is_relative_to(REPO) else p}" for p in paths)
        report.sections.append(("browser artifacts", f"written for {session.path}:\n{listing}"))
    return report

