"""Project-wide pytest settings for nbval (the flags themselves are in pyproject.toml).

What nbval compares in a graph: everything. A graph cell's output carries three
forms: the SVG for the eye, its DOT source (text/vnd.graphviz) and, as
text/plain, its labels and edges. The course lays graphs out with graphviz-pure,
which pip installs at the lock's version and which writes the same bytes on every
platform, so the stored SVG is compared too: a drawing that changes fails. Only
where another engine draws (AUTOGRAD_LAB_DOT=dot, a platform without a
graphviz-pure wheel, or a graphviz-pure other than the lock's) is the SVG left
out, since its coordinates are that engine's own; the DOT and the text are still
compared, and pytest says why after collecting (tests/instruments/test_engines.py checks
that both engines draw the same graphs).

One torch thread per process. In `make test` two xdist workers, their kernels and the browser suite share
the machine's cores, and a process that runs torch on every core only makes its threads wait on the others'
(torchrun gives its ranks one thread for the same reason). Kernels, torchrun and JupyterLab started by a
test inherit the setting. It also makes nbval stricter: the committed outputs come from `make notebooks`,
which runs with torch's default thread count, so an output that changed with the thread count would fail
here. A value set by the caller is kept.
"""

import os
import re
from functools import cache

import pytest

try:
    from nbval.plugin import IPyNbCell, IPyNbFile
except ImportError:  # nbval not installed: plain unit tests still run
    IPyNbCell = IPyNbFile = None

NOT_COMPARED: tuple = ()  # what nbval never compares here; the SVG joins it where another engine draws (below)
SVG = "image/svg+xml"

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any test module imports torch (see above)


# A test id must be the same in every process: pytest-xdist collects in each worker and refuses to run when
# the lists differ. A memory address in an id (the repr of an object) differs from process to process.
UNSTABLE_ID = re.compile(r" at 0x[0-9a-fA-F]+")


@cache
def svg_not_compared() -> str | None:
    """Why this run cannot compare the stored SVG, or None (tools/drawings.py). Imports torch: notebooks only."""
    try:
        from tools.drawings import svg_not_compared as why
    except ImportError:  # this settings file copied where the course's tools are not (a test of these settings)
        return "the course's tools are not importable from here"
    return why()


def pytest_report_collectionfinish(config, items):
    if IPyNbFile is not None and any(isinstance(item.parent, IPyNbFile) for item in items) and svg_not_compared():
        return f"nbval: the graphs' SVG is not compared: {svg_not_compared()} (their DOT and text are)"
    return None


COLLECTED = pytest.StashKey[list]()  # every item, before pytest's last-failed filter (see --lf below)


def scope_of(item) -> str:
    """The unit `make test`'s workers take whole (``--dist loadscope``): a test module, or a notebook's cells."""
    return item.nodeid.split("::")[0]


def longest_first(items: list) -> list:
    """The items, each scope's together, the longest scopes first (in their order of collection otherwise).

    The workers take one scope at a time as they come free, in this order (``--no-loadscope-reorder``): a long
    scope taken last keeps one worker busy while the other has nothing left. A scope's length is told by its
    tests marked ``slow``; a notebook counts as one (its kernel runs the whole notebook)."""
    weight: dict[str, int] = {}
    for item in items:
        scope = scope_of(item)
        if IPyNbCell is not None and isinstance(item, IPyNbCell):
            weight[scope] = 1
        else:
            weight[scope] = weight.get(scope, 0) + (item.get_closest_marker("slow") is not None)
    first = {scope: i for i, scope in reversed(list(enumerate(scope_of(item) for item in items)))}
    return sorted(items, key=lambda item: (-weight[scope_of(item)], first[scope_of(item)]))


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: the order counts only what runs
def pytest_collection_modifyitems(session, config, items):
    unstable = [item.nodeid for item in items if UNSTABLE_ID.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            "test ids must not contain memory addresses (pytest-xdist collects in each worker): give the "
            "parametrize call ids=[...]; first one: " + unstable[0]
        )
    items[:] = longest_first(items)
    config.stash[COLLECTED] = list(items)
    if IPyNbFile is None:
        return
    notebooks = {id(item.parent): item.parent for item in items if isinstance(item.parent, IPyNbFile)}
    skipped = NOT_COMPARED + ((SVG,) if notebooks and svg_not_compared() is not None else ())
    for parent in notebooks.values():
        parent.skip_compare = tuple(parent.skip_compare) + tuple(k for k in skipped if k not in parent.skip_compare)


# --lf reruns a failed notebook cell with the rest of its notebook. nbval runs a notebook's cells in order in one
# kernel: a cell run alone would fail for want of what the cells before it computed. pytest's last-failed filter
# works twice: it collects only a file's failed items, and then deselects the items that passed. The two hooks
# below undo both for a notebook it kept a cell of.


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    """A notebook that the last-failed filter collected a cell of is collected again, whole."""
    report = yield
    lf = collector.config.getoption("lf", False)
    if lf and IPyNbFile is not None and isinstance(collector, IPyNbFile) and report.passed and report.result:
        report.result = list(collector.collect())
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    """The cells that the last-failed filter deselected go back, in order (before xdist reports the items)."""
    if IPyNbFile is None or not session.config.getoption("lf", False):
        return
    kept = {id(item) for item in session.items}
    notebooks = {id(item.parent) for item in session.items if isinstance(item.parent, IPyNbFile)}
    if notebooks:
        every = session.config.stash.get(COLLECTED, [])
        session.items[:] = [item for item in every if id(item) in kept or id(item.parent) in notebooks]
        session.testscollected = len(session.items)
