"""The course as a package, the way a learner with PyTorch of their own takes it.

The wheel is built from the checkout (its files that git knows: a fresh clone with this work in it) and
installed into a fresh virtual environment that has only torch, installed first, as in the learner's own
environment. Then: pip installs nothing of torch again, ``autograd-lab FOLDER --copy-only`` makes the learner's
copy from the wheel's own notebooks, and a notebook of that copy runs in a fresh kernel, its worked solutions
run from the copy's solutions/ and passing their checks.

A few minutes (a venv, torch and JupyterLab's packages from pip's cache): mark ``package``, ``make
test-package``, a stage of its own in .ci/run, outside ``make test``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.package, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"
# Where torch comes from, as in the Makefile (TORCH_INDEX= empty: PyPI's default build)
TORCH_INDEX = os.environ.get("TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
NOTEBOOK = "01_leaf_tensors.ipynb"  # the first notebook with exercises and worked solutions
PIP_QUIET = ["--disable-pip-version-check", "--no-input"]

# Run by the fresh environment's Python: the copy's notebook in a fresh kernel, each reveal cell used as a
# learner uses it: its %load uncommented (the kernel reads the file; a missing one is an error), then the
# solution in a cell of its own, as JupyterLab puts it into the cell; printed: what each cell showed.
EXECUTE = """
import json, os, re, sys
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
for cell in [c for c in nb.cells if "solution-reveal" in c.metadata.get("tags", [])]:
    solution = re.search(r"^# %load (\\S+)$", cell.source, re.M).group(1)
    cell.source = cell.source.replace("# %load ", "%load ")
    loaded = nbformat.v4.new_code_cell(open(os.path.join(os.path.dirname(path), solution)).read())
    loaded.metadata["tags"] = ["solution-loaded"]
    nb.cells.insert(nb.cells.index(cell) + 1, loaded)
where = {"metadata": {"path": os.path.dirname(path)}}  # the kernel starts in the copy, as in JupyterLab
NotebookClient(nb, timeout=600, kernel_name="python3", resources=where).execute()
text = lambda out: out.get("text", "") or out.get("data", {}).get("text/plain", "")
print(json.dumps([{"tags": c.metadata.get("tags", []), "ran": c.execution_count is not None,
                   "errors": [o["ename"] for o in c.outputs if o["output_type"] == "error"],
                   "svg": sum("image/svg+xml" in o.get("data", {}) for o in c.outputs),
                   "text": "".join(text(o) for o in c.outputs)} for c in nb.cells if c.cell_type == "code"]))
"""


def path_without_dot() -> str:
    """PATH without the folders that hold a Graphviz `dot`: the learner's machine that has none."""
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "dot").exists())


def run(cmd: list, cwd: Path, timeout: float = 900, path: str | None = None) -> str:
    """Run a command outside the repository and outside this test's Python (no PYTHONPATH, no venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    command = " ".join(map(str, cmd))
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def checkout(into: Path) -> Path:
    """The repository's files as a fresh clone with this work in it has them: tracked, or new and not ignored."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.fail(f"the package test builds from the files git knows, and git could not list them ({err}): run it "
                    "in a clone of the repository", pytrace=False)
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The wheel, and a fresh environment with torch installed before it: (wheel, python, what pip said)."""
    base = tmp_path_factory.mktemp("package")
    source = checkout(base / "clone")
    run([sys.executable, "-m", "pip", "wheel", *PIP_QUIET, "--no-deps", "--no-build-isolation", "-w", base / "dist",
         source], cwd=base)
    (wheel,) = (base / "dist").glob("autograd_lab-*.whl")
    run([sys.executable, "-m", "venv", base / "venv"], cwd=base)
    python = base / "venv" / "bin" / "python"
    index = ["--extra-index-url", TORCH_INDEX, "--retries", "1"] if TORCH_INDEX else []
    run([python, "-m", "pip", "install", *PIP_QUIET, "-c", CONSTRAINTS, "torch", *index], cwd=base)
    torch_record = next((base / "venv").glob("lib/python*/site-packages/torch-*.dist-info/RECORD"))
    before = torch_record.stat().st_mtime_ns
    run([python, "-m", "pip", "install", *PIP_QUIET, "--dry-run", "--report", base / "report.json", "-c", CONSTRAINTS,
         wheel], cwd=base)
    said = run([python, "-m", "pip", "install", *PIP_QUIET, "-c", CONSTRAINTS, wheel], cwd=base)
    return {"base": base, "wheel": wheel, "python": python, "said": said, "report": base / "report.json",
            "torch_record": torch_record, "torch_mtime": before}


def test_the_wheel_carries_every_notebook_and_solution_of_the_course(course):
    names = set(zipfile.ZipFile(course["wheel"]).namelist())
    expected = {f"autograd_lab/notebooks/{p.relative_to(REPO / 'notebooks').as_posix()}"
                for pattern in ("[0-9][0-9]_*.ipynb", "solutions/*.py") for p in (REPO / "notebooks").glob(pattern)}
    assert expected and expected <= names, sorted(expected - names)
    assert "autograd_lab/course.py" in names and "autograd_lab/__main__.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "autograd-lab = autograd_lab.course:main" in zipfile.ZipFile(course["wheel"]).read(entry_points).decode()


def test_installing_it_beside_torch_installs_no_torch_again(course):
    planned = [item["metadata"]["name"].lower() for item in json.loads(course["report"].read_text())["install"]]
    assert "autograd-lab" in planned
    assert [n for n in planned if n in ("torch", "triton") or n.startswith("nvidia-")] == [], planned
    assert "Requirement already satisfied: torch" in course["said"]
    assert course["torch_record"].stat().st_mtime_ns == course["torch_mtime"], "torch was installed again"


def test_its_command_makes_a_copy_from_the_wheel_whose_notebook_runs_in_a_fresh_kernel(course):
    base, python = course["base"], course["python"]
    where = run([python, "-c", "import autograd_lab.course as c; print(c.course_folder())"], cwd=base).strip()
    assert Path(where).is_relative_to(base / "venv") and "site-packages" in where, f"the course came from {where}"

    said = run([base / "venv" / "bin" / "autograd-lab", "my-course", "--copy-only"], cwd=base)
    assert said.startswith("Your copy of the course: my-course") and "added: 9 notebooks (00_start_here.ipynb" in said
    copy = base / "my-course"
    stored = json.loads((copy / NOTEBOOK).read_text())
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in stored["cells"]), "outputs cleared"
    assert (copy / "solutions").is_dir()
    assert "up to date" in run([python, "-m", "autograd_lab", "my-course", "--copy-only"], cwd=base)

    # no `dot` on PATH: the graphs are laid out by graphviz-pure, which the wheel brought
    shown = run([python, "-c", EXECUTE, copy / NOTEBOOK], cwd=base, path=path_without_dot())
    cells = json.loads(shown.splitlines()[-1])
    assert all(c["ran"] for c in cells)
    published = json.loads((REPO / "notebooks" / NOTEBOOK).read_text())["cells"]
    drawn = sum("image/svg+xml" in o.get("data", {}) for c in published for o in c.get("outputs", []))
    assert drawn and sum(c["svg"] for c in cells) == drawn, "every graph of the notebook is a picture"
    unexpected = [c for c in cells if c["errors"] and "raises-exception" not in c["tags"]]
    assert unexpected == [], unexpected
    solved = [c["text"] for c in cells if "solution-loaded" in c["tags"]]
    assert solved and all(text.startswith("Correct") for text in solved), solved
