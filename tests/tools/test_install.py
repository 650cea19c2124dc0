"""tools/install.py: uv installs what pip would, from where pip would, or pip does it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import install

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

THIS_MACHINE = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/wheels/env'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///mirror/simple\\nhttps://example.org/simple'
global.find-links='/wheels/file'
install.index-url='https://index.example/simple'
global.index-url='https://ignored.example/simple'
"""


def listed(monkeypatch, text):
    real = subprocess.run

    def run(command, *args, **kwargs):
        if command[1:] == ["-m", "pip", "config", "list"]:
            return subprocess.CompletedProcess(command, 0, stdout=text, stderr="")
        return real(command, *args, **kwargs)

    monkeypatch.setattr(install.subprocess, "run", run)


def test_a_variable_overrides_the_files_and_the_install_section_overrides_global(monkeypatch):
    listed(monkeypatch, THIS_MACHINE)
    settings = install.pip_settings(sys.executable)
    assert settings["find-links"] == "/wheels/env"
    assert settings["index-url"] == "https://index.example/simple"
    assert settings["extra-index-url"].split() == ["file:///mirror/simple", "https://example.org/simple"]


def test_every_place_and_limit_pip_uses_is_handed_to_uv(monkeypatch):
    listed(monkeypatch, THIS_MACHINE)
    options, env = install.uv_options(install.pip_settings(sys.executable))
    pairs = list(zip(options[::2], options[1::2]))
    assert ("--index-url", "https://index.example/simple") in pairs
    assert ("--extra-index-url", "file:///mirror/simple") in pairs
    assert ("--extra-index-url", "https://example.org/simple") in pairs
    assert ("--find-links", "/wheels/env") in pairs
    assert ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


@pytest.mark.parametrize("setting", ["only-binary", "client-cert", "pre", "index"])
def test_a_setting_uv_is_not_told_of_sends_the_install_to_pip(setting):
    with pytest.raises(install.Unsupported, match=setting):
        install.uv_options({setting: "x"})


def test_only_the_arguments_both_installers_read_alike_go_to_uv():
    assert install.passed_on(["-c", "constraints.txt", "-e", ".[test]"]) == ["-c", "constraints.txt", "-e", ".[test]"]
    with pytest.raises(install.Unsupported, match="--no-deps"):
        install.passed_on(["--no-deps", "-e", "."])


def recorded(monkeypatch, returncode=0, stdout=""):
    """Every command the installer runs, recorded instead of run; each ends with ``returncode``. One started in
    the background is recorded as ["started", *command], its wait as ["waited"]."""
    calls = []

    def run(command, *args, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout=stdout, stderr="")

    class Started:
        def __init__(self, command, *args, **kwargs):
            calls.append(["started", *command])

        def wait(self, timeout=None):
            calls.append(["waited"])
            return 0

    monkeypatch.setattr(install.subprocess, "run", run)
    monkeypatch.setattr(install.subprocess, "Popen", Started)
    return calls


def test_pip_installs_when_uv_cannot_and_says_why(monkeypatch, capsys):
    calls = recorded(monkeypatch, stdout="global.only-binary=':all:'\n")
    monkeypatch.delenv("AUTOGRAD_LAB_INSTALLER", raising=False)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    assert "only-binary" in capsys.readouterr().out
    installs = [command for command in calls if command[1:4] == ["-m", "pip", "install"]]
    assert len(installs) == 1 and installs[0][-4:] == ["-c", "constraints.txt", "-e", "."]
    assert not any("uv" in command for command in calls)
    assert calls[-1][1:3] == ["-m", "compileall"], "then the byte-code is compiled"


def test_uv_installs_without_compiling_and_the_byte_code_is_compiled_after(monkeypatch):
    calls = recorded(monkeypatch, stdout="site-packages\n")  # also where the compiling looks
    monkeypatch.delenv("AUTOGRAD_LAB_INSTALLER", raising=False)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    (uv,) = [command for command in calls if command[1:4] == ["-m", "uv", "pip"]]
    assert uv[-4:] == ["-c", "constraints.txt", "-e", "."] and not any("compile" in arg for arg in uv)
    assert calls[-1][1:3] == ["-m", "compileall"] and calls[-1][-3:] == ["-x", install.not_compiled("site-packages"),
                                                                          "site-packages"]


@pytest.mark.parametrize("returncode, compiled", [(0, True), (1, False)], ids=["installed", "failed"])
def test_autograd_lab_installer_pip_skips_uv_and_compiles_only_after_a_good_install(monkeypatch, returncode,
                                                                                   compiled):
    calls = recorded(monkeypatch, returncode, stdout="site-packages\n")  # also where the compiling looks
    monkeypatch.setenv("AUTOGRAD_LAB_INSTALLER", "pip")
    assert install.main(["-e", "."]) == returncode
    (pip,) = [command for command in calls if command[1:4] == ["-m", "pip", "install"]]
    assert not any("uv" in command for command in calls)
    assert "--no-compile" in pip, "pip would compile one file after another"
    assert any(command[1:3] == ["-m", "compileall"] for command in calls) == compiled


@pytest.mark.parametrize("home", ["venv", "tests/venv"], ids=["in a folder", "in a folder named tests"])
def test_what_was_installed_without_byte_code_is_compiled_but_test_suites_and_test_tools(tmp_path, monkeypatch, home):
    site = tmp_path / home / "site"
    package = site / "torchlike"
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (package / "template.py").write_text("def {{ name }}():\n")  # not Python: skipped quietly, as pip skips it
    (package / "tests" / "test_x.py").write_text("y = 2\n")  # its own tests: nothing the course runs imports them
    tool = site / install.TEST_TOOLS_ONLY[0] / "models"
    tool.mkdir(parents=True)
    (tool / "zoo.py").write_text("z = 3\n")  # imported by the tests' own processes only, a few modules of it
    beside = site / f"{install.TEST_TOOLS_ONLY[0]}_extra"
    beside.mkdir()
    (beside / "__init__.py").write_text("w = 4\n")  # a package whose name only begins alike is compiled
    real = subprocess.run

    def run(command, *args, **kwargs):
        if command[1] == "-c":  # where this interpreter installs: here, the folder above
            return subprocess.CompletedProcess(command, 0, stdout=f"{site}\n", stderr="")
        return real(command, *args, **kwargs)

    monkeypatch.setattr(install.subprocess, "run", run)
    install.compile_byte_code(sys.executable)
    assert [p.name.split(".")[0] for p in (package / "__pycache__").iterdir()] == ["__init__"]
    assert not (package / "tests" / "__pycache__").exists()
    assert not (tool / "__pycache__").exists() and (beside / "__pycache__").is_dir()


def test_what_is_left_to_the_imports_is_a_test_tool_no_learner_installs():
    """A package left uncompiled is compiled in each process that imports it: only a test tool, never something
    a notebook's kernel imports."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {re.split(r"[<>=;\[ ]", r, maxsplit=1)[0].strip().lower() for r in requirements}

    for package in install.TEST_TOOLS_ONLY:
        assert package in names(project["optional-dependencies"]["test"]), package
        assert package not in names(project["dependencies"]), package


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_torch_is_compiled_while_the_rest_installs_and_waited_for_before_the_rest_is(monkeypatch, installer):
    calls = recorded(monkeypatch, stdout="/venv/site/torch\n")  # where torch lies, and the rest of the answers
    monkeypatch.setenv("AUTOGRAD_LAB_INSTALLER", installer)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    kinds = [("started" if c[0] == "started" else "waited" if c == ["waited"] else "install" if "install" in c
              and "-e" in c else "compile" if c[1:3] == ["-m", "compileall"] else None) for c in calls]
    kinds = [kind for kind in kinds if kind]
    assert kinds == ["started", "install", "waited", "compile"], calls
    started = calls[[c[0] for c in calls].index("started")]
    assert started[-3:] == ["-x", install.not_compiled("/venv/site"), "/venv/site/torch"]


def test_without_torch_nothing_is_compiled_meanwhile(monkeypatch):
    calls = recorded(monkeypatch, stdout="")
    assert install.compile_torch_meanwhile(sys.executable) is None
    assert not any(command[0] == "started" for command in calls)


def test_the_compiling_meanwhile_is_waited_for_when_the_install_is_stopped(monkeypatch):
    calls = recorded(monkeypatch, stdout="/venv/site/torch\n")

    def stopped(python, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(install, "install", stopped)
    with pytest.raises(KeyboardInterrupt):
        install.main(["-e", "."])
    assert calls[-1] == ["waited"]
