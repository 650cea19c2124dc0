"""The guard of a run, a script: ``python -m autograd_lab.distributed.guard RUN_ID FOLDER``.

The launcher starts it beside torchrun with a pipe on its standard input. When the caller dies (a killed
kernel, a restart) the pipe closes and the guard stops the run's processes and removes its folder; after
a normal end the caller closes the pipe itself, and the guard finds nothing left to do. It imports psutil,
not torch, so it is up at once.
"""

from __future__ import annotations

import shutil
import signal
import sys

from .sweep import stop_run


def main(argv: list) -> int:
    """The guard's whole life: wait until the caller closes the pipe (or dies), then clean up."""
    run_id, work = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the caller is not for the guard
    sys.stdin.buffer.read()
    stop_run(run_id)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
