"""JupyterHub for a class of Autograd Lab on one machine (started by `tools/hub/hub.py start`).

- Loopback only by default: the hub listens on AUTOGRAD_LAB_HUB_IP:AUTOGRAD_LAB_HUB_PORT (127.0.0.1:8000);
  its internal ports (the hub's API, the proxy's API) are free loopback ports chosen at start.
- Log-in: one shared password for students, another (at least 32 characters) for instructors, who are the
  hub's admins. With AUTOGRAD_LAB_STUDENTS set, only those names may log in.
- Every user's server is the course's environment (this Python's folder: JupyterLab, torch, the helpers,
  nbgrader), started by jupyterhub-singleuser in a home folder of its own under AUTOGRAD_LAB_HUB_DIR, and
  opens JupyterLab.
- nbgrader: each role reads the Jupyter config folders tools/hub/hub.py names (JUPYTER_CONFIG_PATH):
  jupyter/common/nbgrader_config.py (the course, the exchange) for everyone; jupyter/student/ turns the
  formgrader and the course list off for students.

Security: SimpleLocalProcessSpawner runs everyone as the Unix user who started the hub. That suits a test
or a trusted room on one laptop, never the internet (README.md in this folder: a real class).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hub  # noqa: E402  (tools/hub/hub.py: the settings this file shares with the start command and tests)

from autograd_lab.distributed import free_port  # noqa: E402  (the hub runs from the course's environment)

c = get_config()  # noqa: F821 (JupyterHub provides it)
s = hub.settings()


# --- network: the public address, and internal ports nobody else needs to know
c.JupyterHub.bind_url = f"http://{s.ip}:{s.port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = free_port()
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{free_port()}"
if hub.proxy() is None:
    raise SystemExit(hub.PROXY_HINT)
c.ConfigurableHTTPProxy.command = [str(hub.proxy())]

# --- state: all of it under one folder
s.state.mkdir(parents=True, exist_ok=True)
s.exchange.mkdir(exist_ok=True)  # the formgrader offers Release and Collect only when the exchange exists
c.JupyterHub.db_url = f"sqlite:///{s.state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(s.state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(s.state / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every user's server
c.JupyterHub.cleanup_proxy = True

# --- who may log in
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = hub.required("AUTOGRAD_LAB_STUDENT_PASSWORD")
c.SharedPasswordAuthenticator.admin_password = hub.required("AUTOGRAD_LAB_INSTRUCTOR_PASSWORD")
c.Authenticator.admin_users = set(s.instructors)
if s.students:
    c.Authenticator.allowed_users = set(s.students)

# --- every user's server: the course's environment, JupyterLab, a home of its own
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = str(s.home("{username}"))
c.Spawner.cmd = [str(hub.BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.ip = "127.0.0.1"
if os.geteuid() == 0:  # containers and CI often run as root, which a Jupyter server refuses unless told
    c.Spawner.args = ["--allow-root"]
c.Spawner.start_timeout = 120  # a busy two-core laptop starting several servers at once
c.Spawner.http_timeout = 120
# Per user, computed at spawn (an instructor's environment names every variable a student's has, and more).
c.Spawner.environment = {
    key: (lambda spawner, key=key: hub.user_environment(s, spawner.user.name).get(key, ""))
    for key in hub.user_environment(s, s.instructors[0])
}
