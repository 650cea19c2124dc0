"""pyproject.toml and environment.yml must name the same packages with the same lower bounds."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from PyPI's
CONDA_TO_PYPI = {"pytorch": "torch", "python-graphviz": "graphviz"}
CONDA_ONLY = {"python", "pip", "graphviz"}  # graphviz on conda = the `dot` program (PyPI has none)


def _split(requirement: str):
    requirement = requirement.split(";")[0].split("#")[0].strip()
    m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


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


def test_environment_yml_brings_graphviz_binary():
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    assert any(isinstance(d, str) and d.split()[0] == "graphviz" for d in deps)


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


def test_constraints_pin_every_direct_dependency():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, ver = line.split(";")[0].partition("==")
            pins[name.strip().lower().replace("_", "-")] = ver.strip()
    py = pyproject_packages((ROOT / "pyproject.toml").read_text())
    missing = sorted(n for n in py if n not in pins)
    assert not missing, f"constraints.txt does not pin: {missing}; run `make lock`"
    assert "+" not in pins["torch"], "pin torch without a local build tag, so CPU and CUDA builds both satisfy it"
