"""``make test-cuda``: the course checked on a CUDA GPU, in two suites, one after the other.

1. The claim tests' CUDA cases: every test that takes the ``device`` fixture (tests/conftest.py) runs once per
   device, one that takes ``gpu`` on CUDA alone, and each CUDA case carries the mark ``cuda``; this suite runs
   those, with ``AUTOGRAD_LAB_REQUIRE_CUDA`` set, so that a case which cannot reach the GPU fails instead of
   skipping.
2. nbval on every notebook, each kernel on the GPU (the notebooks pick CUDA when torch sees it), compared with
   the stored outputs, which come from the CPU. A line that states a fact of the device it ran on begins
   ``on DEVICE:``; the sanitiser ``SANITIZER`` leaves such lines out on both sides, and everything else is compared.

Where torch sees no GPU the command says why and what to do, and stops with status 2 before running anything:
a check of the GPU that passed without one would say nothing. ``python -m tools test-cuda [--jobs N]``: exit
status 0 only when both suites pass; ``--junit DIR`` also writes each suite's JUnit XML there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tools import run_tests

ROOT = Path(__file__).resolve().parents[1]
SANITIZER = ROOT / "tools" / "nbval_devices.cfg"
REQUIRE_CUDA = "AUTOGRAD_LAB_REQUIRE_CUDA"  # tests/conftest.py reads it
CLAIMS = f"cuda and {run_tests.REST}"
# where the tests that take the device or gpu fixture live (tests/tools/test_run_cuda_tests.py keeps every one there):
# collecting only these keeps the GPU machine's run to the packages they import
CLAIM_FOLDERS = ("tests/instruments", "tests/notebooks")
NO_GPU_EXIT = 2
# How to get a CUDA build of torch into the course's .venv: README's GPU section says the same.
CUDA_BUILD = ("make test-cuda TORCH_INDEX=https://download.pytorch.org/whl/cu128 in a fresh clone (or after "
              "rm -rf .venv), with the index of your CUDA version from pytorch.org")


def cuda_problem() -> str | None:
    """Why this Python cannot check the course on a GPU, or None when torch sees one."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a CPU build: it cannot use a GPU. For a CUDA build: {CUDA_BUILD}.")
    return (f"torch {torch.__version__} is built for CUDA {torch.version.cuda} but sees no GPU here (no NVIDIA "
            "driver, no device, or CUDA_VISIBLE_DEVICES hides them): run make test-cuda on a machine with one.")


def device_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def commands(jobs: int, junit: Path | None = None) -> tuple[list[str], list[str]]:
    """The claim tests' CUDA cases, and nbval on every notebook with the device lines sanitised."""
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(jobs)]

    def xml(name):
        return [f"--junitxml={junit / name}"] if junit is not None else []

    claims = [*pytest, "-m", CLAIMS, *xml("claims-cuda.xml"), *CLAIM_FOLDERS]
    notebooks = [*pytest, "--dist", "loadscope", f"--nbval-sanitize-with={SANITIZER}", *xml("nbval-cuda.xml"),
                 "notebooks"]
    return claims, notebooks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers for each suite")
    parser.add_argument("--junit", type=Path, help="a folder for each suite's JUnit XML")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    problem = cuda_problem()
    if problem is not None:
        print(f"make test-cuda: no CUDA GPU here, so nothing was tested. {problem}", file=sys.stderr)
        return NO_GPU_EXIT
    if args.junit is not None:
        args.junit.mkdir(parents=True, exist_ok=True)
    print(f"make test-cuda: on {device_name()}", flush=True)
    env = {**os.environ, REQUIRE_CUDA: "1"}
    verdicts = {}
    for name, cmd in zip(("claim tests (CUDA cases)", "nbval on CUDA"), commands(args.jobs, args.junit)):
        print(f"\nmake test-cuda: {name}: {' '.join(cmd[1:])}", flush=True)
        verdicts[name] = subprocess.call(cmd, cwd=ROOT, env=env)
    print("\nmake test-cuda: " + "; ".join(f"{name} {'passed' if code == 0 else 'FAILED'}"
                                          for name, code in verdicts.items()), flush=True)
    return 0 if not any(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
