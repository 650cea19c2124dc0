"""``make test``'s two suites side by side: the browser tests next to the rest (unit tests and nbval).

On their own the browser tests keep less than one core busy (they wait on JupyterLab, Chromium and the
kernel), while the rest keeps two busy in bursts: side by side the pair finishes sooner than one after the
other. The rest prints as it runs; the browser suite's output goes to ``test-artifacts/browser-tests.log``
and is printed when both are done, so the two never interleave. Only the rest records its results in
``.pytest_cache`` (one writer: ``pytest --lf`` then reruns what failed there).

``python -m tools test [--jobs N] [--serial]``: exit status 0 only when both suites pass. ``--serial`` runs
them one after the other (for a slow machine, or to read the browser tests' output live). ``--fast``
(``make test-fast``) runs the rest without its slow tests, and no browser tests.

What each suite selects (pytest -m), with one home here:
  REST  everything but the browser tests, the class on JupyterHub (``make test-hub``), the nbgrader
        round trips that only ``make test-hub`` runs (mark ``autograde``) and the wheel's test in a fresh
        environment (mark ``package``, ``make test-package``)
  FAST  REST without the tests marked ``slow``
  the browser suite: the tests marked ``browser``, all in tests/browser/
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autograd_lab import processes  # the standard library only: no torch for this driver

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "test-artifacts" / "browser-tests.log"
REST = "not browser and not hub and not autograde and not package"
FAST = f"{REST} and not slow"
BROWSER_TESTS = "tests/browser"  # where every browser test lives: collecting only there spares a whole collection


def commands(jobs: int, fast: bool = False) -> tuple[list[str], list[str]]:
    """The rest (unit tests and nbval: one notebook's cells stay on one worker) and the browser suite."""
    pytest = [sys.executable, "-m", "pytest"]
    rest = [*pytest, "-m", FAST if fast else REST, "-n", str(jobs), "--dist", "loadscope", "--no-loadscope-reorder",
            "tests", "notebooks"]
    browser = [*pytest, "-m", "browser", "-p", "no:cacheprovider", BROWSER_TESTS]
    return rest, browser


def cpu_seconds() -> float:
    """The CPU time of this process's children that have ended (and of theirs): every process a suite starts."""
    used = os.times()
    return used.children_user + used.children_system


def side_by_side(rest: list[str], browser: list[str]) -> int:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    start, cpu_start = time.monotonic(), cpu_seconds()
    print(f"make test: the browser tests run beside the rest; their output: {LOG.relative_to(ROOT)}", flush=True)
    with open(LOG, "w") as log:
        side = processes.start(browser, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rest_code = subprocess.call(rest, cwd=ROOT)
            rest_s = time.monotonic() - start
            if side.poll() is None:
                print("\nmake test: waiting for the browser tests ...", flush=True)
            browser_code = side.wait()
        finally:  # Ctrl-C or an error here: the browser suite does not outlive make test
            processes.stop(side, signal.SIGTERM, grace=10)
    print(f"\n{'=' * 30} browser tests (JupyterLab in Chromium) {'=' * 30}", flush=True)
    sys.stdout.write(LOG.read_text())
    print(f"\nmake test: unit tests and nbval {'passed' if rest_code == 0 else 'FAILED'} ({rest_s:.0f} s); "
          f"browser tests {'passed' if browser_code == 0 else 'FAILED'}; {time.monotonic() - start:.0f} s in all, "
          f"{cpu_seconds() - cpu_start:.0f} CPU-s on {os.cpu_count()} cores",
          flush=True)
    return 0 if rest_code == 0 and browser_code == 0 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers for the unit tests and nbval")
    parser.add_argument("--serial", action="store_true", help="the browser tests after the rest, output live")
    parser.add_argument("--fast", action="store_true", help="the rest without its slow tests; no browser tests")
    args = parser.parse_args(argv)
    rest, browser = commands(args.jobs, fast=args.fast)
    if args.fast:
        return subprocess.call(rest, cwd=ROOT)
    if args.serial:
        first = subprocess.call(rest, cwd=ROOT)
        return 1 if subprocess.call(browser, cwd=ROOT) or first else 0
    return side_by_side(rest, browser)


if __name__ == "__main__":
    sys.exit(main())
