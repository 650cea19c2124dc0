"""The hub's configuration, read without starting anything.

tools/hub/jupyterhub_config.py is loaded the way JupyterHub loads it (traitlets), under a made-up
environment: the hub listens on loopback only, students and instructors get the roles the class needs,
and the settings refuse what would make a class without an instructor or a person in both roles.
The configuration names JupyterHub's proxy, which only the hub's set-up installs: the tests that load it
carry the ``hub`` mark and run in ``make test-hub``; the others run in every suite.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HUB_DIR = REPO / "tools" / "hub"
_spec = importlib.util.spec_from_file_location("autograd_lab_hub_tool", HUB_DIR / "hub.py")
hubtool = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = hubtool
    _spec.loader.exec_module(hubtool)

ENV = {
    "AUTOGRAD_LAB_HUB_PORT": "8123",
    "AUTOGRAD_LAB_INSTRUCTORS": "teacher",
    "AUTOGRAD_LAB_STUDENTS": "alice, bob",
    "AUTOGRAD_LAB_STUDENT_PASSWORD": "student-pass",
    "AUTOGRAD_LAB_INSTRUCTOR_PASSWORD": "i" * 32,
}


class FakeSpawner:
    def __init__(self, name: str):
        self.user = type("User", (), {"name": name})()


@pytest.fixture
def config(hub_proxy, tmp_path, monkeypatch):
    from traitlets.config.loader import PyFileConfigLoader

    for key, value in {**ENV, "AUTOGRAD_LAB_HUB_DIR": str(tmp_path / "state")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the config puts its folder on sys.path
    return PyFileConfigLoader("jupyterhub_config.py", path=str(HUB_DIR)).load_config()


def environment(config, user: str) -> dict[str, str]:
    return {key: value(FakeSpawner(user)) for key, value in config.Spawner.environment.items()}


@pytest.mark.hub
def test_the_hub_listens_on_loopback_with_its_state_in_one_folder(config, tmp_path):
    assert config.JupyterHub.bind_url == "http://127.0.0.1:8123"
    assert config.JupyterHub.hub_ip == "127.0.0.1" and config.Spawner.ip == "127.0.0.1"
    assert config.ConfigurableHTTPProxy.api_url.startswith("http://127.0.0.1:")
    assert str(tmp_path / "state") in config.JupyterHub.db_url
    assert (tmp_path / "state" / "exchange").is_dir()  # the formgrader offers Release only when it exists
    assert config.SimpleLocalProcessSpawner.home_dir_template == str(tmp_path / "state" / "homes" / "{username}")


@pytest.mark.hub
def test_log_in_allows_the_class_and_makes_the_instructor_admin(config):
    assert config.Authenticator.admin_users == {"teacher"}
    assert config.Authenticator.allowed_users == {"alice", "bob"}
    assert config.SharedPasswordAuthenticator.user_password == ENV["AUTOGRAD_LAB_STUDENT_PASSWORD"]


@pytest.mark.hub
def test_every_server_runs_the_course_environment_and_a_role(config, tmp_path):
    assert Path(config.Spawner.cmd[0]).parent == Path(sys.executable).parent
    student, teacher = environment(config, "alice"), environment(config, "teacher")
    assert student["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert student["AUTOGRAD_LAB_ROLE"] == "student" and teacher["AUTOGRAD_LAB_ROLE"] == "instructor"
    assert student["JUPYTER_CONFIG_PATH"].split(":")[0].endswith("jupyter/student")  # formgrader off
    assert "jupyter/student" not in teacher["JUPYTER_CONFIG_PATH"]
    assert teacher["AUTOGRAD_LAB_COURSE"] == str(tmp_path / "state" / "homes" / "teacher" / "course")
    assert student["AUTOGRAD_LAB_COURSE"] == ""
    assert student["AUTOGRAD_LAB_EXCHANGE"] == teacher["AUTOGRAD_LAB_EXCHANGE"]


def test_nbgrader_files_a_submission_under_the_hub_name(monkeypatch, tmp_path):
    nbgrader = pytest.importorskip("nbgrader.apps")
    s = hubtool.settings({**ENV, "AUTOGRAD_LAB_HUB_DIR": str(tmp_path)})
    for user, student_id in (("bob", "bob"), ("teacher", "*")):
        for key, value in {**hubtool.user_environment(s, user), "JUPYTERHUB_USER": user}.items():
            monkeypatch.setenv(key, value)
        app = nbgrader.NbGraderApp()
        app.config_file_paths.append([str(HUB_DIR / "jupyter" / "common")])
        app.load_config_file()
        assert app.config.CourseDirectory.get("student_id", "*") == student_id
        assert app.config.Exchange.root == str(tmp_path / "exchange")
        assert app.config.CourseDirectory.course_id  # the classroom kit's course


@pytest.mark.parametrize(
    "env, message",
    [
        ({"AUTOGRAD_LAB_INSTRUCTORS": " , "}, "names nobody"),
        ({"AUTOGRAD_LAB_INSTRUCTORS": "bob", "AUTOGRAD_LAB_STUDENTS": "alice,bob"}, "bob: an instructor cannot"),
    ],
)
def test_settings_refuse_a_class_that_cannot_work(env, message):
    with pytest.raises(SystemExit, match=message):
        hubtool.settings(env)


def test_a_missing_password_names_the_variable(monkeypatch):
    monkeypatch.delenv("AUTOGRAD_LAB_STUDENT_PASSWORD", raising=False)
    with pytest.raises(SystemExit, match="AUTOGRAD_LAB_STUDENT_PASSWORD is not set"):
        hubtool.required("AUTOGRAD_LAB_STUDENT_PASSWORD")
