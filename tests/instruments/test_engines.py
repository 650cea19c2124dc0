"""Both engines, the same graphs. Every drawing the notebooks store, and drawings of real architectures
(tools/drawings.py), laid out by graphviz-pure in two processes give the same bytes, and laid out by the
system's Graphviz `dot` the same nodes, edges, labels and colours (its coordinates are its own).

The system `dot` is what a learner gets with AUTOGRAD_LAB_DOT=dot, or on a platform without a graphviz-pure
wheel. Without one here the cross-check is skipped, except in CI, which installs Debian's graphviz for it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from autograd_lab import engine as lab_engine
from autograd_lab import readiness
from tools import drawings

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pure():
    """graphviz-pure, as the course finds it when no setting selects another engine."""
    engine = lab_engine.pure_engine()
    assert engine is not None, "the course's install brings graphviz-pure: run make setup-test"
    return engine


@pytest.fixture(scope="module")
def system_dot():
    program = shutil.which("dot")
    if program is None:
        if os.environ.get("CI"):
            pytest.fail("CI cross-checks the engines and needs a system Graphviz `dot` (.ci/run installs it)")
        pytest.skip("no system Graphviz `dot` here to cross-check graphviz-pure against (python -m tools graphviz)")
    return lab_engine.Engine(program, "dot", pure=False)


@pytest.fixture(scope="module")
def stored():
    found = drawings.notebook_drawings()
    assert found, "the notebooks store no graph: were they executed (make notebooks)?"
    return found


@pytest.fixture(scope="module")
def architectures(pure):
    sources = drawings.architecture_drawings()
    return sources, drawings.render(sources, pure)


def differences(first: dict, second: dict, engines: str) -> list[str]:
    """What two renderings of the same drawings disagree on, one line per drawing and part."""
    found = []
    for key in first:
        a, b = drawings.structure(first[key]), drawings.structure(second[key])
        found += [f"{key}: the {part} differ ({engines})" for part in a if a[part] != b[part]]
    return found


def test_every_graph_a_notebook_shows_stores_its_dot_beside_its_svg(stored):
    shown = 0
    for path in drawings.NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                svg = "".join(out.get("data", {}).get("image/svg+xml", ""))
                if 'class="graph"' in svg:  # Graphviz's SVG (the course's timelines and plots are not graphs)
                    shown += 1
                    assert "text/vnd.graphviz" in out["data"], f"{path.name}::{cell.get('id')} stores no DOT"
    assert shown == len(stored) and shown >= 10


def test_the_stored_svg_is_what_graphviz_pure_makes_of_the_stored_dot_here(stored, pure):
    # The notebooks were executed in other processes (make notebooks): the same bytes, whatever the process.
    why = drawings.svg_not_compared()
    if why is not None:
        pytest.skip(f"the stored SVG comes from graphviz-pure {drawings.locked_pure()}: {why}")
    fresh = drawings.render({key: d["dot"] for key, d in stored.items()}, pure)
    changed = [key for key in stored if fresh[key] != stored[key]["svg"]]
    assert not changed, f"re-run make notebooks: these graphs draw differently now: {changed}"


def test_system_dot_draws_the_notebooks_graphs_alike(stored, pure, system_dot):
    sources = {key: d["dot"] for key, d in stored.items()}
    assert not differences(drawings.render(sources, pure), drawings.render(sources, system_dot), "pure, dot")


@pytest.mark.slow
def test_system_dot_draws_the_architectures_alike(architectures, system_dot):
    sources, by_pure = architectures
    assert len(sources) >= 20
    assert not differences(by_pure, drawings.render(sources, system_dot), "pure, dot")


@pytest.mark.slow
def test_another_process_builds_and_lays_out_the_architectures_byte_for_byte_alike(architectures):
    _, here = architectures
    child = {k: v for k, v in os.environ.items() if k != lab_engine.ENGINE_SETTING}
    done = subprocess.run([sys.executable, "-m", "tools.drawings"], cwd=ROOT, capture_output=True, text=True,
                          env=child, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    there = json.loads(done.stdout)
    assert sorted(there) == sorted(here)
    assert [key for key in here if here[key] != there[key]] == []


def test_structure_sees_a_changed_label_colour_and_edge():
    # the comparison can fail: a drawing that differs in a label, a colour or an edge is told apart
    base = 'digraph { a [label="x" fillcolor=orange style=filled]; b; a -> b [label=" 1 "] }'
    changed = [base.replace('"x"', '"y"'), base.replace("orange", "lightblue"), base.replace('" 1 "', '" 2 "'),
               base.replace("a -> b", "b -> a")]
    first = drawings.render({"base": base})["base"]
    for other in changed:
        assert drawings.structure(drawings.render({"other": other})["other"]) != drawings.structure(first), other


PLATFORMS = [  # (sys.platform, platform.machine() there, platform_system)
    ("linux", "x86_64", "Linux"), ("linux", "aarch64", "Linux"), ("linux", "ppc64le", "Linux"),
    ("linux", "armv7l", "Linux"), ("darwin", "x86_64", "Darwin"), ("darwin", "arm64", "Darwin"),
    ("win32", "AMD64", "Windows"), ("win32", "ARM64", "Windows"), ("win32", "x86", "Windows"),
    ("freebsd14", "amd64", "FreeBSD"),
]


@pytest.mark.parametrize("system, machine, name", PLATFORMS, ids=[f"{p[0]}-{p[1]}" for p in PLATFORMS])
def test_pip_installs_graphviz_pure_exactly_where_the_course_expects_a_wheel(system, machine, name):
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    req = next(Requirement(r) for r in data["dependencies"] if Requirement(r).name == lab_engine.PURE)
    where = {"sys_platform": system, "platform_machine": machine, "platform_system": name}
    assert isinstance(req.marker, Marker)
    assert req.marker.evaluate(where) == lab_engine.pure_has_wheel(system, machine)


def test_without_graphviz_pure_a_system_dot_draws_and_the_report_says_why(monkeypatch, system_dot):
    monkeypatch.delenv(lab_engine.ENGINE_SETTING, raising=False)
    monkeypatch.setattr(lab_engine, "_installed_pure", lambda: None)
    monkeypatch.setattr(lab_engine, "PURE_WHEELS", set())  # as on a platform pip has no wheel for
    monkeypatch.setenv("PATH", str(Path(system_dot.program).parent))
    engine, problem = lab_engine.find_engine()
    assert problem is None and engine.name == "dot" and not engine.pure
    assert "has no wheel for" in engine.note and "the system's Graphviz draws instead" in engine.note
    report = readiness.environment_report()
    assert report["ready"] is True and report["graphs drawn by"].startswith("dot ")
    assert "has no wheel for" in report["graphs drawn by"]
    assert drawings.svg_not_compared().startswith("the graphs are laid out by dot")
