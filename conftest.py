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


def pytest_collection_modifyitems(session, config, items):
    unstable = [item.nodeid for item in items if UNSTABLE_ID.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            "test ids must not contain memory addresses (pytest-xdist collects in each worker): give the "
            "parametrize call ids=[...]; first one: " + unstable[0]
        )
    if IPyNbFile is None:
        return
    for item in items:
        parent = getattr(item, "parent", None)
        if isinstance(parent, IPyNbFile) and not set(NOT_COMPARED) <= set(parent.skip_compare):
            parent.skip_compare = tuple(parent.skip_compare) + NOT_COMPARED
