#!/usr/bin/env python3
"""Autograd Lab on JupyterHub, on this machine: the settings jupyterhub_config.py reads, and two commands.

Run from the repository root with the course's Python:

    .venv/bin/python tools/hub/hub.py start            JupyterHub on http://127.0.0.1:8000 (Ctrl+C stops it
                                                       and every user's server); passwords printed once
    .venv/bin/python tools/hub/hub.py as USER -- CMD   run CMD as USER's server would (home, nbgrader
                                                       exchange), e.g. the instructor's nbgrader commands

Settings (environment variables; ``start`` fills in what is missing):

    AUTOGRAD_LAB_HUB_DIR          the hub's state: database, cookie secret, homes/<user>/, exchange/
                                  (default build/hub)
    AUTOGRAD_LAB_HUB_IP           the address the hub listens on (default 127.0.0.1: this machine only)
    AUTOGRAD_LAB_HUB_PORT         its port (default 8000)
    AUTOGRAD_LAB_INSTRUCTORS      comma-separated instructor names (default "instructor"): hub admins,
                                  with nbgrader's formgrader; the first one's home holds the course
    AUTOGRAD_LAB_STUDENTS         comma-separated student names; empty: any name may log in as a student
    AUTOGRAD_LAB_STUDENT_PASSWORD the one password of every student (8 characters at least)
    AUTOGRAD_LAB_INSTRUCTOR_PASSWORD  the instructors' password (32 characters at least)

Everyone runs as the Unix user who started the hub, with a home folder of their own under
AUTOGRAD_LAB_HUB_DIR: a class on one trusted machine or a test, not isolation (see README.md here for
a real class on The Littlest JupyterHub or Kubernetes).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent  # the course's environment: the hub and every user's server run from it
LOCAL_PROXY = HERE / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
PROXY_HINT = (
    "JupyterHub's proxy, configurable-http-proxy, is missing: run `npm ci --prefix tools/hub/proxy` "
    "(Node.js 20 or newer; or `make hub`)"
)
# Jupyter config folders (JUPYTER_CONFIG_PATH) of each role, most specific first.
CONFIG_DIRS = {
    "instructor": [HERE / "jupyter" / "common"],
    "student": [HERE / "jupyter" / "student", HERE / "jupyter" / "common"],
}
COURSE_FOLDER = "course"  # the nbgrader course directory, in the first instructor's home
MIN_STUDENT_PASSWORD, MIN_INSTRUCTOR_PASSWORD = 8, 32  # SharedPasswordAuthenticator's minimum lengths


def proxy() -> Path | None:
    """configurable-http-proxy: the pinned one in proxy/, else one on PATH (conda-forge's jupyterhub brings it)."""
    if LOCAL_PROXY.exists():
        return LOCAL_PROXY
    found = shutil.which("configurable-http-proxy", path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    return Path(found) if found else None


def required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise SystemExit(f"{name} is not set: start the hub with `tools/hub/hub.py start`, which makes one up")
    return value


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


@dataclass(frozen=True)
class Settings:
    state: Path
    ip: str
    port: int
    instructors: list[str]
    students: list[str]  # empty: any name may log in as a student

    def home(self, user: str) -> Path:
        return self.state / "homes" / user

    @property
    def exchange(self) -> Path:
        return self.state / "exchange"

    @property
    def course(self) -> Path:
        return self.home(self.instructors[0]) / COURSE_FOLDER

    def role(self, user: str) -> str:
        return "instructor" if user in self.instructors else "student"


def settings(env=None) -> Settings:
    """The hub's settings from the environment (see the module's docstring)."""
    env = os.environ if env is None else env
    state = Path(env.get("AUTOGRAD_LAB_HUB_DIR") or REPO / "build" / "hub").resolve()
    instructors = _names(env.get("AUTOGRAD_LAB_INSTRUCTORS", "instructor"))
    if not instructors:
        raise SystemExit("AUTOGRAD_LAB_INSTRUCTORS names nobody: the class needs an instructor")
    students = _names(env.get("AUTOGRAD_LAB_STUDENTS", ""))
    both = sorted(set(instructors) & set(students))
    if both:
        raise SystemExit(f"{', '.join(both)}: an instructor cannot also be a student")
    port = int(env.get("AUTOGRAD_LAB_HUB_PORT", "8000"))
    return Settings(state, env.get("AUTOGRAD_LAB_HUB_IP", "127.0.0.1"), port, instructors, students)


def user_environment(s: Settings, user: str) -> dict[str, str]:
    """What a user's server (and every kernel and nbgrader command in it) gets on top of the hub's environment."""
    role = s.role(user)
    env = {
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", os.defpath)]),
        "JUPYTER_CONFIG_PATH": os.pathsep.join(str(d) for d in CONFIG_DIRS[role]),
        "AUTOGRAD_LAB_ROLE": role,
        "AUTOGRAD_LAB_EXCHANGE": str(s.exchange),
        "AUTOGRAD_LAB_CLASSROOM_CONFIG": str(REPO / "tools" / "classroom" / "nbgrader_config.py"),
    }
    if role == "instructor":
        env["AUTOGRAD_LAB_COURSE"] = str(s.course)
    return env


def run_as(s: Settings, user: str, cmd: list[str], env_base=None, **kwargs) -> subprocess.CompletedProcess:
    """Run a command with the environment the user's server gives it (their home, the exchange, the course)."""
    home = s.home(user)
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env_base is None else env_base)
    env.update(user_environment(s, user), HOME=str(home), USER=user, JUPYTERHUB_USER=user)
    return subprocess.run(cmd, env=env, **kwargs)


def _password(env: dict, name: str, length: int) -> str:
    if not env.get(name):
        env[name] = secrets.token_urlsafe(length)[:length]
        print(f"{name}={env[name]}")
    return env[name]


def start(argv: list[str]) -> int:
    """Start JupyterHub with jupyterhub_config.py; missing passwords are made up and printed once."""
    if proxy() is None:
        raise SystemExit(PROXY_HINT)
    env = dict(os.environ)
    s = settings(env)
    s.state.mkdir(parents=True, exist_ok=True)
    _password(env, "AUTOGRAD_LAB_STUDENT_PASSWORD", 12)
    _password(env, "AUTOGRAD_LAB_INSTRUCTOR_PASSWORD", MIN_INSTRUCTOR_PASSWORD)
    print(f"Autograd Lab hub: http://{s.ip}:{s.port}  instructors: {', '.join(s.instructors)}  state: {s.state}")
    cmd = [str(BIN / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py"), *argv]
    hub = subprocess.Popen(cmd, cwd=s.state, env=env)
    signal.signal(signal.SIGTERM, lambda *_: hub.terminate())  # pass a stop on: the hub stops its servers
    while True:
        try:
            return hub.wait()
        except KeyboardInterrupt:  # Ctrl+C reached the hub too: wait while it stops every user's server
            continue


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"]:
        return start(argv[1:])
    if argv[:1] == ["as"] and len(argv) >= 4 and argv[2] == "--":
        return run_as(settings(), argv[1], argv[3:]).returncode
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
