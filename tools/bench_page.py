"""docs/performance.md from `make bench`'s JSON: the page's prose is written by hand, its figures are made.

The page holds blocks, each between a line `<!-- bench:NAME -->` and a line `<!-- /bench -->`; `python -m
tools bench --page` rewrites every block from the committed reference run (docs/bench/reference.json) and
leaves the prose around them alone. The verdicts ("met") are worked out here against today's targets in
tools/goal.py, so a changed target shows on the page at once. tests/tools/test_bench_page.py fails
when the committed page differs from what this module makes of the committed JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools import bench_targets as goal

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
REFERENCE = ROOT / "docs" / "bench" / "reference.json"
BLOCK = re.compile(r"^<!-- bench:(?P<name>\w+) -->\n(?P<body>.*?)^<!-- /bench -->$", re.S | re.M)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def _short(notebook: str) -> str:
    """"03_vectorized_vs_looped.ipynb" -> "03 vectorized vs looped"."""
    return notebook.removesuffix(".ipynb").replace("_", " ")


def _engine(found: str) -> str:
    """The engine a run drew with: "graphviz-pure 0.2.2"; a bare version is the system dot of older runs."""
    return f"Graphviz dot {found}" if found[:1].isdigit() else found


def environment(results: dict) -> str:
    env, settings = results["environment"], results["settings"]
    packages = ", ".join(f"{name} {version}" for name, version in env["packages"].items())
    lines = [
        f"- Machine: {env['machine']} ({env['cores']} usable), {env['system']}",
        f"- Devices: {', '.join(env['devices'])}; torch threads: {env['threads']}",
        f"- Python {env['python']}, torch {env['torch']}, graphs laid out by {_engine(env['graphviz'])}; {packages}",
        f"- Settings: {settings['runs']} fresh-kernel runs per notebook (medians), {settings['widget_calls']} "
        f"calls per widget, N up to {settings['max_n']:,}",
        f"- The whole run: {env['total_s']} s",
    ]
    return "\n".join(lines)


def targets(_results: dict) -> str:
    own = "; ".join(f"{_short(name)[:2]} {budget:.0f} s ({why})" for name, (budget, why) in goal.OWN_BUDGET_S.items())
    lines = [
        f"- **A notebook**, run top to bottom in a fresh kernel: at most {goal.FLOOR_FACTOR:.0f}x the floor (a "
        f"fresh kernel that only imports torch and autograd_lab). Budgets of their own: {own}.",
        f"- **A widget**, each change with its output rendered: median at most {goal.WIDGET_BUDGET_MS:.0f} ms, "
        f"95th percentile at most {goal.WIDGET_P95_BUDGET_MS:.0f} ms.",
        "- **A timing claim** of the notebooks' prose: it holds in every run.",
        f"- **nbval** with {goal.NBVAL_WORKERS} workers, as `make test` runs it: its wall time at most "
        f"{goal.NBVAL_WALL_TO_CPU_PER_CORE}x its CPU time divided by the cores it runs on.",
    ]
    lines += [f"- **{what}**, on 2 cores: {target} (not measured by `make bench`: {how})."
              for what, target, how in goal.SUITE_TARGETS]
    return "\n".join(lines)


def notebooks(results: dict) -> str:
    part = results.get("notebooks")
    if not part:
        return "Not measured in the reference run."
    floor = part["floor_s"]
    rows = [["floor: a fresh kernel importing torch and autograd_lab", floor, "1.00", "", ""]]
    for row in part["rows"]:
        target, limit = goal.notebook_target(row["notebook"], floor)
        rows.append([_short(row["notebook"]), row["median_s"], f"{row['ratio_to_floor']:.2f}", target,
                     yes(row["median_s"] <= limit)])
    return table(["Notebook", "Seconds", "x floor", "Target", "Met"], rows)


def widgets(results: dict) -> str:
    part = results.get("widgets")
    if not part:
        return "Not measured in the reference run."
    rows = []
    for row in part["rows"]:
        notebook, cell = row["widget"].split("::")
        rows.append([f"{_short(notebook)[:2]} `{cell}`", row["median_ms"], row["p95_ms"], row["calls"],
                     yes(goal.widget_met(row["median_ms"], row["p95_ms"]))])
    return table(["Widget (notebook, cell)", "Median ms", "p95 ms", "Calls", "Met"], rows)


def claims(results: dict) -> str:
    part = results.get("claims")
    if not part:
        return "Not measured in the reference run."
    rows = [[row["claim"], row["held"], yes(row["met"])] for row in part["rows"]]
    return table(["Claim", "Held", "Met"], rows)


def nbval(results: dict) -> str:
    part = results.get("nbval")
    if not part:
        return "Not measured in the reference run."
    ratio = goal.nbval_ratio(part["wall_s"], part["cpu_s"], part["cores"])
    rows = [[part["wall_s"], part["cpu_s"], part["cores"], f"{part['cpu_s'] / part['cores']:.1f}", f"{ratio:.2f}",
             f"<= {goal.NBVAL_WALL_TO_CPU_PER_CORE}", yes(ratio <= goal.NBVAL_WALL_TO_CPU_PER_CORE)]]
    text = table(["Wall s", "CPU s", "Cores", "CPU s per core", "Wall / (CPU per core)", "Target", "Met"], rows)
    outcome = "passed" if part["passed"] else "**failed**"
    return f"{text}\n\nThe suite {outcome}: `{part['summary']}`."


def _device(name: str) -> str:
    return "CPU" if name == "cpu" else name.replace("cuda", "CUDA", 1)


def _scale_tables(figures: dict) -> list[str]:
    out = ["Looped against vectorized forward and backward, MLP 16-32-1, one thread:"]
    out.append(table(["N", "Vectorized ms", "Looped ms", "Ratio", "Extra us per sample"],
                     [[f"{r['N']:,}", r["vectorized_ms"], r["looped_ms"], f"{r['ratio']}x", r["extra_us_per_sample"]]
                      for r in figures["loop_vs_vectorized"]]))
    saved = figures["saved_vs_k"]
    first = saved[0]["peak_saved_MiB"]
    allocated = any(r["peak_allocated_above_start_MiB"] is not None for r in saved)
    out.append("Peak bytes saved for backward with k micro-batches, MLP 1024-4096-4096-1024, batch 1024:")
    out.append(table(["k", "Peak saved MiB", "Of k = 1"] + (["Allocated above start MiB"] if allocated else []),
                     [[r["k"], r["peak_saved_MiB"], f"{r['peak_saved_MiB'] / first:.4g}"]
                      + ([r["peak_allocated_above_start_MiB"]] if allocated else []) for r in saved]))
    g = figures["per_sample_grads"]
    out.append("Per-sample gradients, a loop of `autograd.grad` against `vmap(grad(...))`:")
    out.append(table(["N", "Loop ms", "vmap ms", "Speed-up", "Largest difference"],
                     [[f"{g['N']:,}", g["loop_ms"], g["vmap_ms"], f"{g['speedup']}x", f"{g['max_abs_diff']:.1e}"]]))
    return out


def scale(results: dict) -> str:
    part = results.get("scale")
    if not part:
        return "Not measured in the reference run."
    out = []
    for device, figures in part.items():
        out += [f"### {_device(device)}"] + _scale_tables(figures)
    if not any(name.startswith("cuda") for name in part):
        out.append("The same tables on a GPU, with the CUDA allocator's peak beside the bytes saved, are in the "
                   "CUDA section.")
    return "\n\n".join(out)


def _cuda_environment(env: dict) -> str:
    tf32 = ", ".join(f"{what} {'on' if on else 'off'}" for what, on in env["tf32"].items())
    return "\n".join([
        f"- GPU: {env['device']} (compute capability {env['capability']}, {env['memory_GiB']} GiB), "
        f"driver {env['driver']}",
        f"- torch {env['torch']}, CUDA {env['torch_cuda']}, cuDNN {env['cudnn']}; TF32: {tf32}",
        f"- Measured on {env['date'][:10]}",
    ])


def _architectures(rows: list) -> str:
    measured = [r for r in rows if "not_measured" not in r]
    text = table(["Model", "Parameters (M)", "Graph nodes", "Forward + backward ms", "Saved MiB",
                  "Allocator peak MiB", "Drawn in s"],
                 [[r["model"], f"{r['parameters'] / 1e6:.1f}", f"{r['nodes']:,}", r["forward_backward_ms"],
                   r["saved_MiB"], r["allocator_peak_MiB"],
                   r["draw_s"] if r["picture"] else f"{r['draw_s']} (no picture)"]
                  for r in measured])
    missing = [f"{r['model']} ({r['not_measured']})" for r in rows if "not_measured" in r]
    return text + (f"\n\nNot measured: {'; '.join(missing)}." if missing else "")


def cuda(results: dict) -> str:
    """The CUDA section: a GPU run's figures (tools/bench_cuda.py), or what to run while there is none."""
    part = results.get("cuda")
    if not part:
        return ("Not measured yet: no reference run on a CUDA GPU. On a machine with one, "
                "`python -m tools bench --parts cuda --reference` measures this section and adds it to the reference "
                "(tools/gpu/check.sh does so where the test tools must be brought as wheels).")
    out = [_cuda_environment(part["environment"]), "### The notebooks on the GPU", notebooks(part), widgets(part),
           claims(part)]
    if "scale" in part:
        out += ["### At scale on the GPU"] + _scale_tables(part["scale"])
    if "architectures" in part:
        out += ["### The instruments on real architectures, built without weights",
                _architectures(part["architectures"])]
    return "\n\n".join(out)


def drawing(results: dict) -> str:
    part = results.get("drawing")
    if not part:
        return "Not measured in the reference run."
    first, second = part["engines"]
    rows = []
    for row in part["rows"]:
        a, b = row[first], row[second]
        ratio = f"{a / b:.2f}" if a is not None and b else ""
        rows.append([row["drawings"], row["count"], row["largest_nodes"], a, b, ratio])
    text = table(["Drawings", "Count", "Largest (nodes)", f"{first} ms", f"{second} ms", "Ratio"], rows)
    text += (f"\n\nEach time is the sum, over the group's drawings, of the median of {part['runs']} layouts, the "
             "engine's start included; the engines took turns.")
    apart = part.get("measured_apart")
    if apart:  # this part was run on its own (--parts drawing) and added to the reference
        text += (f" Measured apart from the rest of the reference run, on {apart['date'][:10]} ({apart['machine']}, "
                 f"Python {apart['python']}, torch {apart['torch']}).")
    return text


BLOCKS = {"environment": environment, "targets": targets, "notebooks": notebooks, "widgets": widgets,
          "claims": claims, "nbval": nbval, "scale": scale, "drawing": drawing, "cuda": cuda}


def render(page: str, results: dict) -> str:
    """The page with every block made anew from results; the prose between the blocks unchanged."""
    names = [m.group("name") for m in BLOCK.finditer(page)]
    unknown = sorted(set(names) - BLOCKS.keys())
    missing = sorted(BLOCKS.keys() - set(names))
    twice = sorted({n for n in names if names.count(n) > 1})
    if unknown or missing or twice:
        raise ValueError(f"the page's blocks do not match tools/bench_page.BLOCKS: unknown {unknown}, "
                         f"missing {missing}, twice {twice}; each block is a line <!-- bench:NAME --> and a "
                         "line <!-- /bench --> with one of " + ", ".join(BLOCKS))
    return BLOCK.sub(lambda m: f"<!-- bench:{m.group('name')} -->\n\n{BLOCKS[m.group('name')](results)}\n\n"
                               "<!-- /bench -->", page)


def prose(page: str) -> str:
    """The hand-written part of the page: everything outside the blocks."""
    return BLOCK.sub("", page)


def write_page(reference: Path = REFERENCE, page: Path = PAGE) -> Path:
    results = json.loads(reference.read_text(encoding="utf-8"))
    page.write_text(render(page.read_text(encoding="utf-8"), results), encoding="utf-8")
    return page
