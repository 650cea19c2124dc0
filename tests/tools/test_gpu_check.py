"""tools/gpu: the wheels a GPU machine without network lacks (``make gpu-wheels``), found from the lock and the
wheels' own requirements, with pip's download replaced by wheels made here (no network); which of them the
machine installs; and check.sh, run here where there is no GPU: it installs nothing this Python has, and stops
with make test-cuda's reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.gpu import wheels

REPO = Path(__file__).resolve().parents[2]
ENV = wheels.environment("3.12.3")


def _wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    """A wheel file holding only its METADATA, as pip would save it."""
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
    return path


def test_the_lock_is_read_for_the_gpu_machines_python():
    lock = ("# a comment\nipython==9.18.1 ; python_full_version >= '3.11'\nipython==8.37.0 ; python_full_version < "
            "'3.11'\nappnope==1.0.0 ; sys_platform == 'darwin'\nTyping_Extensions==4.16.0\n")
    assert wheels.lock_versions(lock, ENV) == {"ipython": "9.18.1", "typing-extensions": "4.16.0"}


def test_a_wheels_requirements_are_read_for_that_python_extras_left_out(tmp_path):
    wheel = _wheel(tmp_path, "ipython", "9.18.1", ["jedi>=0.18", 'colorama; sys_platform == "win32"',
                                                    'typing_extensions>=4.6; python_version < "3.12"',
                                                    'pytest; extra == "test"', "Prompt_Toolkit<3.1"])
    assert wheels.requirements(wheel, ENV) == ["jedi", "prompt-toolkit"]


def test_the_roots_and_what_they_need_are_collected_at_the_locks_versions_and_stale_wheels_go(tmp_path, monkeypatch):
    needs = {"nbval": ["pytest>=7", "jupyter-client", "ipykernel"], "jupyter-client": ["pyzmq>=25"],
             "ipykernel": ["jupyter-client", "psutil"], "torchviz": ["torch", "graphviz"]}
    roots = ("nbval", "torchviz")
    lock = "".join(f"{n}==1.{i}\n" for i, n in enumerate(
        ["nbval", "pytest", "jupyter-client", "ipykernel", "pyzmq", "psutil", "torchviz", "torch", "graphviz"]))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(lock)
    versions = wheels.lock_versions(lock, ENV)
    asked = []

    def fake_download(pins, dest, python):
        asked.append(sorted(pins))
        for pin in pins:
            name, version = pin.split("==")
            _wheel(dest, name, version, needs.get(name, []))

    monkeypatch.setattr(wheels, "download", fake_download)
    monkeypatch.setattr(wheels, "ROOTS", roots)
    dest = tmp_path / "whl"
    dest.mkdir()
    stale = _wheel(dest, "pyzmq", "0.1")  # another version of a package needed now
    gone = _wheel(dest, "old-package", "2.0")
    kept = wheels.collect(dest, "3.12.3", constraints)
    names = sorted(wheels.wheel_name(w)[0] for w in kept)
    assert names == ["graphviz", "ipykernel", "jupyter-client", "nbval", "pyzmq", "torchviz"]
    assert all(wheels.wheel_name(w)[1] == versions[wheels.wheel_name(w)[0]] for w in kept)
    assert not stale.exists() and not gone.exists()
    assert not any("torch==" in pin or "pytest==" in pin or "psutil==" in pin for pins in asked for pin in pins), \
        "what the machine provides is never downloaded"


def test_a_package_missing_from_the_lock_is_named(tmp_path, monkeypatch):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("nbval==0.11.0\n")
    monkeypatch.setattr(wheels, "ROOTS", ("nbval", "no-such-package"))
    monkeypatch.setattr(wheels, "download", lambda *a: None)
    with pytest.raises(SystemExit, match="no-such-package not in constraints.txt for Python 3.12.3: run make lock"):
        wheels.collect(tmp_path / "whl", "3.12.3", constraints)


def test_the_machine_installs_only_the_wheels_whose_package_it_lacks(tmp_path, capsys):
    ours = _wheel(tmp_path, "pytest", "1.0")  # installed here
    theirs = _wheel(tmp_path, "no-such-package-here", "1.0")
    assert wheels.missing(tmp_path) == [theirs] and ours.exists()
    assert wheels.main(["--missing", str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == str(theirs)
    assert wheels.main(["--missing", str(tmp_path / "nothing")]) == 2
    assert "run make gpu-wheels first" in capsys.readouterr().err


def test_the_make_target_downloads_them():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^gpu-wheels: setup-test( ## .*)?\n\t\$\(PY\) -m tools gpu-wheels$", makefile, re.M)
    assert "/.whl/" in (REPO / ".gitignore").read_text().splitlines(), "the wheels stay out of git"


@pytest.mark.slow
def test_check_sh_here_installs_nothing_and_stops_with_test_cudas_reason(tmp_path):
    """No GPU here: check.sh's test part runs make test-cuda, which says why it tests nothing; the log says it."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("here a GPU would run the whole check")
    (tmp_path / "whl").mkdir()
    _wheel(tmp_path / "whl", "pytest", "1.0")  # installed here: not installed again
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "whl")}
    done = subprocess.run(["bash", str(REPO / "tools" / "gpu" / "check.sh"), "test", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    log = (tmp_path / "out" / "test-cuda.log").read_text()
    assert "make test-cuda: no CUDA GPU here, so nothing was tested." in log
    assert "(no GPU visible)" in done.stdout
