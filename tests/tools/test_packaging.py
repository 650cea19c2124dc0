"""pyproject.toml and environment.yml must name the same packages with the same lower bounds."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (the test extra installs it there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
# conda-forge names that differ from PyPI's
CONDA_TO_PYPI = {"pytorch": "torch", "python-graphviz": "graphviz"}
CONDA_ONLY = {"python", "pip", "graphviz"}  # graphviz on conda = the `dot` program (PyPI has none)


def _name(name: str) -> str:
    return name.lower().replace("_", "-")


def _split(requirement: str):
    """("name", "specifier") of a requirement, markers dropped; conda's "name >=1.0" spelling accepted."""
    req = Requirement(requirement.split("#")[0].strip().replace(" >", ">").replace(" =", "="))
    return _name(req.name), str(req.specifier)


def pyproject_packages(text: str) -> dict:
    data = tomllib.loads(text)["project"]
    reqs = list(data["dependencies"])
    for group in data.get("optional-dependencies", {}).values():
        reqs += group
    return dict(_split(r) for r in reqs)


def conda_packages(text: str) -> dict:
    deps = yaml.safe_load(text)["dependencies"]
    out = {}
    for dep in deps:
        if isinstance(dep, dict):
            for pip_req in dep.get("pip", []):
                name, spec = _split(pip_req)
                out[name] = spec
            continue
        name, spec = _split(dep)
        if name in CONDA_ONLY and not (name == "graphviz" and spec):
            continue
        out[CONDA_TO_PYPI.get(name, name)] = spec
    return out


def drift(pyproject_text: str, env_text: str) -> list[str]:
    py, conda = pyproject_packages(pyproject_text), conda_packages(env_text)
    problems = [f"{n} is in pyproject.toml but not in environment.yml" for n in sorted(py.keys() - conda.keys())]
    problems += [f"{n} is in environment.yml but not in pyproject.toml" for n in sorted(conda.keys() - py.keys())]
    problems += [
        f"{n}: pyproject says {py[n]!r}, environment.yml says {conda[n]!r}"
        for n in sorted(py.keys() & conda.keys())
        if py[n] != conda[n]
    ]
    return problems


def test_pyproject_and_environment_yml_list_the_same_packages():
    problems = drift((ROOT / "pyproject.toml").read_text(), (ROOT / "environment.yml").read_text())
    assert not problems, "pyproject.toml and environment.yml drifted:\n" + "\n".join(problems)


def test_environment_yml_brings_the_layout_engine_from_pip():
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert any(_split(req)[0] == "graphviz-pure" for req in pip)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda s: s.replace('"matplotlib>=3.7",\n', ""), "matplotlib is in environment.yml but not in pyproject.toml"),
        (lambda s: s.replace('"numpy>=1.24"', '"numpy>=2.0"'), "numpy: pyproject says '>=2.0'"),
        (lambda s: s.replace('"nbval>=0.11",', '"nbval>=0.11",\n    "rich>=13",'), "rich is in pyproject.toml"),
    ],
)
def test_drift_is_caught(edit, expected):
    text = (ROOT / "pyproject.toml").read_text()
    edited = edit(text)
    assert edited != text, "the edit did not apply; update this test with pyproject.toml"
    problems = drift(edited, (ROOT / "environment.yml").read_text())
    assert any(expected in p for p in problems), problems


SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
PLATFORMS = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}


def _environments():
    for version in SUPPORTED:
        for sys_platform, system in PLATFORMS.items():
            env = dict(default_environment())
            env.update(python_version=version, python_full_version=version + ".0", sys_platform=sys_platform,
                       platform_system=system, platform_machine="x86_64" if system != "Darwin" else "arm64",
                       os_name="nt" if system == "Windows" else "posix", implementation_name="cpython",
                       platform_python_implementation="CPython")
            yield f"{version}-{sys_platform}", env


def lock_pins(text: str, env: dict) -> dict:
    """name -> version pinned by the lock for one environment (its markers evaluated there)."""
    pins: dict = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            assert _name(req.name) not in pins, f"{req.name} pinned twice for {env['python_version']}"
            pins[_name(req.name)] = str(req.specifier)
    return pins


@pytest.mark.parametrize("where, env", list(_environments()), ids=lambda v: v if isinstance(v, str) else "")
def test_lock_pins_every_dependency_once_for_every_supported_python(where, env):
    pins = lock_pins((ROOT / "constraints.txt").read_text(), env)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for group in [data["dependencies"], *data["optional-dependencies"].values()]
                    for r in group]
    wanted = [r for r in requirements if r.marker is None or r.marker.evaluate(env)]
    missing = sorted(_name(r.name) for r in wanted if _name(r.name) not in pins)
    assert not missing, f"constraints.txt pins nothing for {missing} on {where}; run `make lock`"
    for req in wanted:
        version = pins[_name(req.name)].removeprefix("==")
        assert req.specifier.contains(version, prereleases=True), f"{where}: {req.name}=={version} breaks {req}"
    assert pins["torch"] == "==2.13.0", "torch pinned without a build tag: CPU and CUDA builds both satisfy it"


def test_requires_python_matches_the_lock_and_the_set_up_check():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert data["requires-python"] == ">=" + SUPPORTED[0]
    assert f'OLDEST_PYTHON = "{SUPPORTED[0]}"' in (ROOT / "tools" / "lock.py").read_text()
    oldest = tuple(int(p) for p in SUPPORTED[0].split("."))
    assert f"OLDEST = {oldest}" in (ROOT / "tools" / "python_check.py").read_text()


def test_the_package_imports_quietly_and_lightly():
    """No warning at import (warnings are errors here), and nothing heavy: torch.utils.benchmark pulls in
    cpp_extension, which warns "No CUDA runtime is found" on a CPU-only machine with a CUDA build of torch."""
    code = (
        "import sys, autograd_lab, autograd_lab.exercises, autograd_lab.stepper, autograd_lab.distributed\n"
        "heavy = [m for m in ('torch.utils.benchmark', 'torch.utils.cpp_extension', 'torch._dynamo') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_the_engine_check_every_make_target_runs_first_needs_no_torch():
    """`make setup` (which every target runs) ends with `python -m tools graphviz --warn-only`: a layout engine is
    looked for and tried without importing torch."""
    code = "import sys\nfrom tools.ensure_graphviz import main\nmain(['--warn-only'])\nprint('torch' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr


def test_a_timing_prints_nothing_with_a_cuda_build_on_a_machine_without_cuda(tmp_path):
    """03 and 07 time code with lab.time_call, whose torch.utils.benchmark pulls in cpp_extension. With a CUDA
    build of torch (PyPI's default) and no CUDA runtime that import logs "No CUDA runtime is found"; the course
    keeps it quiet. Faked here: a CPU build told it was compiled for CUDA, with CUDA_HOME set."""
    code = (
        "import torch\n"
        "torch.cuda._is_compiled = lambda: True\n"
        "torch.version.cuda = '13.0'\n"
        "torch.cuda.is_available = lambda: False\n"
        "import autograd_lab as lab\n"
        "lab.time_call(lambda: None, min_run_time=0.01)\n"
        "import torch.utils.cpp_extension as ce\n"
        "assert ce.CUDA_HOME, 'the fake did not reach cpp_extension'\n"
    )
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0 and not done.stderr, done.stderr
