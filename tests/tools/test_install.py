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


def recorded(monkeypatch, returncode=0, settings="", site="", torch=""):
    """Every command the installer runs, recorded instead of run; each ends with ``returncode``. pip's settings are
    ``settings``; the installing Python's site-packages ``site``, torch's folder there ``torch``. A command started
    in the background is recorded as ["started", *command], each wait as ["waited"]."""
    calls = []

    def run(command, *args, **kwargs):
        calls.append(command)
        stdout = f"{site}\n{torch}\n" if command[1:3] == ["-c", install.WHERE] else settings
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


@pytest.fixture
def site(tmp_path):
    """A site-packages: torch, two packages and a module."""
    site = tmp_path / "site"
    for package in ("torch", "big", "small"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("x = 1\n" * (100 if package == "big" else 10))
    (site / "single.py").write_text("y = 2\n")
    (site / "small-1.0.dist-info").mkdir()  # no Python in it: nothing to compile
    return site


def compiled(calls) -> list[str]:
    """What the recorded compileall runs were given, in order."""
    return [arg for c in calls if c[0] == "started" and c[2:4] == ["-m", "compileall"] for arg in c[7:]]


def steps(calls) -> list[str]:
    """The recorded commands as steps: started (a compileall), waited, install."""
    named = [("started" if c[0] == "started" else "waited" if c == ["waited"] else
              "install" if "install" in c and "-e" in c else None) for c in calls]
    return [step for step in named if step]


def compiled_after_the_install(calls) -> bool:
    """After the install: compilers started, one a share, then each waited for."""
    after = steps(calls)[steps(calls).index("install") + 1:]
    started = after.count("started")
    return started >= 1 and after == ["started"] * started + ["waited"] * started


def test_pip_installs_when_uv_cannot_and_says_why(monkeypatch, capsys, site):
    calls = recorded(monkeypatch, settings="global.only-binary=':all:'\n", site=str(site))
    monkeypatch.delenv("AUTOGRAD_LAB_INSTALLER", raising=False)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    assert "only-binary" in capsys.readouterr().out
    installs = [command for command in calls if command[1:4] == ["-m", "pip", "install"]]
    assert len(installs) == 1 and installs[0][-4:] == ["-c", "constraints.txt", "-e", "."]
    assert not any("uv" in command for command in calls)
    assert compiled_after_the_install(calls), "then the byte-code is compiled"


def test_uv_installs_without_compiling_and_the_byte_code_is_compiled_after(monkeypatch, site):
    calls = recorded(monkeypatch, site=str(site))
    monkeypatch.delenv("AUTOGRAD_LAB_INSTALLER", raising=False)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    (uv,) = [command for command in calls if command[1:4] == ["-m", "uv", "pip"]]
    assert uv[-4:] == ["-c", "constraints.txt", "-e", "."] and not any("compile" in arg for arg in uv)
    assert steps(calls)[0] == "install" and compiled_after_the_install(calls)
    started = [c for c in calls if c[0] == "started"]
    assert all(c[4:7] == ["-qq", "-x", install.not_compiled(str(site))] for c in started)
    assert sorted(compiled(calls)) == [str(site / name) for name in ("big", "single.py", "small", "torch")]


@pytest.mark.parametrize("returncode, compiles", [(0, True), (1, False)], ids=["installed", "failed"])
def test_autograd_lab_installer_pip_skips_uv_and_compiles_only_after_a_good_install(monkeypatch, returncode,
                                                                                   compiles, site):
    calls = recorded(monkeypatch, returncode, site=str(site))
    monkeypatch.setenv("AUTOGRAD_LAB_INSTALLER", "pip")
    assert install.main(["-e", "."]) == returncode
    (pip,) = [command for command in calls if command[1:4] == ["-m", "pip", "install"]]
    assert not any("uv" in command for command in calls)
    assert "--no-compile" in pip, "pip would compile one file after another"
    assert bool(compiled(calls)) == compiles


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
    install.wait_for(install.start_compiling(sys.executable, str(site), install.installed(str(site))))
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
def test_torch_is_compiled_while_the_rest_installs_and_the_rest_after(monkeypatch, installer, site):
    calls = recorded(monkeypatch, site=str(site), torch=str(site / "torch"))
    monkeypatch.setenv("AUTOGRAD_LAB_INSTALLER", installer)
    assert install.main(["-c", "constraints.txt", "-e", "."]) == 0
    done = steps(calls)
    rest = done.count("started") - 1
    assert rest >= 1 and done == ["started", "install"] + ["started"] * rest + ["waited"] * (1 + rest), calls
    first = next(c for c in calls if c[0] == "started")
    assert first[-3:] == ["-x", install.not_compiled(str(site)), str(site / "torch")]
    assert sorted(compiled(calls)) == [str(site / name) for name in ("big", "single.py", "small", "torch")]


def test_without_torch_only_the_rest_is_compiled_after_the_install(monkeypatch, site):
    calls = recorded(monkeypatch, site=str(site))
    assert install.main(["-e", "."]) == 0
    assert steps(calls)[0] == "install" and compiled_after_the_install(calls)


def test_what_is_compiled_meanwhile_is_waited_for_when_the_install_is_stopped(monkeypatch, site):
    calls = recorded(monkeypatch, site=str(site), torch=str(site / "torch"))

    def stopped(python, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(install, "install", stopped)
    with pytest.raises(KeyboardInterrupt):
        install.main(["-e", "."])
    assert steps(calls) == ["started", "waited"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_compiling_is_shared_out_by_the_source_it_compiles(site, n):
    (site / "small" / "tests").mkdir()
    (site / "small" / "tests" / "test_many.py").write_text("t = 0\n" * 1000)  # left to the imports: weighs nothing
    left = re.compile(install.not_compiled(str(site)))
    shares = install.shares(install.installed(str(site)), n, left)
    assert len(shares) == min(n, 4) and sorted(p for share in shares for p in share) == [
        str(site / name) for name in ("big", "single.py", "small", "torch")]
    if n > 1:
        assert [str(site / "big")] in shares, "the largest alone: the rest together hold less source"


def test_one_compileall_a_core(monkeypatch, site):
    calls = recorded(monkeypatch)
    monkeypatch.setattr(install.os, "cpu_count", lambda: 3)
    assert len(install.start_compiling(sys.executable, str(site), install.installed(str(site)))) == 3
    assert len(compiled(calls)) == 4


def test_torch_compiled_meanwhile_is_not_compiled_again_however_its_path_is_spelled(site):
    spelled = str(site / "big" / ".." / "torch")
    assert str(site / "torch") not in install.installed(str(site), but=spelled)


def test_the_makefiles_torch_install_brings_the_pinned_uv_in_the_same_pip_run(tmp_path):
    """A fresh set-up runs pip once before the rest's install: torch and the uv that ``with_uv`` then finds."""
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "setup-test", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True)
    python = f"{venv}/bin/python"
    (line,) = [line for line in dry.stdout.splitlines() if f"{python} -m pip install" in line and " torch " in line]
    pip = line.split("||", 1)[1].strip()
    # the requirements as the shell hands them to pip, with this Python for the venv's (which does not exist here)
    shown = pip.replace(f"{python} -m pip install", "printf '%s\\n'").replace(python, sys.executable)
    words = subprocess.run(["bash", "-c", shown], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert words[words.index("torch") + 1] == install.UV
    assert not any(word.startswith("uv") and word != install.UV for word in words)
