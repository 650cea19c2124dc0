"""Soak: every notebook executed headless, many runs in a row, on a machine kept busy (run by `make soak`).

    python -m tools soak [NOTEBOOK ...] [--runs N] [--long-runs N] [--short] [--tools nbconvert papermill]

Each notebook runs with ``jupyter nbconvert --to notebook --execute`` and with ``papermill``, both with their
defaults (no cell timeout: a stalled wait for a reply would wait for ever, jupyter/nbclient#312), from the
notebook's folder, the tools of the Python running this module. First one warm-up run, not counted (it
reads torch from disk), then a quiet reference: ``--quiet-runs`` runs of each notebook and tool, nothing else
started. Then ``--busy`` CPU-bound processes are started and each notebook runs ``--runs`` times in a row per
tool (``--long-runs`` for the notebooks in ``--long``: 00, the first a learner runs, 04, a widget beside exercises
that train, and 07, the longest run). A run that has not ended after ``--timeout-factor`` times its quiet time (at least
``MIN_TIMEOUT_S``) is killed and counted as a stall. Every run's time and the load average are printed as
they come, then a table per notebook and tool; the verdict is that every run ended, without error, within
``--factor`` times the quiet time (a run has ended well when its executed copy is complete: papermill's
exit status 1 for the error a ``raises-exception`` cell shows counts as ended). ``--json FILE`` keeps
every figure (default build/soak-pyX.Y.json).
Other load on the machine slows the quiet reference and the busy runs alike: the load is printed beside each.

Exit status: 0 when every notebook and tool passed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autograd_lab import processes  # the standard library only: no torch for this driver

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
BIN = Path(sys.executable).parent  # the tools beside this Python: its environment's nbconvert and papermill
LONG = ("00", "04", "07")  # the first notebook, a widget beside training exercises, the longest run
SHORT = ("00", "04")  # --short (CI): these, SHORT_RUNS times per tool
SHORT_RUNS = 3
MIN_TIMEOUT_S = 120.0
QUIET_TIMEOUT_S = 30 * 60  # the limit of a warm-up or quiet run: generous, since it sets the reference
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def command(tool: str, notebook: Path, out_dir: Path) -> list[str]:
    """What a user types, with the tool's defaults: the notebook in, an executed copy out."""
    if tool == "nbconvert":
        return [str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute", str(notebook),
                "--output-dir", str(out_dir), "--output", notebook.stem]
    if tool == "papermill":
        return [str(BIN / "papermill"), str(notebook), str(out_dir / notebook.name)]
    raise ValueError(f"soak: unknown tool {tool!r}; use nbconvert or papermill")


@dataclass
class Run:
    notebook: str
    tool: str
    busy: bool
    seconds: float
    status: str  # "ok", "failed (exit N)" or "stalled"
    load: float  # the 1-minute load average as the run ended


def finished(executed: Path) -> bool:
    """Every code cell ran, and only cells tagged ``raises-exception`` hold an error. (papermill exits 1 on any
    error output, also the errors those cells exist to show; nbconvert lets them pass.)"""
    import nbformat

    if not executed.is_file():
        return False
    for cell in nbformat.read(executed, as_version=4).cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        errors = any(o.output_type == "error" for o in cell.outputs)
        if cell.execution_count is None or errors and "raises-exception" not in cell.metadata.get("tags", []):
            return False
    return True


def run_once(tool: str, notebook: Path, timeout: float, busy: bool, log_dir: Path) -> Run:
    """One execution, killed with everything it started if it outlasts ``timeout``."""
    log = log_dir / f"{notebook.stem}-{tool}.log"
    with tempfile.TemporaryDirectory(prefix="al-soak-") as out, log.open("w") as sink:
        start = time.monotonic()
        proc = processes.start(command(tool, notebook, Path(out)), cwd=notebook.parent, stdout=sink,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            code = proc.wait(timeout=timeout)
            status = "ok" if code == 0 or finished(Path(out) / notebook.name) else f"failed (exit {code}; {log})"
        except subprocess.TimeoutExpired:
            processes.stop(proc)
            status = f"stalled (killed after {timeout:.0f} s)"
        seconds = time.monotonic() - start
    return Run(notebook.name, tool, busy, round(seconds, 2), status, os.getloadavg()[0])


def _say(run: Run, i: int, of: int, quiet: float | None) -> None:
    ratio = f" = {run.seconds / quiet:4.1f} x quiet" if quiet else ""
    print(f"  {run.notebook:<36} {run.tool:<9} {'busy' if run.busy else 'quiet'} {i}/{of} "
          f"{run.seconds:7.1f} s{ratio}  load {run.load:4.1f}  {run.status}", flush=True)


def quiet_times(notebooks, tools, repeat: int, log_dir: Path) -> tuple[dict, list[Run]]:
    """The reference: the median of ``repeat`` runs per notebook and tool, nothing else started."""
    quiet, runs = {}, []
    for nb in notebooks:
        for tool in tools:
            mine = []
            for i in range(repeat):
                mine.append(run_once(tool, nb, QUIET_TIMEOUT_S, False, log_dir))
                _say(mine[-1], i + 1, repeat, None)
            runs += mine
            quiet[nb.name, tool] = statistics.median(r.seconds for r in mine)
    return quiet, runs


def busy_runs(notebooks, tools, counts: dict, quiet: dict, timeout_factor: float, log_dir: Path) -> list[Run]:
    """Each notebook ``counts[name]`` times in a row per tool; the caller keeps the machine busy."""
    runs = []
    for nb in notebooks:
        for tool in tools:
            timeout = max(timeout_factor * quiet[nb.name, tool], MIN_TIMEOUT_S)
            for i in range(counts[nb.name]):
                runs.append(run_once(tool, nb, timeout, True, log_dir))
                _say(runs[-1], i + 1, counts[nb.name], quiet[nb.name, tool])
    return runs


def table(runs: list[Run], quiet: dict, factor: float) -> tuple[list[str], bool]:
    """One line per notebook and tool: runs, quiet, median, max, max/quiet, load seen, verdict."""
    lines = [f"{'notebook':<36} {'tool':<9} {'runs':>4} {'quiet s':>8} {'median s':>9} {'max s':>7} "
             f"{'max/quiet':>9}  {'load':>9}  verdict (every run ok within {factor:g} x quiet)"]
    passed = True
    for (name, tool), q in quiet.items():
        mine = [r for r in runs if r.busy and (r.notebook, r.tool) == (name, tool)]
        if not mine:
            continue
        worst = max(r.seconds for r in mine)
        bad = [r for r in mine if r.status != "ok" or r.seconds > factor * q]
        passed &= not bad
        loads = f"{min(r.load for r in mine):.1f}-{max(r.load for r in mine):.1f}"
        verdict = "PASS" if not bad else f"FAIL: {len(bad)} run(s): {bad[0].status}, {bad[0].seconds:.0f} s"
        lines.append(f"{name:<36} {tool:<9} {len(mine):>4} {q:>8.1f} "
                     f"{statistics.median(r.seconds for r in mine):>9.1f} {worst:>7.1f} {worst / q:>9.2f}  "
                     f"{loads:>9}  {verdict}")
    return lines, passed


def burn(n: int) -> list[subprocess.Popen]:
    """``n`` CPU-bound processes, each in a group of its own (processes.stop ends them)."""
    return [processes.start([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def kernel_line() -> str:
    """Which Python the notebooks' kernel (python3) runs: the soak is only about this environment if it is it."""
    from jupyter_client.kernelspec import KernelSpecManager

    return " ".join(KernelSpecManager().get_kernel_spec("python3").argv[:3])


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tools soak", description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/NN_*.ipynb")
    p.add_argument("--runs", type=int, default=5, help="busy runs of each notebook per tool (default 5)")
    p.add_argument("--long-runs", type=int, default=30, help="busy runs of the --long notebooks (default 30)")
    p.add_argument("--long", nargs="*", default=list(LONG), help=f"number prefixes (default {' '.join(LONG)})")
    p.add_argument("--short", action="store_true", help=f"CI's: {' and '.join(SHORT)}, {SHORT_RUNS} runs each")
    p.add_argument("--tools", nargs="+", default=["nbconvert", "papermill"], choices=["nbconvert", "papermill"])
    p.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the runs (default 2)")
    p.add_argument("--factor", type=float, default=3.0, help="a run passes within this x quiet (default 3)")
    p.add_argument("--quiet-runs", type=int, default=1, help="quiet reference runs per notebook and tool")
    p.add_argument("--timeout-factor", type=float, default=10.0, help="a run longer than this x quiet stalled")
    p.add_argument("--json", type=Path, default=REPO / "build" / f"soak-py{PYTHON}.json")
    args = p.parse_args(argv)
    for name in ("runs", "long_runs", "quiet_runs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.short:
        args.notebooks = args.notebooks or [next(NOTEBOOKS.glob(f"{n}_*.ipynb")) for n in SHORT]
        args.runs = args.long_runs = SHORT_RUNS
    notebooks = [nb.resolve() for nb in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    missing = [str(nb) for nb in notebooks if not nb.is_file()]
    if missing:
        sys.exit(f"soak: no such notebook: {', '.join(missing)}")
    counts = {nb.name: args.long_runs if nb.name[:2] in args.long else args.runs for nb in notebooks}
    log_dir = Path(tempfile.mkdtemp(prefix="al-soak-logs-"))
    print(f"soak: Python {PYTHON}; kernel python3 = {kernel_line()}; logs of the last runs in {log_dir}")
    # A first run reads torch and the kernel from disk: a quiet reference taken then would be too slow.
    warm = run_once(args.tools[0], notebooks[0], QUIET_TIMEOUT_S, False, log_dir)
    print(f"warm-up (not counted): {warm.notebook} {warm.tool} {warm.seconds:.1f} s {warm.status}")
    print(f"quiet reference ({args.quiet_runs} run(s) each), load {os.getloadavg()[0]:.1f}:", flush=True)
    quiet, runs = quiet_times(notebooks, args.tools, args.quiet_runs, log_dir)
    burners = burn(args.busy)
    try:
        time.sleep(2)
        print(f"busy: {args.busy} CPU-bound processes started, load {os.getloadavg()[0]:.1f}:", flush=True)
        runs += busy_runs(notebooks, args.tools, counts, quiet, args.timeout_factor, log_dir)
    finally:
        for proc in burners:
            processes.stop(proc)
    lines, passed = table(runs, quiet, args.factor)
    print(f"\nsoak on Python {PYTHON}, {args.busy} CPU-bound processes beside each busy run:")
    print("\n".join(lines))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"python": PYTHON, "factor": args.factor, "busy": args.busy,
                                     "quiet": [[*k, v] for k, v in quiet.items()],
                                     "runs": [asdict(r) for r in runs]}, indent=1) + "\n")
    print(f"every run: {args.json}\n{'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
