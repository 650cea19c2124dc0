"""Measuring instruments: graph size, bytes saved for backward, time.

These only count and time. The code being measured (a vectorized loss, a
looped loss, an accumulation loop) is written in the notebooks.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch
import torch.utils.benchmark as benchmark

from .graph import graph_nodes

__all__ = ["SavedTensors", "count_nodes", "time_call", "Timing"]


def count_nodes(tensors) -> int:
    """How many backward nodes (``AccumulateGrad`` included) the graph behind ``tensors`` holds."""
    return len(graph_nodes(tensors))


def _storage_key(t: torch.Tensor):
    storage = t.untyped_storage()
    return (t.device.type, t.device.index, storage.data_ptr(), storage.nbytes())


class SavedTensors:
    """Count what autograd saves for backward while the ``with`` block runs.

    Counts each storage once (two saved views of one tensor share it) and leaves
    out the storages of ``exclude`` (parameters and inputs, which exist anyway)::

        with SavedTensors(exclude=[x, *model.parameters()]) as saved:
            loss = loss_fn(model(x), y)
        saved.bytes, saved.storages, saved.tensors

    ``bytes`` is the size of the distinct storages, ``storages`` their number,
    ``tensors`` how many times a tensor was saved (repeats included).
    """

    def __init__(self, exclude=()):
        try:
            exclude = list(exclude)
        except TypeError:
            raise TypeError("exclude must be an iterable of tensors, e.g. [x, *model.parameters()]") from None
        for t in exclude:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"exclude must hold tensors only; got {type(t).__name__}.")
        self._excluded = {_storage_key(t) for t in exclude}
        self._seen: dict = {}
        self.tensors = 0
        self._hooks = None

    def _pack(self, t):
        self.tensors += 1
        key = _storage_key(t)
        if key not in self._excluded:
            self._seen[key] = t.untyped_storage().nbytes()
        return t

    @staticmethod
    def _unpack(t):
        return t

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        return False

    @property
    def bytes(self) -> int:
        return sum(self._seen.values())

    @property
    def storages(self) -> int:
        return len(self._seen)

    @property
    def mib(self) -> float:
        return self.bytes / 2**20

    def __repr__(self):
        return f"SavedTensors({self.bytes} bytes in {self.storages} storages, {self.tensors} tensors saved)"


@dataclass
class Timing:
    """Median seconds per call, with the spread it came from."""

    median: float
    iqr: float
    runs: int
    label: str = ""
    times: list = field(default_factory=list, repr=False)

    @property
    def us(self) -> float:
        return self.median * 1e6

    @property
    def ms(self) -> float:
        return self.median * 1e3

    def __str__(self):
        return f"{self.label or 'call'}: {self.median * 1e3:.3f} ms (median of {self.runs})"


def time_call(fn, *, min_run_time: float = 0.2, label: str = "", threads: int | None = None) -> Timing:
    """Time ``fn()`` with ``torch.utils.benchmark`` (which synchronizes CUDA work).

    Returns the median time per call. ``min_run_time`` bounds the measuring time.
    """
    if not callable(fn):
        raise TypeError(f"time_call expects a function taking no arguments, got {type(fn).__name__}.")
    if min_run_time <= 0:
        raise ValueError("min_run_time must be positive (seconds), e.g. 0.2.")
    timer = benchmark.Timer(
        stmt="fn()",
        globals={"fn": fn},
        label=label,
        num_threads=threads or torch.get_num_threads(),
    )
    m = timer.blocked_autorange(min_run_time=min_run_time)
    times = list(m.times)
    iqr = statistics.quantiles(times, n=4)[2] - statistics.quantiles(times, n=4)[0] if len(times) > 1 else 0.0
    return Timing(median=m.median, iqr=iqr, runs=len(times), label=label, times=times)
