"""The learner's own copy of the course, and the command that opens JupyterLab on it.

``autograd-lab [FOLDER]`` (also ``python -m autograd_lab [FOLDER]``; ``make lab`` in the repository) makes
FOLDER (default ``my-course``) the learner's working copy: every notebook of the course with its outputs and
execution counts cleared, so that a "Predict, then run" is answered only by running the cell, and the worked
solutions beside them in ``solutions/``, where the reveal cells' ``%load solutions/...`` finds them. Then
JupyterLab opens on the course map, ``00_start_here.ipynb``.

Run again after the course changed, it brings the copy up to date without losing the learner's work. The
copy's manifest (``.autograd-lab.json``, hidden in JupyterLab) records, for each course file, the version the
copy was made from. A file counts as changed by the learner when its *source* differs from that version:
running cells changes outputs and execution counts, not sources. For each file of the course:

- not in the copy (new in the course, or deleted by the learner): copied;
- the course's version unchanged since the copy was made, or equal to the learner's: left alone;
- newer in the course and never changed by the learner: replaced by the new version;
- newer in the course and changed by the learner: kept, and the update says so and prints the command that
  gets the new version (``--fresh NAME``: the learner's file is renamed ``NAME.mine.ipynb``, then the new one
  is copied). Nothing the learner changed is ever overwritten.

Where the course comes from: the notebooks a built wheel carries (``autograd_lab/notebooks``, copied there from
the repository's ``notebooks/`` by setup.py), else, in an editable install, the repository's ``notebooks/``.

This is course machinery, not an instrument: no notebook imports it, and the package's ``__all__`` leaves it out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

MAP = "00_start_here.ipynb"  # the course map, where JupyterLab opens
COURSE_FILES = ("[0-9][0-9]_*.ipynb", "solutions/*.py")  # what makes the course, relative to its folder
MANIFEST = ".autograd-lab.json"
DEFAULT_FOLDER = "my-course"
HERE = Path(__file__).resolve().parent
PACKAGED = HERE / "notebooks"  # in an installed wheel
REPOSITORY = HERE.parents[1] / "notebooks"  # in an editable install: helpers/autograd_lab -> notebooks/


class CopyError(Exception):
    """The copy cannot be made or updated there; the message says why and what to do instead."""


def course_folder() -> Path:
    """The folder holding the course: the wheel's packaged notebooks, else the repository's notebooks/."""
    for folder in (PACKAGED, REPOSITORY):
        if (folder / MAP).is_file():
            return folder
    raise CopyError(
        f"the course's notebooks are missing: neither {PACKAGED} nor {REPOSITORY} holds {MAP}. Reinstall the "
        "package (pip install --force-reinstall autograd-lab), or in a clone of the repository restore notebooks/"
    )


def course_files(source: Path) -> list[str]:
    """The course's files in ``source``, as paths relative to it ("01_x.ipynb", "solutions/01_y.py")."""
    return sorted({p.relative_to(source).as_posix() for pattern in COURSE_FILES for p in source.glob(pattern)})


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def fingerprint(path: Path) -> str | None:
    """What counts as a file's content: a notebook's cells, type and source (never outputs, execution counts or
    metadata); any other file's bytes. None for a missing file, or a notebook no longer readable as one."""
    try:
        data = path.read_bytes()
        if path.suffix == ".ipynb":
            cells = json.loads(data)["cells"]
            data = json.dumps([[cell["cell_type"], _text(cell["source"])] for cell in cells]).encode()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return hashlib.sha256(data).hexdigest()


def cleared(notebook_text: str) -> str:
    """A notebook with no outputs, execution counts or saved widget state: what a learner starts from."""
    notebook = json.loads(notebook_text)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)  # run times JupyterLab may record
    notebook.get("metadata", {}).pop("widgets", None)
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # nbformat's own layout


def _place(source: Path, name: str, folder: Path) -> None:
    """Copy one course file into the copy (a notebook cleared), replacing what is there in one step."""
    target = folder / name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    if name.endswith(".ipynb"):
        partial.write_bytes(cleared((source / name).read_text(encoding="utf-8")).encode("utf-8"))
    else:
        shutil.copyfile(source / name, partial)
    os.replace(partial, target)


def mine_name(folder: Path, name: str) -> str:
    """Where ``--fresh`` moves the learner's version of ``name``: NAME.mine.ipynb, or .mine-2 ... if taken."""
    path = Path(name)
    for n in range(1, 1000):
        candidate = path.with_name(f"{path.stem}.mine{'' if n == 1 else f'-{n}'}{path.suffix}").as_posix()
        if not (folder / candidate).exists():
            return candidate
    raise CopyError(f"{folder / name}: 999 older versions are kept beside it already; move some away")


def check_folder(folder: str | Path, source: Path) -> Path:
    """The folder for the copy, if it can be one: new, empty, or a copy of this course already."""
    if not str(folder).strip():
        raise CopyError(f"no folder named for your copy: name one, e.g. {DEFAULT_FOLDER}")
    folder = Path(folder).expanduser()
    where, course = folder.resolve(), source.resolve()
    if where == course or course in where.parents:
        raise CopyError(f"{folder} is the course's own notebooks folder ({course}): your copy needs a folder of "
                        f"its own, e.g. {DEFAULT_FOLDER}")
    if folder.exists() and not folder.is_dir():
        raise CopyError(f"{folder} is a file, not a folder: name a folder for your copy (a new one is made), "
                        f"e.g. {DEFAULT_FOLDER}")
    is_copy = (folder / MANIFEST).exists() or (folder / MAP).exists()
    if folder.is_dir() and not is_copy and any(folder.iterdir()):
        raise CopyError(f"{folder} already holds other files and is not a copy of this course (it has no "
                        f"{MANIFEST}): name a new or empty folder, e.g. {DEFAULT_FOLDER}")
    return folder


def read_manifest(folder: Path) -> dict:
    """{course file: fingerprint of the course's version the copy was made from}; {} for a new copy."""
    path = folder / MANIFEST
    if not path.exists():
        return {}
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CopyError(f"{path} is not readable ({err}). Delete it and run again: your notebooks stay, and each "
                        "that differs from the course's counts as one you changed") from None
    return files


def write_manifest(folder: Path, files: dict) -> None:
    text = json.dumps({"course": "autograd-lab", "files": files}, indent=1, sort_keys=True) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")


@dataclass
class Update:
    """What one run did to the copy; each list holds course files (paths relative to the copy)."""

    folder: Path
    added: list = field(default_factory=list)  # new to the copy: a first copy, new in the course, or deleted here
    refreshed: list = field(default_factory=list)  # newer in the course, unchanged here: replaced
    newer: list = field(default_factory=list)  # newer in the course, changed here: kept
    fresh: dict = field(default_factory=dict)  # --fresh: course file -> where the learner's version went
    gone: list = field(default_factory=list)  # no longer in the course: left as they are


def update(folder: str | Path, source: Path | None = None, fresh: tuple = ()) -> Update:
    """Make or bring up to date the learner's copy in ``folder`` (module docstring: the rules). ``fresh``: course
    files whose learner's version is moved aside (``mine_name``) so that the course's version can come in."""
    source = course_folder() if source is None else source
    folder = check_folder(folder, source)
    names = course_files(source)
    unknown = [name for name in fresh if name not in names]
    if unknown:
        notebooks = ", ".join(n for n in names if n.endswith(".ipynb"))
        raise CopyError(f"--fresh {unknown[0]}: not a file of the course. Its notebooks: {notebooks}")
    recorded, result, files = read_manifest(folder), Update(folder), {}
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        upstream, mine, was = fingerprint(source / name), fingerprint(folder / name), recorded.get(name)
        files[name] = upstream
        if not (folder / name).exists():
            result.added.append(name)
        elif mine == upstream:
            continue
        elif was is not None and mine == was:  # unchanged here, so the course's differing version is newer
            result.refreshed.append(name)
        elif name in fresh:
            result.fresh[name] = mine_name(folder, name)
            os.replace(folder / name, folder / result.fresh[name])
        elif upstream == was:
            continue  # the learner's own version of a course file that has not changed
        else:
            files[name] = was
            result.newer.append(name)
            continue
        _place(source, name, folder)
    result.gone = sorted(set(recorded) - set(files))
    write_manifest(folder, files)
    return result


def _listed(names: list) -> str:
    notebooks = [name for name in names if name.endswith(".ipynb")]
    others = len(names) - len(notebooks)
    if len(notebooks) > 3:
        notebooks = [f"{len(notebooks)} notebooks ({notebooks[0]} to {notebooks[-1]})"]
    return ", ".join(notebooks + ([f"{others} solution{'s' if others != 1 else ''}"] if others else []))


def describe(result: Update, command: str) -> str:
    """What the run did, for the learner; ``command`` is how they run this command (the hints name it)."""
    lines = [f"Your copy of the course: {result.folder} (no output shows until you run its cell: predict first)"]
    if result.added:
        lines.append(f"  added: {_listed(result.added)}")
    if result.refreshed:
        lines.append(f"  updated to the course's new version (you had not changed them): {_listed(result.refreshed)}")
    for name, mine in result.fresh.items():
        lines.append(f"  {name}: the course's new version is in; yours is now {mine}")
    if result.newer:
        lines.append("  newer in the course, but you changed your copy, so yours stays as it is:")
        for name in result.newer:
            lines.append(f"    {name}: to get the new one and keep yours as {mine_name(result.folder, name)}, "
                         "close it in JupyterLab and run")
            lines.append(f"      {command} --fresh {shlex.quote(name)} --copy-only")
    if result.gone:
        lines.append(f"  no longer part of the course (left as they are): {_listed(result.gone)}")
    if len(lines) == 1:
        lines.append("  up to date with the course")
    return "\n".join(lines)


def invocation(folder: str) -> str:
    """This command as the learner can type it again here: ``autograd-lab FOLDER``, or ``PYTHON -m autograd_lab
    FOLDER`` with the Python that runs it (relative to here when it lives below, as the repository's .venv does)."""
    script = Path(sys.argv[0] if sys.argv and sys.argv[0] else "python")
    if script.stem == "autograd-lab":
        found = shutil.which("autograd-lab")
        program = ["autograd-lab" if found and Path(found).absolute() == script.absolute() else str(script)]
    else:
        python = Path(sys.executable).absolute()
        found = shutil.which("python")
        if found and Path(found).absolute() == python:
            python = Path("python")
        elif python.is_relative_to(Path.cwd()):
            python = python.relative_to(Path.cwd())
        program = [str(python), "-m", "autograd_lab"]
    return shlex.join([*program, folder])


def lab_argv(no_browser: bool, port: int | None, extra: list) -> list:
    """JupyterLab's command line: the course map, the options passed through, then ``extra`` as given."""
    argv = [MAP]
    if no_browser:
        argv.append("--no-browser")
    if port is not None:
        argv.append(f"--port={port}")
    if getattr(os, "geteuid", lambda: 1)() == 0:  # JupyterLab refuses root unless told; containers often are root
        argv.append("--allow-root")
    return [*argv, *extra]


def open_lab(folder: Path, argv: list) -> int:
    """JupyterLab in this process (so Ctrl+C reaches it as usual), serving the copy and showing its course map."""
    try:
        from jupyterlab.labapp import LabApp
    except ImportError:
        print(f"autograd-lab: JupyterLab is not installed in this Python ({sys.executable}): pip install "
              "jupyterlab (the course's package brings it: pip install autograd-lab)", file=sys.stderr)
        return 1
    os.chdir(folder)
    LabApp.launch_instance(argv=argv)
    return 0


def parse(argv: list) -> tuple:
    """(options, arguments for JupyterLab): everything after ``--`` goes to JupyterLab as it is."""
    lab_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="autograd-lab",
        description="Make (or bring up to date) your own copy of the Autograd Lab course in FOLDER, outputs "
        "cleared and the worked solutions beside it, then open JupyterLab on its course map. Run again after "
        "an update: new notebooks are added, and none you changed is ever overwritten.",
        epilog="Arguments after -- go to JupyterLab as they are, e.g. autograd-lab -- --ServerApp.ip=0.0.0.0",
    )
    parser.add_argument("folder", nargs="?", default=DEFAULT_FOLDER,
                        help=f"the folder of your copy (default: {DEFAULT_FOLDER}; made if missing)")
    parser.add_argument("--copy-only", action="store_true", help="make or update the copy, then stop (no JupyterLab)")
    parser.add_argument("--fresh", action="append", default=[], metavar="NOTEBOOK",
                        help="take the course's version of NOTEBOOK; yours is renamed NOTEBOOK.mine.ipynb (repeatable)")
    parser.add_argument("--no-browser", action="store_true", help="start JupyterLab without opening a browser")
    parser.add_argument("--port", type=int, help="JupyterLab's port (default: JupyterLab's, 8888 or the next free)")
    return parser.parse_args(argv), lab_args


def _course_name(name: str, folder: str) -> str:
    """A --fresh argument as a course file's name: "my-course/04_x.ipynb" and "04_x.ipynb" name the same one."""
    path = Path(name)
    try:
        return path.resolve().relative_to(Path(folder).expanduser().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def main(argv: list | None = None) -> int:
    args, lab_args = parse(sys.argv[1:] if argv is None else list(argv))
    try:
        result = update(args.folder, fresh=tuple(_course_name(name, args.folder) for name in args.fresh))
    except CopyError as err:
        print(f"autograd-lab: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"autograd-lab: could not write your copy in {args.folder}: {err}", file=sys.stderr)
        return 1
    print(describe(result, invocation(args.folder)), flush=True)
    if args.copy_only:
        return 0
    return open_lab(result.folder, lab_argv(args.no_browser, args.port, lab_args))
