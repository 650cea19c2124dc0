"""docs/performance.md is made from the committed reference run of `make bench` (docs/bench/reference.json).

The page's tables come from the JSON (tools/bench_page.py) and its prose states no figure of its own, so the
page cannot hold a figure the reference run did not measure. The nbval target is a ratio whose CPU side must
count every process under pytest; the last tests check that counting on a small process tree.
"""

import json
import re
import sys
from pathlib import Path

import pytest

from tools import bench, bench_page, bench_targets

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# a measured figure: a number with a unit of time, memory, or a ratio ("31.6 s", "1.09x", "36 MiB")
FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:s|ms|us|seconds?|minutes?|x|MiB|GiB|MB|GB|%)(?![\w-])")


def reference() -> dict:
    return json.loads(bench_page.REFERENCE.read_text(encoding="utf-8"))


def test_the_committed_page_is_what_the_reference_run_makes():
    page = bench_page.PAGE.read_text(encoding="utf-8")
    assert bench_page.render(page, reference()) == page, (
        "docs/performance.md differs from what docs/bench/reference.json makes of it: run "
        "`python -m tools bench --page` (edit the prose, never the tables) and commit the page")


def test_the_reference_run_measured_every_part_of_every_notebook():
    results = reference()
    assert {"environment", "settings", "notebooks", "widgets", "claims", "nbval", "scale", "drawing"} <= results.keys()
    env = results["environment"]
    assert {"python", "torch", "graphviz", "packages", "machine", "cores", "devices", "total_s"} <= env.keys()
    measured = sorted(row["notebook"] for row in results["notebooks"]["rows"])
    assert measured == [p.name for p in NOTEBOOKS], "a notebook was added or renamed: take a new reference run"
    assert {"wall_s", "cpu_s", "cores", "passed"} <= results["nbval"].keys()
    assert "cpu" in results["scale"]


def prose_without_code(page: str) -> str:
    text = re.sub(r"^```.*?^```", "", bench_page.prose(page), flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def test_the_prose_states_no_figure_of_its_own():
    figures = FIGURE.findall(prose_without_code(bench_page.PAGE.read_text(encoding="utf-8")))
    assert not figures, f"docs/performance.md states {figures} outside its generated tables: figures come from the JSON"


def test_the_figure_check_would_see_a_figure():
    assert FIGURE.findall(prose_without_code("nbval took 31.6 s, 1.09x, and 36 MiB; see `-n 2`.\n")) == [
        "31.6 s", "1.09x", "36 MiB"]


def test_a_page_without_its_blocks_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="missing .*'nbval'.*<!-- bench:NAME -->"):
        bench_page.render("# Performance\n\n<!-- bench:notebooks -->\n<!-- /bench -->\n", reference())
    page = bench_page.PAGE.read_text(encoding="utf-8") + "\n<!-- bench:typo -->\n<!-- /bench -->\n"
    with pytest.raises(ValueError, match="unknown \\['typo'\\]"):
        bench_page.render(page, reference())


def test_verdicts_follow_todays_targets_not_the_ones_of_the_run(monkeypatch):
    results = reference()
    monkeypatch.setattr(bench_targets, "FLOOR_FACTOR", 0.5)  # no notebook runs in half the floor
    monkeypatch.setattr(bench_targets, "NBVAL_WALL_TO_CPU_PER_CORE", 0.5)  # nor does nbval use over every core
    made = bench_page.notebooks(results) + bench_page.nbval(results)
    assert "<= 0x floor | **no** |" in made and "| <= 0.5 | **no** |" in made
    assert "yes" not in bench_page.nbval(results)


def test_the_nbval_ratio_is_wall_over_cpu_per_core():
    assert bench_targets.nbval_ratio(wall_s=30.0, cpu_s=60.0, cores=2) == 1.0
    assert bench_targets.nbval_ratio(wall_s=33.0, cpu_s=60.0, cores=2) == pytest.approx(1.1)


BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_cpu_counting_includes_every_process_under_the_command():
    grandchild = BURN.format(s=0.4)
    child = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}], check=True)\n"
             + BURN.format(s=0.2))
    done, wall, cpu = bench.run_counting_cpu([sys.executable, "-c", child])
    assert done.returncode == 0
    assert cpu >= 0.6, f"counted {cpu:.2f} s of CPU; the child and its child burned 0.6 s"
    assert wall >= 0.6 / bench.usable_cores()


def test_cpu_counting_adopts_an_orphan_on_linux():
    if not sys.platform.startswith("linux"):
        pytest.skip("orphans are adopted on Linux only (PR_SET_CHILD_SUBREAPER)")
    # the child starts a grandchild, waits for it to end without reaping it (WNOWAIT) and exits at once
    # (os._exit: nothing reaps it on the way out), so the finished grandchild is left orphaned
    orphan = BURN.format(s=0.4)
    child = (f"import os, subprocess, sys\np = subprocess.Popen([sys.executable, '-c', {orphan!r}])\n"
             "os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)\nos._exit(0)\n")
    done, _wall, cpu = bench.run_counting_cpu([sys.executable, "-c", child])
    assert done.returncode == 0 and cpu >= 0.4, f"counted {cpu:.2f} s; the orphan burned 0.4 s"
