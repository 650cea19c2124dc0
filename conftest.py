"""Project-wide pytest settings for nbval (the flags themselves are in pyproject.toml).

What nbval compares in a graph: its structure. A graph cell's output carries
two forms: SVG for the eye and, as text/plain, the graph's labels and edges.
The SVG's layout coordinates change between Graphviz releases (Debian's 2.43
against conda-forge's 12.x), so a course checked on another Graphviz would fail
for no fault of its own; the text form is the same under every release and is
compared. That the SVG itself is byte-for-byte stable is tested separately
(tests/instruments/test_graph.py).

One torch thread per process. In `make test` two xdist workers, their kernels and the browser suite share
the machine's cores, and a process that runs torch on every core only makes its threads wait on the others'
(torchrun gives its ranks one thread for the same reason). Kernels, torchrun and JupyterLab started by a
test inherit the setting. It also makes nbval stricter: the committed outputs come from `make notebooks`,
which runs with torch's default thread count, so an output that changed with the thread count would fail
here. A value set by the caller is kept.
"""

import os
import re

import pytest

try:
    from nbval.plugin import IPyNbFile
except ImportError:  # nbval not installed: plain unit tests still run
    IPyNbFile = None

NOT_COMPARED = ("image/svg+xml",)

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any test module imports torch (see above)


# A test id must be the same in every process: pytest-xdist collects in each worker and refuses to run when
# the lists differ. A memory address in an id (the repr of an object) differs from process to process.
UNSTABLE_ID = re.compile(r" at 0x[0-9a-fA-F]+")


COLLECTED = pytest.StashKey[list]()  # every item, before pytest's last-failed filter (see --lf below)


def pytest_collection_modifyitems(session, config, items):
    unstable = [item.nodeid for item in items if UNSTABLE_ID.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            "test ids must not contain memory addresses (pytest-xdist collects in each worker): give the "
            "parametrize call ids=[...]; first one: " + unstable[0]
        )
    config.stash[COLLECTED] = list(items)
    if IPyNbFile is None:
        return
    for item in items:
        parent = getattr(item, "parent", None)
        if isinstance(parent, IPyNbFile) and not set(NOT_COMPARED) <= set(parent.skip_compare):
            parent.skip_compare = tuple(parent.skip_compare) + NOT_COMPARED


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
