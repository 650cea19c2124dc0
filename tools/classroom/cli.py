"""The classroom kit's command line, run from the repository root with the course's Python
(``.venv/bin/python -m tools classroom ...``):

    annotate NOTEBOOK...          add the slide metadata to the notebooks, in place (idempotent)
    annotate --check NOTEBOOK...  change nothing; exit 1 and name every notebook that is not annotated or
                                  whose exercises are not laid out as tools/classroom/layout.py says
    student NOTEBOOK...           the student release (nbgrader generate_assignment) -> build/student/,
                                  the nbgrader course it comes from (source, release, gradebook) -> build/nbgrader/
    handouts NOTEBOOK...          each executed notebook as one self-contained HTML page -> build/handouts/,
                                  with a contents page, index.html
    nbgrader ARGS...              any nbgrader command, run in the course (build/nbgrader) with this
                                  environment's tools on PATH, e.g. `nbgrader autograde 01_leaf_tensors`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from .annotation import annotate_file
from .cells import ClassroomError
from .course import generate, nbgrader_env
from .handouts import handouts

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


def _paths(names: list[str]) -> list[Path]:
    paths = [Path(n) for n in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    return sorted(paths, key=lambda p: p.name)


def _shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools classroom", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("annotate", help="add the slide metadata to the notebooks (idempotent)")
    p.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a notebook is not annotated or not laid out"
    )
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("student", help="the student release of every notebook (nbgrader generate_assignment)")
    p.add_argument("--course", type=Path, default=BUILD / "nbgrader", help="the nbgrader course directory")
    p.add_argument("--out", type=Path, default=BUILD / "student", help="where the release notebooks go, flat")
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("handouts", help="every executed notebook as a self-contained HTML page, with a contents page")
    p.add_argument("--out", type=Path, default=BUILD / "handouts")
    p.add_argument("notebooks", nargs="+")
    p = sub.add_parser("nbgrader", help="run an nbgrader command in the course directory (e.g. autograde NB)")
    p.add_argument("--course", type=Path, default=BUILD / "nbgrader")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "nbgrader":
        if not (args.course / "nbgrader_config.py").exists():
            raise SystemExit(f"no nbgrader course in {args.course}: run `make student` first")
        return subprocess.call([sys.executable, "-m", "nbgrader", *args.args], cwd=args.course, env=nbgrader_env())
    paths = _paths(args.notebooks)
    try:
        if args.cmd == "annotate":
            problems = [line for p in paths for line in annotate_file(p, check=args.check)]
            for line in problems:
                print(line)
            return 1 if problems else 0
        if args.cmd == "student":
            for p in generate(paths, args.course.resolve(), args.out.resolve()):
                print(f"student release: {_shown(p)}")
        elif args.cmd == "handouts":
            for p in handouts(paths, args.out.resolve()):
                print(f"handout: {_shown(p)}")
    except ClassroomError as err:
        print(f"classroom: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
