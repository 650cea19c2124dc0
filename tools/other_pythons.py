"""Run the non-browser suite on other supported Pythons (run by `make test-pythons`).

    python -m tools pythons 3.10 3.12 3.13

For each version it looks for an interpreter (``python3.X`` on PATH, else pyenv's), sets up its own
virtual environment ``.venv-3.X`` with the Makefile's set-up (the same lock, torch from TORCH_INDEX) and runs
what ``make test`` runs beside the browser tests (``tools.run_tests.REST``): the unit tests and nbval. A
version that is not on this machine is named loudly at the end; so is every failure. Where torch comes
from can be set per version: ``TORCH_INDEX_312=`` (empty) installs PyPI's default torch build, what
``pip install torch`` gives (a CUDA build on Linux), to check the course on the build most learners have.

Exit status: 0 when every version found passed, 1 otherwise; absent versions alone do not fail the run,
unless ``--require`` is given.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tools.run_tests import REST

REPO = Path(__file__).resolve().parents[1]


def _runs_as(python: str, version: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def find_python(version: str) -> str | None:
    """An interpreter for ``version`` ("3.12") that really runs: ``python3.12`` on PATH, else pyenv's newest 3.12.x.

    (A pyenv shim is on PATH even when that version is not active, and then fails: it is skipped.)
    """
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += [str(p) for p in sorted((pyenv_root / "versions").glob(f"{version}.*/bin/python{version}"))[::-1]]
    return next((c for c in candidates if c and _runs_as(c, version)), None)


def make_args(version: str, python: str) -> list[str]:
    args = [f"PYTHON={python}", f"VENV=.venv-{version}"]
    key = f"TORCH_INDEX_{version.replace('.', '')}"
    if key in os.environ:
        args.append(f"TORCH_INDEX={os.environ[key]}")
    return args


def run_one(version: str, python: str, jobs: str) -> tuple[bool, str]:
    args = make_args(version, python)
    print(f"\n=== Python {version} ({python}) -> .venv-{version}", flush=True)
    start = time.monotonic()
    if subprocess.run(["make", "--no-print-directory", "setup-test", *args], cwd=REPO).returncode:
        return False, "set-up failed"
    venv_python = REPO / f".venv-{version}" / "bin" / "python"
    torch_build = subprocess.run([str(venv_python), "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    print(f"=== Python {version}: torch {torch_build}", flush=True)
    tests = subprocess.run(
        [str(venv_python), "-m", "pytest", "-m", REST, "-n", jobs, "--dist", "loadscope", "-q",
         # nbgrader's autograde round trip runs here too (where nbgrader installs: 3.11 and newer): nbgrader's
         # Execute starts its kernel client the sync way, which tools/kernels.SteadyKernel must cover on every
         # Python (without it, autograde on 3.13 sat idle until the cell timeout).
         "tests", "notebooks"],
        cwd=REPO,
    )
    took = f"{time.monotonic() - start:.0f} s, torch {torch_build}"
    return tests.returncode == 0, ("passed" if tests.returncode == 0 else "TESTS FAILED") + f" ({took})"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def choose(versions, find, ends: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """The versions to test, oldest first, each with its interpreter, and a line for each one not tested.

    ``find(version)`` gives an interpreter or None (absent). With ``ends``, only the oldest and the newest of
    those found are tested (what CI has time for): a missing newest version moves the test to the next one.
    """
    found: dict[str, str] = {}
    results: dict[str, str] = {}
    for version in sorted(set(versions), key=_key):
        python = find(version)
        if python is None:
            results[version] = f"ABSENT: no python{version} on PATH or in pyenv; not tested"
        else:
            found[version] = python
    if ends and len(found) > 2:
        names = list(found)
        for version in names[1:-1]:
            results[version] = "found, left out (--ends tests the oldest and the newest found)"
            del found[version]
    return found, results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="e.g. 3.10 3.12 3.13")
    parser.add_argument("--require", action="store_true", help="fail when a version is not on this machine")
    parser.add_argument("--ends", action="store_true",
                        help="of the versions found, test only the oldest and the newest (CI's time limit)")
    parser.add_argument("--pypi-torch-on-newest", action="store_true",
                        help="the newest version tested gets PyPI's default torch build, unless "
                             "TORCH_INDEX_<version> says otherwise")
    parser.add_argument("--jobs", default=os.environ.get("JOBS", "2"))
    opts = parser.parse_args(argv)
    found, results = choose(opts.versions, find_python, ends=opts.ends)
    ok = not (opts.require and any(line.startswith("ABSENT") for line in results.values()))
    chosen = list(found)
    if opts.pypi_torch_on_newest and chosen:
        os.environ.setdefault(f"TORCH_INDEX_{chosen[-1].replace('.', '')}", "")
    for version in chosen:
        passed, summary = run_one(version, found[version], opts.jobs)
        results[version] = summary
        ok = ok and passed
    print("\n=== make test-pythons: summary")
    for version, summary in sorted(results.items(), key=lambda kv: _key(kv[0])):
        print(f"  Python {version}: {summary}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
