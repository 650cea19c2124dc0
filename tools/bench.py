"""The course's benchmark (`make bench`): is it fast on a laptop, and do its lessons hold at scale?

Parts (all by default; choose with --parts):
  notebooks  each notebook executed in a fresh kernel, median wall time over --runs, against the floor
             (a fresh kernel that only imports torch and autograd_lab), measured in the same run
             and, in each run's kernel, the timing claims the notebooks' prose makes (TIMING_CLAIMS), checked
             on the notebook's own measurements right after the cell that made them
             and, in the last run, each widget's callback, timed through the widget's fixed-input call, display
             (graph rendering) included
  nbval      the whole nbval suite, as `make test` runs it: its wall time, and the CPU time of pytest and every
             process under it (workers, kernels, torchrun's agents and ranks)
  scale      looped against vectorized forward+backward up to N = 10^5; bytes saved for backward against k
             for a wide MLP; per-sample gradients, loop against torch.func.vmap. On the CPU (--devices).
  drawing    every drawing of the course (the graphs the notebooks store, and drawings of real architectures:
             tools/drawings.py) laid out by both engines, graphviz-pure and the system's Graphviz dot, side by
             side: the median of --draw-runs layouts each, the engine's start included (what a learner waits for)
  cuda       on a CUDA GPU, when torch sees one: the scale part, the notebooks and the instruments on real
             architectures, in the results' "cuda" section (tools/bench_cuda.py)

Figures are printed as tables and written to bench-results/ as JSON, with the versions and the device.
The targets (reported, never asserted) are tools/bench_targets.py's; docs/performance.md states them, with the
figures of the reference run, docs/bench/reference.json: `--reference` makes this run the reference, `--page`
only rewrites the page from the committed JSON (tools/bench_page.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tools.bench_targets import (
    NBVAL_WALL_TO_CPU_PER_CORE,
    NBVAL_WORKERS,
    WIDGET_BUDGET_MS,
    WIDGET_P95_BUDGET_MS,
    nbval_ratio,
    notebook_target,
    widget_met,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DRAW_TIMEOUT_S = 120.0  # a layout may take this long here: the whole drawings of big models are timed too
# Timing claims in the notebooks' prose that rest on a small margin or on a difference of two timings: on a busy
# machine (nbval, nbgrader and the browser tests run side by side in `make test`) noise can turn them around,
# so no notebook cell asserts them; the benchmark, run on a quiet machine, checks them instead. For each
# notebook: the id of the cell that makes the measurements, and (claim, expression) pairs evaluated in the
# notebook's kernel right after that cell. tests/tools/test_bench_claims.py checks that the cells and names exist.
TIMING_CLAIMS = {
    "03_vectorized_vs_looped.ipynb": ("split", [
        ("03: the MLP's loop is more than 10x slower than the vectorized loss at N = 1000",
         "times['MLP 16-64-1', 'looped_loss', 1000] > 10 * times['MLP 16-64-1', 'vectorized_loss', 1000]"),
        ("03: and the MLP's ratio grows with N",
         "times['MLP 16-64-1', 'looped_loss', 1000] / times['MLP 16-64-1', 'vectorized_loss', 1000]"
         " > times['MLP 16-64-1', 'looped_loss', 10] / times['MLP 16-64-1', 'vectorized_loss', 10]"),
        ("03: the conv net's loop costs less than 3x the vectorized time at every N",
         "all(times['conv net', 'looped_loss', n] < 3 * times['conv net', 'vectorized_loss', n]"
         " for n in MODELS['conv net'][3])"),
        ("03: and the conv net's ratio does not grow with N (at most 1.5x from the smallest N to the largest)",
         "times['conv net', 'looped_loss', MODELS['conv net'][3][-1]] / times['conv net', 'vectorized_loss',"
         " MODELS['conv net'][3][-1]] < 1.5 * times['conv net', 'looped_loss', MODELS['conv net'][3][0]]"
         " / times['conv net', 'vectorized_loss', MODELS['conv net'][3][0]]"),
        ("03: torch.func.vmap computes the per-sample gradients more than 3x faster than the loop",
         "speedup > 3"),
        ("03: backward costs the loop more per extra sample than the forward pass or recording",
         "split_us['backward'] > max(split_us[PHASES[0]], split_us['recording'])"),
        ("03: a forward ATen operation of the loop costs 1/3x to 10x an addition",
         "tiny.fastest * 1e6 / 3 < split_us[PHASES[0]] / loop_ops[PHASES[0]].total() < 10 * tiny.fastest * 1e6"),
        ("03: a backward ATen operation of the loop costs 1/3x to 10x an addition",
         "tiny.fastest * 1e6 / 3 < split_us[PHASES[2]] / loop_ops[PHASES[2]].total() < 10 * tiny.fastest * 1e6"),
    ]),
}


def progress(iterable, **kw):
    try:
        from tqdm import tqdm
    except ImportError:  # the benchmark runs without tqdm too (e.g. on a bare GPU machine)
        return iterable
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kw)


# --------------------------------------------------------------------------------------------
# notebooks and widgets


def _twin_timing_code(src: str, repeats: int) -> str:
    """Code that times a twin cell's call (its last expression), display formatting included."""
    tree = ast.parse(src)
    body, last = tree.body[:-1], tree.body[-1]
    if not isinstance(last, ast.Expr):
        raise ValueError("a twin cell must end with the call it checks")
    setup = ast.unparse(ast.Module(body=body, type_ignores=[]))
    expr = ast.unparse(last.value)
    return f"""
import time as _t, json as _j
{setup}
_fmt = get_ipython().display_formatter.format
_times = []
for _ in range({repeats}):
    _s = _t.perf_counter()
    _r = {expr}
    for _item in (_r if isinstance(_r, tuple) else (_r,)):
        _fmt(_item)
    _times.append(_t.perf_counter() - _s)
print("BENCH" + _j.dumps(_times))
"""


def run_notebook(path: Path, widget_repeats: int = 0):
    """Execute a notebook in a fresh kernel; optionally time its widgets' callbacks in the same kernel."""
    import nbformat

    from tools.kernels import notebook_client

    nb = nbformat.read(path, as_version=4)
    client = notebook_client(nb, timeout=600, kernel_name="python3",
                                  resources={"metadata": {"path": str(path.parent)}})
    widgets, claims = {}, {}
    after, checks = TIMING_CLAIMS.get(path.name, (None, []))
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(list(nb.cells)):
            client.execute_cell(cell, index)
            if cell.get("id") == after:
                claims = _check_claims(client, nb, checks)
        wall = time.perf_counter() - start
        if widget_repeats:
            by_id = {c.get("id"): c for c in nb.cells}
            for cell in nb.cells:
                meta = cell.metadata.get("autograd_lab")
                if not meta:
                    continue
                twin = by_id[meta["twin"]]
                probe = nbformat.v4.new_code_cell(_twin_timing_code(twin.source, widget_repeats))
                nb.cells.append(probe)
                client.execute_cell(probe, len(nb.cells) - 1)
                text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
                times = json.loads(text.split("BENCH", 1)[1].splitlines()[0])
                widgets[f"{path.name}::{cell.get('id')}"] = times
    return wall, widgets, claims


def _check_claims(client, nb, checks) -> dict:
    """Evaluate each (claim, expression) in the kernel: {claim: True, False or the error's text}."""
    import nbformat

    code = ("import json as _json\n_held = {}\n"
            f"for _claim, _expr in {[list(c) for c in checks]!r}:\n"
            "    try:\n        _held[_claim] = bool(eval(_expr))\n"
            "    except Exception as _err:\n        _held[_claim] = f'{type(_err).__name__}: {_err}'\n"
            "print('BENCH' + _json.dumps(_held))\n")
    probe = nbformat.v4.new_code_cell(code)
    nb.cells.append(probe)
    client.execute_cell(probe, len(nb.cells) - 1)
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
    return json.loads(text.split("BENCH", 1)[1].splitlines()[0])


def floor_run() -> float:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch\nimport autograd_lab")])
    tmp = ROOT / "build" / "bench-floor.ipynb"
    tmp.parent.mkdir(exist_ok=True)
    nbformat.write(nb, tmp)
    wall, _, _ = run_notebook(tmp)
    return wall


def bench_notebooks(runs: int, widget_repeats: int, results: dict):
    floors, walls, widget_times, claims = [], {p.name: [] for p in NOTEBOOKS}, {}, {}
    jobs = [("floor", None)] + [(p.name, p) for p in NOTEBOOKS]
    for _ in progress(range(runs), desc="notebooks (runs)"):
        for name, path in progress(jobs, desc="  notebook", leave=False):
            if path is None:
                floors.append(floor_run())
                continue
            last_run = len(walls[name]) == runs - 1
            wall, widgets, held = run_notebook(path, widget_repeats if last_run else 0)
            walls[name].append(wall)
            widget_times.update(widgets)
            for claim, outcome in held.items():
                claims.setdefault(claim, []).append(outcome)
    floor = statistics.median(floors)
    rows = []
    for name, times in walls.items():
        median = statistics.median(times)
        target, limit_s = notebook_target(name, floor)
        rows.append({"notebook": name, "median_s": round(median, 2), "runs": len(times),
                     "ratio_to_floor": round(median / floor, 2), "target": target, "met": median <= limit_s})
    results["notebooks"] = {"floor_s": round(floor, 2), "rows": rows}
    wrows = []
    for key, times in widget_times.items():
        ms = sorted(t * 1e3 for t in times)
        p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
        med = statistics.median(ms)
        wrows.append({"widget": key, "median_ms": round(med, 1), "p95_ms": round(p95, 1), "calls": len(ms),
                      "met": widget_met(med, p95)})
    results["widgets"] = {"target_median_ms": WIDGET_BUDGET_MS, "target_p95_ms": WIDGET_P95_BUDGET_MS,
                          "rows": wrows}
    results["claims"] = {"rows": [
        {"claim": claim, "held": f"{sum(o is True for o in outcomes)} of {len(outcomes)} runs",
         "met": all(o is True for o in outcomes),
         "errors": sorted({o for o in outcomes if isinstance(o, str)}) or ""}
        for claim, outcomes in claims.items()]}


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _set_subreaper(on: bool) -> None:
    """Linux: while on, a process orphaned under us (a kernel's child whose parent exited first) is re-parented
    to this process rather than to init, so that reaping it counts its CPU in RUSAGE_CHILDREN."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children()}


def _reap_finished_orphans(ours: set[int]) -> None:
    """Reap the finished processes re-parented to us, leaving alone the children we had before (others own them)."""
    import psutil

    for child in psutil.Process().children():
        try:
            if child.pid not in ours and child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, 0)
        except (psutil.NoSuchProcess, ChildProcessError):  # reaped meanwhile
            pass


def run_counting_cpu(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run cmd; return its result, its wall time and the CPU time of it and every process under it (user and
    system; a process counts once it has exited and been waited for, as every test's process is)."""
    _set_subreaper(True)
    try:
        ours = _children()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, **kw)
        wall = time.perf_counter() - start
        _reap_finished_orphans(ours)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        _set_subreaper(False)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


def bench_nbval(results: dict, workers: int = NBVAL_WORKERS):
    """The nbval suite as `make test` runs it: its wall time against its CPU time per core."""
    done, wall, cpu = run_counting_cpu(
        [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadscope", "notebooks"],
        cwd=ROOT, capture_output=True, text=True,
    )
    cores = min(usable_cores(), workers)
    ratio = nbval_ratio(wall, cpu, cores)
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    results["nbval"] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cores": cores, "workers": workers,
                        "ratio": round(ratio, 2), "target_ratio": NBVAL_WALL_TO_CPU_PER_CORE,
                        "met": ratio <= NBVAL_WALL_TO_CPU_PER_CORE, "passed": done.returncode == 0,
                        "summary": tail}


# --------------------------------------------------------------------------------------------
# the course's figures at scale (plain torch: runs on a bare GPU machine too)


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(fn, device, min_time=0.3, max_runs=50):
    """Median seconds of fn(), at least one run, more while under min_time."""
    fn()  # warm-up
    _sync(device)
    times = []
    while not times or (sum(times) < min_time and len(times) < max_runs):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _scale_loop_vs_vectorized(device, max_n: int) -> list:
    """Looped against vectorized forward+backward, MLP 16-32-1, one CPU thread (as in notebook 03)."""
    import torch
    from torch import nn

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    rows = []
    sizes = [n for n in (10, 100, 1000, 10_000, 100_000) if n <= max_n]
    for n in progress(sizes, desc=f"loop vs vectorized ({device.type})", leave=False):
        x, y = torch.randn(n, 16, device=device), torch.randn(n, device=device)

        def vectorized(x=x, y=y):
            model.zero_grad(set_to_none=True)
            ((model(x).squeeze(1) - y) ** 2).mean().backward()

        def looped(x=x, y=y, n=n):
            model.zero_grad(set_to_none=True)
            losses = [(model(x[i : i + 1]).squeeze() - y[i]) ** 2 for i in range(n)]
            torch.stack(losses).mean().backward()

        tv = _time(vectorized, device)
        tl = _time(looped, device, min_time=0.0 if n >= 10_000 else 0.3)
        rows.append({"N": n, "vectorized_ms": round(tv * 1e3, 3), "looped_ms": round(tl * 1e3, 1),
                     "ratio": round(tl / tv, 1), "extra_us_per_sample": round((tl - tv) / n * 1e6, 1)})
    torch.set_num_threads(threads)
    return rows


def _scale_saved_vs_k(device) -> list:
    """Bytes saved for backward against k, wide MLP 1024-4096-4096-1024, batch 1024."""
    import torch
    from torch import nn

    from autograd_lab.measure import SavedTensors, allocator_peak

    wide = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024)).to(device)
    xb, yb = torch.randn(1024, 1024, device=device), torch.randn(1024, 1024, device=device)
    rows = []
    for k in progress((1, 2, 4, 8, 16), desc=f"saved bytes vs k ({device.type})", leave=False):
        saved_bytes = []

        def accumulate(k=k, saved_bytes=saved_bytes):
            wide.zero_grad(set_to_none=True)
            for xm, ym in zip(xb.chunk(k), yb.chunk(k)):
                with SavedTensors(exclude=[xm, *wide.parameters()]) as saved:
                    loss = ((wide(xm) - ym) ** 2).mean() / k
                saved_bytes.append(saved.bytes)
                loss.backward()

        peak_alloc = None  # the CPU has no caching allocator to read
        if device.type == "cuda":
            peak_alloc = allocator_peak(accumulate, device) / 2**20
        else:
            accumulate()
        peak_saved = max(saved_bytes)
        rows.append({"k": k, "peak_saved_MiB": round(peak_saved / 2**20, 3),
                     "peak_allocated_above_start_MiB": None if peak_alloc is None else round(peak_alloc, 1)})
    return rows


def _scale_per_sample_grads(device) -> dict:
    """Per-sample gradients: a loop of autograd.grad against torch.func.vmap(grad), N = 1000."""
    import torch
    from torch import nn
    from torch.func import functional_call, grad, vmap

    small = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    params = {k: v.detach() for k, v in small.named_parameters()}
    n = 1000
    x, y = torch.randn(n, 16, device=device), torch.randn(n, device=device)

    def sample_loss(p, xi, yi):
        return (functional_call(small, p, (xi.unsqueeze(0),)).squeeze() - yi) ** 2

    vmapped = vmap(grad(sample_loss), in_dims=(None, 0, 0))

    def loop():
        return [torch.autograd.grad(sample_loss(dict(small.named_parameters()), x[i], y[i]),
                                    list(small.parameters())) for i in range(n)]

    tv = _time(lambda: vmapped(params, x, y), device)
    tl = _time(loop, device, min_time=0.0)
    got, want = vmapped(params, x, y), loop()
    err = max(float((got[name][i] - want[i][j]).abs().max()) for j, name in enumerate(params) for i in (0, n - 1))
    return {"N": n, "loop_ms": round(tl * 1e3, 1), "vmap_ms": round(tv * 1e3, 2),
            "speedup": round(tl / tv, 1), "max_abs_diff": err}


def bench_scale(results: dict, max_n: int, devices):
    import torch

    torch.manual_seed(0)
    out = {}
    for device in devices:
        name = device.type if device.type == "cpu" else f"cuda ({torch.cuda.get_device_name(device)})"
        out[name] = {
            "loop_vs_vectorized": _scale_loop_vs_vectorized(device, max_n),
            "saved_vs_k": _scale_saved_vs_k(device),
            "per_sample_grads": _scale_per_sample_grads(device),
        }
    results["scale"] = out


# --------------------------------------------------------------------------------------------
# drawing: both layout engines on the course's drawings


def _draw_groups() -> dict[str, dict[str, str]]:
    """{group: {drawing: DOT}}: one group per notebook, one per architecture."""
    from tools import drawings

    groups: dict[str, dict[str, str]] = {}
    for key, stored in drawings.notebook_drawings().items():
        groups.setdefault(key.split("::")[0].removesuffix(".ipynb"), {})[key] = stored["dot"]
    for key, dot in drawings.architecture_drawings().items():
        groups.setdefault(key.split(", ")[0], {})[key] = dot
    return groups


def _draw_engines() -> dict:
    """{engine and version, e.g. "graphviz-pure 0.2.2": Engine, or None where it is not here}: graphviz-pure as
    the course installs it, and the system's Graphviz dot on PATH (whatever AUTOGRAD_LAB_DOT says)."""
    import shutil

    from autograd_lab.engine import PURE, Engine, graphviz_check, pure_engine

    program = shutil.which("dot")
    found = {}
    for fallback, engine in ((PURE, pure_engine()), ("dot", Engine(program, "dot", pure=False) if program else None)):
        name = graphviz_check(engine)[0] if engine else None
        found[name or f"{fallback} (not here)"] = engine if name else None
    return found


def _draw_times(dot: str, engines: dict, runs: int) -> tuple[dict, int]:
    """({engine: median seconds}, nodes) of one drawing; the engines take turns, so that a busy moment of the
    machine falls on both."""
    from autograd_lab.graph import svg_of
    from tools.drawings import structure

    times: dict = {name: [] for name, engine in engines.items() if engine}
    nodes = 0
    for _ in range(runs):
        for name in times:
            start = time.perf_counter()
            svg = svg_of(dot, engine=engines[name], timeout=DRAW_TIMEOUT_S)
            times[name].append(time.perf_counter() - start)
            nodes = len(structure(svg)["nodes"])
    return {name: statistics.median(t) for name, t in times.items()}, nodes


def bench_drawing(results: dict, runs: int):
    engines = _draw_engines()
    rows = []
    for group, sources in progress(_draw_groups().items(), desc="drawings (both engines)"):
        row = {"drawings": group, "count": len(sources), "largest_nodes": 0, **{name: 0.0 for name in engines}}
        for dot in sources.values():
            medians, nodes = _draw_times(dot, engines, runs)
            row["largest_nodes"] = max(row["largest_nodes"], nodes)
            for name in engines:
                row[name] = round(row[name] + medians[name] * 1e3, 1) if name in medians else None
        rows.append(row)
    results["drawing"] = {"engines": list(engines), "runs": runs, "rows": rows}
    from tools.architectures import bench_own_models

    results["own_models"] = {"rows": bench_own_models(runs)}


# --------------------------------------------------------------------------------------------
# report


def print_tables(results: dict):
    def table(title, rows, cols):
        if not rows:
            return
        print(f"\n{title}")
        widths = [max(len(c), *(len(str(r.get(c))) for r in rows)) for c in cols]
        print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)))
        for r in rows:
            print("  " + "  ".join(str(r.get(c)).ljust(w) for c, w in zip(cols, widths)))

    env = results["environment"]
    print(f"\nAutograd Lab benchmark -- {env['machine']}, torch {env['torch']}, devices: {', '.join(env['devices'])}")
    _notebook_tables(table, results)
    if "nbval" in results:
        table(f"nbval suite (target: wall <= {NBVAL_WALL_TO_CPU_PER_CORE}x CPU / cores)", [results["nbval"]],
              ["wall_s", "cpu_s", "cores", "ratio", "met", "passed", "summary"])
    if "drawing" in results:
        table("Drawings laid out by both engines (ms for the whole group, medians)", results["drawing"]["rows"],
              ["drawings", "count", "largest_nodes", *results["drawing"]["engines"]])
    if "own_models" in results:
        table("A learner's own model drawn (record_modules + draw_graph, laid out) against torchviz.make_dot (s)",
              results["own_models"]["rows"], ["model", "picture", "draw_graph_s", "make_dot_s"])
    _scale_tables(table, results.get("scale", {}))
    if "cuda" in results:
        from tools.bench_cuda import print_section

        print_section(table, results["cuda"])


def _notebook_tables(table, results: dict):
    """The notebooks part's tables (``results``: the whole results, or the CUDA section)."""
    if "notebooks" not in results:
        return
    nbr = results["notebooks"]
    table(f"Notebook cost (floor: fresh kernel importing torch + autograd_lab = {nbr['floor_s']} s)", nbr["rows"],
          ["notebook", "median_s", "runs", "ratio_to_floor", "target", "met"])
    target = f"median <= {WIDGET_BUDGET_MS:.0f} ms, p95 <= {WIDGET_P95_BUDGET_MS:.0f} ms"
    table(f"Widget latency (target: {target})", results["widgets"]["rows"],
          ["widget", "median_ms", "p95_ms", "calls", "met"])
    table("Timing claims of the notebooks (checked here, not in the notebooks)", results["claims"]["rows"],
          ["claim", "held", "met", "errors"])


def _scale_tables(table, scale: dict):
    for dev, figs in scale.items():
        table(f"Looped against vectorized forward+backward, MLP 16-32-1 [{dev}]", figs["loop_vs_vectorized"],
              ["N", "vectorized_ms", "looped_ms", "ratio", "extra_us_per_sample"])
        table(f"Peak bytes saved for backward against k, MLP 1024-4096-4096-1024, batch 1024 [{dev}]",
              figs["saved_vs_k"], ["k", "peak_saved_MiB", "peak_allocated_above_start_MiB"])
        table(f"Per-sample gradients, loop against vmap [{dev}]", [figs["per_sample_grads"]],
              ["N", "loop_ms", "vmap_ms", "speedup", "max_abs_diff"])


def _graphviz_version() -> str:
    try:
        from autograd_lab.engine import graphviz_check
    except ImportError:  # a bare machine without the course's package: the scale part still runs
        return "unknown"
    return graphviz_check()[0] or "not found"


def _versions(*dists: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in dists:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "not installed"
    return found


def environment() -> dict:
    import torch

    devices = ["cpu"] + ([f"cuda: {torch.cuda.get_device_name(0)}"] if torch.cuda.is_available() else [])
    try:
        system = platform.freedesktop_os_release().get("PRETTY_NAME", platform.system())
    except (AttributeError, OSError):  # not Linux, or no os-release file
        system = platform.platform(terse=True)
    return {"python": platform.python_version(), "torch": torch.__version__, "graphviz": _graphviz_version(),
            "packages": _versions("nbval", "nbclient", "jupyterlab", "ipywidgets", "torchviz"),
            "system": system, "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores",
            "cores": usable_cores(), "devices": devices, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


PARTS = ("notebooks", "nbval", "scale", "drawing", "cuda")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ",".join(PARTS))
    parser.add_argument("--runs", type=int, default=2, help="fresh-kernel runs per notebook (median)")
    parser.add_argument("--widget-calls", type=int, default=20, help="timed calls per widget callback")
    parser.add_argument("--jobs", type=int, default=NBVAL_WORKERS, help="nbval's pytest-xdist workers")
    parser.add_argument("--max-n", type=int, default=100_000, help="largest N for looped against vectorized")
    parser.add_argument("--draw-runs", type=int, default=3, help="layouts of each drawing by each engine (median)")
    parser.add_argument("--devices", default="cpu",
                        help="the scale part's devices, e.g. cpu,cuda (the cuda part measures it on a GPU anyway)")
    parser.add_argument("--out", default=str(ROOT / "bench-results"), help="folder for the JSON results")
    parser.add_argument("--reference", action="store_true",
                        help="this run (every part) becomes the reference: docs/bench/reference.json and the page")
    parser.add_argument("--page", action="store_true",
                        help="measure nothing: rewrite docs/performance.md from docs/bench/reference.json")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.widget_calls < 1 or args.jobs < 1 or args.draw_runs < 1:
        parser.error("--runs, --widget-calls, --jobs and --draw-runs must be at least 1")
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = args.parts - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if args.reference and args.parts not in (set(PARTS), {"cuda"}):
        parser.error("--reference needs every part (leave out --parts), or the cuda part alone (--parts cuda, "
                     "which replaces only the reference's CUDA section): the page shows them all")
    return args


def main(argv=None):
    args = parse_args(argv)
    from tools import bench_page

    if args.page:
        print(f"rewrote {bench_page.write_page().relative_to(ROOT)} from {bench_page.REFERENCE.relative_to(ROOT)}")
        return 0

    import torch

    devices = [torch.device(d) for d in args.devices.split(",")]
    results = {"environment": environment(),
               "settings": {"runs": args.runs, "widget_calls": args.widget_calls, "max_n": args.max_n,
                            "draw_runs": args.draw_runs}}
    start = time.perf_counter()
    if "notebooks" in args.parts:
        bench_notebooks(args.runs, args.widget_calls, results)
    if "nbval" in args.parts:
        bench_nbval(results, args.jobs)
    if "scale" in args.parts:
        bench_scale(results, args.max_n, devices)
    if "drawing" in args.parts:
        bench_drawing(results, args.draw_runs)
    if "cuda" in args.parts:
        from tools.bench_cuda import bench_cuda

        bench_cuda(results, runs=args.runs, widget_calls=args.widget_calls, max_n=args.max_n, draw_runs=args.draw_runs)
    results["environment"]["total_s"] = round(time.perf_counter() - start, 1)
    print_tables(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = json.dumps(results, indent=2) + "\n"
    for name in (f"bench-{stamp}.json", "latest.json"):
        (out / name).write_text(text)
    print(f"\nTotal {results['environment']['total_s']} s. Results: {out / f'bench-{stamp}.json'} (and latest.json)")
    if args.reference:
        from tools.bench_cuda import into_reference

        committed = json.loads(bench_page.REFERENCE.read_text()) if bench_page.REFERENCE.exists() else None
        bench_page.REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        bench_page.REFERENCE.write_text(json.dumps(into_reference(results, committed, args.parts), indent=2) + "\n")
        bench_page.write_page()
        print(f"Reference: {bench_page.REFERENCE.relative_to(ROOT)}; page: {bench_page.PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
