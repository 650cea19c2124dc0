"""Notebook 06's launcher: a script on several local processes, from a notebook, on this machine only.

``torchrun(script, nproc=2)`` runs ``python -m torch.distributed.run --standalone
--nproc-per-node 2 script`` (torchrun) from a notebook, on this machine only:

- loopback only: the ranks meet at ``MASTER_ADDR=127.0.0.1`` (``--local-addr``) and gloo
  talks over the loopback interface (``GLOO_SOCKET_IFNAME``). ``--standalone`` lets the
  rendezvous store take a free port from the operating system (no port to collide with);
  pass ``port=`` to pin it (``--rdzv-endpoint 127.0.0.1:PORT``), as on a cluster.
  PyTorch's own TCPStore listens on the wildcard address of that port for the seconds
  of the run; it offers no option to narrow that.
- bounded: the run gets ``timeout`` seconds. On a timeout, a failed rank, or an
  interrupt (the notebook's stop button), every process of the run is stopped --
  torchrun, its ranks (each of which sits in a session of its own), and their
  children, also those that detached themselves -- and ``DistributedRunError`` says what
  went wrong: the port was in use, which rank failed (its exit code or the signal that
  ended it, and the end of its output), or the time ran out.
- bound to its caller: a guard process stops the run and removes its folder when the
  kernel that started it dies; a folder left by a caller that died anyway is removed at
  the next start.
- results: each rank writes a JSON file into the folder named by the environment
  variable ``LAB_RESULTS`` (``rank0.json``, ``rank1.json``, ...); ``torchrun`` returns
  them in rank order. The folder, the logs and everything else live in a temporary
  folder that is removed afterwards.

The training script itself (DDP, ``no_sync()``, the accumulation loop) is written out in the
notebook; this package launches it and counts what it hands to all-reduce (``AllReduceLog``, in
``comm``). Its modules: ``launcher`` (torchrun), ``comm``, ``sweep``
(finding and stopping a run's processes), ``guard`` (the script that cleans up after a dead caller),
``failures`` (what went wrong, in words), ``ports``.
"""

from .comm import AllReduceLog
from .failures import DistributedRunError
from .launcher import RESULTS_ENV, Run, torchrun
from .ports import free_port, loopback_interface, port_is_free

__all__ = ["RESULTS_ENV", "AllReduceLog", "DistributedRunError", "Run", "free_port", "loopback_interface",
           "port_is_free", "torchrun"]
