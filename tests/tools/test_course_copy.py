"""autograd_lab.course: the learner's own copy of the course (``make lab``, ``autograd-lab``).

The course here is a copy of the repository's notebooks/ in a temporary folder, so that a test can change it
"upstream" as a new version of the course would, and then make the copy again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import autograd_lab
from autograd_lab import course
from autograd_lab.course import MANIFEST, CopyError, update

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def upstream(tmp_path):
    """The course as a new version of it could look: a copy of notebooks/ that a test may edit."""
    folder = tmp_path / "course"
    shutil.copytree(REPO / "notebooks", folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return folder


def notebooks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("[0-9][0-9]_*.ipynb"))


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def edit_cell(path: Path, index: int, source: str) -> None:
    """A change of source, as the learner (in the copy) or a new version of the course (upstream) makes it."""
    nb = read(path)
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    code[index]["source"] = source
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def run_cells(path: Path) -> None:
    """What running every cell does to a notebook's file: outputs, execution counts, kernel metadata."""
    nb = read(path)
    for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    nb["metadata"]["language_info"]["version"] = "3.99.0"
    path.write_text(json.dumps(nb), encoding="utf-8")


def test_a_fresh_copy_holds_every_notebook_without_outputs_and_the_solutions_beside_them(upstream, tmp_path):
    copy = tmp_path / "my-course"
    result = update(copy, upstream)
    assert notebooks(copy) == notebooks(upstream) and "00_start_here.ipynb" in notebooks(copy)
    for name in notebooks(copy):
        mine, theirs = read(copy / name), read(upstream / name)
        assert [c["source"] for c in mine["cells"]] == [c["source"] for c in theirs["cells"]], name
        code = [c for c in mine["cells"] if c["cell_type"] == "code"]
        assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code), name
        assert [c.get("metadata") for c in mine["cells"]] == [c.get("metadata") for c in theirs["cells"]], (
            f"{name}: cell metadata (tags, the widgets' twins) is kept")
    solutions = sorted(p.name for p in (upstream / "solutions").glob("*.py"))
    assert solutions and sorted(p.name for p in (copy / "solutions").glob("*.py")) == solutions
    assert all((copy / "solutions" / s).read_bytes() == (upstream / "solutions" / s).read_bytes() for s in solutions)
    assert sorted(result.added) == course.course_files(upstream)
    assert not (result.refreshed or result.newer or result.gone)
    assert set(read(copy / MANIFEST)["files"]) == set(course.course_files(upstream))


def test_every_reveal_cell_finds_its_solution_in_the_copy(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    loads = [line.split("%load", 1)[1].strip() for name in notebooks(copy) for cell in read(copy / name)["cells"]
             for line in course._text(cell["source"]).splitlines() if line.lstrip("# ").startswith("%load ")]
    assert len(loads) >= 10
    assert [path for path in loads if not (copy / path).is_file()] == []


def test_a_second_run_after_an_update_adds_new_notebooks_and_refreshes_only_untouched_ones(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    run_cells(copy / "01_leaf_tensors.ipynb")  # run, never edited: still the course's version
    edit_cell(copy / "02_grad_fn_chains.ipynb", 1, "print('my own experiment')")  # the learner's edit
    mine = (copy / "02_grad_fn_chains.ipynb").read_bytes()
    for name in ("01_leaf_tensors.ipynb", "02_grad_fn_chains.ipynb"):
        edit_cell(upstream / name, 0, "print('a fixed setup cell')")
    shutil.copyfile(upstream / "08_beyond_backward.ipynb", upstream / "09_new_notebook.ipynb")

    result = update(copy, upstream)
    assert result.added == ["09_new_notebook.ipynb"]
    assert result.refreshed == ["01_leaf_tensors.ipynb"]
    assert result.newer == ["02_grad_fn_chains.ipynb"]
    assert (copy / "02_grad_fn_chains.ipynb").read_bytes() == mine, "the learner's edit is never overwritten"
    refreshed = read(copy / "01_leaf_tensors.ipynb")
    assert [c for c in refreshed["cells"] if c["cell_type"] == "code"][0]["source"] == "print('a fixed setup cell')"
    assert all(c.get("outputs", []) == [] for c in refreshed["cells"])

    said = course.describe(result, "autograd-lab my-course")
    assert "09_new_notebook.ipynb" in said and "01_leaf_tensors.ipynb" in said
    assert "autograd-lab my-course --fresh 02_grad_fn_chains.ipynb --copy-only" in said
    assert "02_grad_fn_chains.mine.ipynb" in said
    again = update(copy, upstream)
    assert again.newer == ["02_grad_fn_chains.ipynb"], "said again on every run until the learner takes it"
    assert not (again.added or again.refreshed)


def test_nothing_changes_when_the_course_has_not_and_running_cells_is_not_an_edit(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    run_cells(copy / "03_vectorized_vs_looped.ipynb")
    edit_cell(copy / "04_gradient_accumulation.ipynb", 2, "x = 1")
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file() and p.name != MANIFEST}
    result = update(copy, upstream)
    assert not (result.added or result.refreshed or result.newer or result.gone or result.fresh)
    assert {p: p.read_bytes() for p in before} == before, "a run's outputs and an edit stay as they are"
    assert "up to date" in course.describe(result, "autograd-lab")


def test_fresh_keeps_the_learners_version_beside_the_courses_new_one(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    name = "04_gradient_accumulation.ipynb"
    edit_cell(copy / name, 1, "print('mine')")
    mine = (copy / name).read_bytes()
    edit_cell(upstream / name, 1, "print('the course, fixed')")
    result = update(copy, upstream, fresh=(name,))
    assert result.fresh == {name: "04_gradient_accumulation.mine.ipynb"} and not result.newer
    assert (copy / "04_gradient_accumulation.mine.ipynb").read_bytes() == mine
    assert course.fingerprint(copy / name) == course.fingerprint(upstream / name)
    assert "yours is now 04_gradient_accumulation.mine.ipynb" in course.describe(result, "autograd-lab")
    assert not update(copy, upstream).newer
    edit_cell(copy / name, 1, "print('mine again')")
    assert update(copy, upstream, fresh=(name,)).fresh == {name: "04_gradient_accumulation.mine-2.ipynb"}


def test_a_deleted_notebook_comes_back_and_one_the_course_dropped_stays(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    (copy / "05_accumulation_pitfalls.ipynb").unlink()
    (upstream / "08_beyond_backward.ipynb").unlink()
    result = update(copy, upstream)
    assert result.added == ["05_accumulation_pitfalls.ipynb"]
    assert result.gone == ["08_beyond_backward.ipynb"] and (copy / "08_beyond_backward.ipynb").exists()
    assert "08_beyond_backward.ipynb" not in read(copy / MANIFEST)["files"]


def test_a_copy_without_its_manifest_is_adopted_without_overwriting_anything(upstream, tmp_path):
    copy = tmp_path / "my-course"
    update(copy, upstream)
    edit_cell(copy / "01_leaf_tensors.ipynb", 1, "print('mine')")
    (copy / MANIFEST).unlink()
    edit_cell(upstream / "01_leaf_tensors.ipynb", 1, "print('new')")
    result = update(copy, upstream)
    assert result.newer == ["01_leaf_tensors.ipynb"] and not result.refreshed


@pytest.mark.parametrize("case, message", [
    ("a file", "is a file, not a folder"),
    ("someone else's folder", "already holds other files and is not a copy of this course"),
    ("the course itself", "is the course's own notebooks folder"),
    ("inside the course", "is the course's own notebooks folder"),
    ("no name", "no folder named"),
    ("a broken manifest", "is not readable"),
])
def test_a_folder_that_cannot_hold_the_copy_is_refused_with_what_to_do(upstream, tmp_path, case, message):
    folder = {"a file": tmp_path / "notes.txt", "someone else's folder": tmp_path / "home",
              "the course itself": upstream, "inside the course": upstream / "solutions",
              "no name": "", "a broken manifest": tmp_path / "my-course"}[case]
    if case == "a file":
        folder.write_text("my notes")
    elif case == "someone else's folder":
        folder.mkdir()
        (folder / "thesis.tex").write_text("...")
    elif case == "a broken manifest":
        update(folder, upstream)
        (folder / MANIFEST).write_text("{not json")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(CopyError, match=message) as err:
        update(folder, upstream)
    assert "e.g. my-course" in str(err.value) or "Delete it and run again" in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before, "nothing was written"


def test_fresh_names_only_files_of_the_course(upstream, tmp_path):
    with pytest.raises(CopyError, match="not a file of the course. Its notebooks: 00_start_here.ipynb"):
        update(tmp_path / "my-course", upstream, fresh=("99_missing.ipynb",))


def test_the_command_makes_the_copy_says_so_and_opens_nothing_with_copy_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(course, "open_lab", lambda *a: pytest.fail("--copy-only opened JupyterLab"))
    monkeypatch.chdir(tmp_path)
    assert course.main(["my-course", "--copy-only"]) == 0
    out = capsys.readouterr().out
    course_notebooks = notebooks(REPO / "notebooks")
    solutions = len(list((REPO / "notebooks" / "solutions").glob("*.py")))
    assert out.startswith("Your copy of the course: my-course")
    assert (f"added: {len(course_notebooks)} notebooks ({course_notebooks[0]} to {course_notebooks[-1]}), "
            f"{solutions} solutions") in out
    assert course.course_folder() == REPO / "notebooks", "an editable install reads the repository's notebooks"
    assert notebooks(tmp_path / "my-course") == notebooks(REPO / "notebooks")


def test_the_command_opens_jupyterlab_on_the_course_map_with_the_options_passed_through(tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr(course, "open_lab", lambda folder, argv: opened.append((folder, argv)) or 0)
    monkeypatch.setattr(course.os, "geteuid", lambda: 1000)
    assert course.main([str(tmp_path / "c"), "--no-browser", "--port", "9999", "--", "--ServerApp.ip=0.0.0.0"]) == 0
    lab_args = ["00_start_here.ipynb", "--no-browser", "--port=9999", "--ServerApp.ip=0.0.0.0"]
    assert opened == [(tmp_path / "c", lab_args)]
    monkeypatch.setattr(course.os, "geteuid", lambda: 0)
    assert course.lab_argv(False, None, []) == ["00_start_here.ipynb", "--allow-root"]


def test_the_command_refuses_a_bad_folder_with_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert course.main([str(tmp_path / "notes.txt"), "--copy-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autograd-lab: ") and "is a file, not a folder" in err and len(err.splitlines()) == 1


def test_python_m_autograd_lab_and_the_autograd_lab_script_are_the_same_command(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograd_lab", "copy", "--copy-only"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "copy" / "00_start_here.ipynb").is_file()
    script = Path(sys.executable).parent / "autograd-lab"
    assert script.is_file(), "pyproject's [project.scripts] installs autograd-lab (reinstall: make setup)"
    helped = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--copy-only" in helped.stdout and "--fresh" in helped.stdout


def test_the_copy_machinery_is_not_an_instrument():
    assert "course" not in autograd_lab.__all__ and "main" not in autograd_lab.__all__
    code = "import sys, autograd_lab.course; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False", "making the copy needs no torch"
