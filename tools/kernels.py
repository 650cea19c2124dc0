"""How the course's tools start and talk to kernels: over IPC, and with short polls (one home for both).

* **IPC transport.** A kernel on TCP listens on loopback ports (a race when two start at once, and
  visible to every user of a shared machine), and ipykernel 7 warns "Kernel is running over TCP without
  encryption" at every start. Unix sockets in a private temporary folder have neither problem. (Their
  default place, ``kernel-ipc-N`` files in the current folder, would land in the notebooks' folder.)
* **Short polls (jupyter/nbclient#312).** A cell whose output goes through Output-widget *capture* can make
  a wait for the cell's reply in one long poll wake only when the poll times out (never, without a
  timeout), although the reply has arrived; autograd_lab.widgets says why. The course's ``live()`` panels
  set their outputs instead of capturing them, so nbconvert and papermill run its notebooks without this;
  the polls are for what the course does not write (a student's own widget code in a graded submission).
  Polling the shell channel in steps of ``POLL_S`` seconds, up to the same deadline, picks such a reply up
  at once.

`make notebooks` (execute_notebooks.py), `make bench` (bench.py) and nbgrader's autograde
(classroom/nbgrader_config.py, through ``SteadyKernel``) all start their kernels with this module.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from pathlib import Path
from queue import Empty

POLL_S = 0.5


def steady_shell(kernel_client, poll_s: float = POLL_S):
    """Make ``kernel_client``'s shell channel wait for replies in steps of ``poll_s`` seconds (nbclient#312)."""
    channel = kernel_client.shell_channel
    one_poll = channel.get_msg

    async def get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll_s if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await one_poll(timeout=min(poll_s, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg
    return kernel_client


_SOCKETS: Path | None = None


def ipc_path() -> str:
    """Where a kernel's Unix sockets go: a private folder of this process, removed when it exits.

    Short on purpose: a Unix socket's path may not exceed about 100 bytes.
    """
    global _SOCKETS
    if _SOCKETS is None:
        _SOCKETS = Path(tempfile.mkdtemp(prefix="al-k-"))
        atexit.register(shutil.rmtree, _SOCKETS, ignore_errors=True)
    return str(_SOCKETS / "k")


def use_ipc(kernel_manager):
    """Set a kernel manager (before it starts its kernel) to talk over Unix sockets in ``ipc_path()``."""
    kernel_manager.transport = "ipc"
    kernel_manager.ip = ipc_path()
    return kernel_manager


class SteadyKernel:
    """A mixin for an nbclient ``NotebookClient`` (or a subclass, such as nbgrader's ``Execute``): its kernel
    talks over IPC and its shell channel polls steadily.

    Both ways in are covered: ``execute()`` (async, ``async_setup_kernel``) and ``setup_kernel()`` (sync, which
    nbconvert's ``ExecutePreprocessor.preprocess`` -- and so nbgrader's autograde -- and ``make bench`` use).
    NotebookClient binds ``start_new_kernel_client = run_sync(async_start_new_kernel_client)`` to *its own*
    coroutine, so overriding the coroutine alone leaves the sync way with the long polls of nbclient#312.
    """

    def create_kernel_manager(self):
        return use_ipc(super().create_kernel_manager())

    async def async_start_new_kernel_client(self):
        return steady_shell(await super().async_start_new_kernel_client())

    def start_new_kernel_client(self):
        from jupyter_core.utils import run_sync

        return run_sync(self.async_start_new_kernel_client)()


def notebook_client(nb, **kwargs):
    """An nbclient ``NotebookClient`` whose kernel talks over IPC and whose shell channel polls steadily."""
    from nbclient import NotebookClient

    class SteadyNotebookClient(SteadyKernel, NotebookClient):
        pass

    return SteadyNotebookClient(nb, **kwargs)
