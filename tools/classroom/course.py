"""nbgrader on the kit's course directory: the course set up from the notebooks, the student release
generated, any nbgrader command run there with this environment's tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from .cells import ClassroomError
from .source import source_notebook

CONFIG = Path(__file__).resolve().with_name("nbgrader_config.py")  # the course's nbgrader settings
NBGRADER_TIMEOUT_S = 1200  # a whole course autograded on a slow laptop takes a few minutes


def nbgrader_env() -> dict:
    """nbgrader runs `alembic` (the gradebook's migrations) from PATH: put this environment's scripts first."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def nbgrader(args: list[str], course: Path, quiet: bool = True,
             timeout_s: float = NBGRADER_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory (where it reads nbgrader_config.py)."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    if quiet:
        cmd.append("--log-level=WARN")
    try:
        proc = subprocess.run(cmd, cwd=course, env=nbgrader_env(), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        out = [o.decode(errors="replace") if isinstance(o, bytes) else (o or "") for o in (err.stdout, err.stderr)]
        raise ClassroomError(f"nbgrader {' '.join(args)} did not finish within {timeout_s:g} s and was stopped; "
                             f"its last output:\n{out[0][-2000:]}\n{out[1][-2000:]}") from None
    if proc.returncode != 0:
        raise ClassroomError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def code_stub(config: Path = CONFIG) -> str:
    """The text that replaces a worked solution in the release (ClearSolutions.code_stub of our config)."""
    from traitlets.config import Config

    c = Config()
    exec(compile(config.read_text(), str(config), "exec"), {"get_config": lambda: c, "__file__": str(config)})
    return c.ClearSolutions.code_stub["python"]


def assignment_id(path: Path) -> str:
    return path.stem


def setup_course(notebooks: list[Path], course: Path) -> list[str]:
    """An nbgrader course directory with one assignment per notebook, its source derived (source_notebook)."""
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(
        "# The course's nbgrader settings, read from the repository (written by tools/classroom).\n"
        f"load_subconfig({str(CONFIG)!r})  # noqa: F821 (traitlets provides it)\n"
    )
    ids = []
    for path in notebooks:
        nb = source_notebook(nbformat.read(path, as_version=4), path.parent, path.name)
        aid = assignment_id(path)
        src = course / "source" / aid
        src.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, src / path.name)
        ids.append(aid)
    return ids


def generate(notebooks: list[Path], course: Path, out: Path | None) -> list[Path]:
    """nbgrader generate_assignment for every notebook; the releases also copied flat into ``out``."""
    ids = setup_course(notebooks, course)
    every = {p.name for p in (course / "source").iterdir() if p.is_dir()}
    # One nbgrader process for all of them when it can be (each start costs seconds).
    for aid in ["*"] if set(ids) == every else ids:
        nbgrader(["generate_assignment", aid, "--force"], course)
    released = [course / "release" / aid / f"{aid}.ipynb" for aid in ids]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for path in released:
            shutil.copyfile(path, out / path.name)  # flat: the notebooks' links to each other resolve
        released = [out / p.name for p in released]
    return released
