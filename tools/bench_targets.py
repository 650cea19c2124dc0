"""The course's speed targets, reported by `make bench` (tools/bench.py) and stated by docs/performance.md
(tools/bench_page.py); never asserted by a test. Both import them from here, so a changed target shows on the
page at once.
"""

from __future__ import annotations

# Notebooks whose subject needs more work than the rest: their own budget (seconds on 2 cores) and why.
OWN_BUDGET_S = {
    "03_vectorized_vs_looped.ipynb": (30.0, "it times Python loops"),
    "06_accumulation_across_processes.ipynb": (40.0, "it starts two processes with torchrun"),
    "07_accumulation_in_practice.ipynb": (40.0, "it starts two processes with torchrun"),
}
FLOOR_FACTOR = 3.0  # every other notebook: at most this many times the floor
WIDGET_BUDGET_MS = 50.0  # median per change, rendering included
WIDGET_P95_BUDGET_MS = 100.0
# nbval keeps the cores busy: its wall time at most this many times its CPU time (pytest and every process
# under it: workers, kernels, torchrun's agents and ranks) divided by the cores it runs on.
NBVAL_WALL_TO_CPU_PER_CORE = 1.2
NBVAL_WORKERS = 2  # as `make test` runs it (the Makefile's JOBS)
# The suite's own targets on 2 cores, not measured here: (what, target, how to measure it).
SUITE_TARGETS = (
    ("`make test` from a fresh clone, set-up included", "at most 5 minutes", "`.ci/run` prints each stage's time"),
    ("`make test-fast` (the unit tests and nbval)", "about 90 s", "`time make test-fast` once set up"),
)


def notebook_target(name: str, floor_s: float) -> tuple[str, float]:
    """A notebook's target, in words, and its limit in seconds given the floor."""
    if name in OWN_BUDGET_S:
        budget, _why = OWN_BUDGET_S[name]
        return f"<= {budget:.0f} s", budget
    return f"<= {FLOOR_FACTOR:.0f}x floor", FLOOR_FACTOR * floor_s


def widget_met(median_ms: float, p95_ms: float) -> bool:
    return median_ms <= WIDGET_BUDGET_MS and p95_ms <= WIDGET_P95_BUDGET_MS


def nbval_ratio(wall_s: float, cpu_s: float, cores: int) -> float:
    """Wall time over CPU time per core: 1.0 when every core was busy all the time."""
    return wall_s / (cpu_s / cores) if cpu_s > 0 else float("inf")
