"""Measuring instruments: graph size, bytes saved for backward, the peak of live tensors, time.

These only count and time. The code being measured (a vectorized loss, a
looped loss, an accumulation loop) is written in the notebooks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import statistics
import sys
import threading
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .arguments import check_int, check_seconds
from .graphmodel import roots_of, visit

__all__ = ["PeakMemory", "SavedTensors", "allocator_peak", "count_nodes", "time_call", "Timing", "heap_bytes",
           "held_bytes"]


def count_nodes(tensors) -> int:
    """How many backward nodes (``AccumulateGrad`` included) the graph behind ``tensors`` holds."""
    return len(visit([t.grad_fn for t in roots_of(tensors, "count_nodes")])[0])


def _storage_key(t: torch.Tensor):
    storage = t.untyped_storage()
    return (t.device.type, t.device.index, storage.data_ptr(), storage.nbytes())


_THREAD = threading.local()  # saved-tensor hooks are per thread in PyTorch; so are the open blocks


def _open_blocks() -> list:
    """The SavedTensors blocks open now in this thread, outermost first."""
    if not hasattr(_THREAD, "blocks"):
        _THREAD.blocks = []
    return _THREAD.blocks


def _pack_into_open_blocks(t):
    # PyTorch calls only the innermost pair of saved-tensor hooks: that pair records into every open block
    for block in _open_blocks():
        block._record(t)
    return t


def _unpack(t):
    return t


class SavedTensors:
    """Count what autograd saves for backward while the ``with`` block runs.

    Counts each storage once (two saved views of one tensor share it) and leaves
    out the storages of ``exclude`` (parameters and inputs, which exist anyway)::

        with SavedTensors(exclude=[x, *model.parameters()]) as saved:
            loss = loss_fn(model(x), y)
        saved.bytes, saved.storages, saved.tensors

    ``bytes`` is the size of the distinct storages, ``storages`` their number,
    ``tensors`` how many times a tensor was saved (repeats included).

    Blocks nest: each counts what was saved while it was open (the outer one
    includes the inner one's). Using one instance again starts a fresh count;
    opening it again while it is still open is an error.
    """

    def __init__(self, exclude=()):
        if isinstance(exclude, torch.Tensor):
            exclude = [exclude]
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

    def _record(self, t):
        self.tensors += 1
        key = _storage_key(t)
        if key not in self._excluded:
            self._seen[key] = t.untyped_storage().nbytes()

    def __enter__(self):
        if self._hooks is not None:
            raise RuntimeError("this SavedTensors block is already open: nest a new SavedTensors() instead.")
        self._seen, self.tensors = {}, 0  # a second `with` counts its own block only
        self._hooks = torch.autograd.graph.saved_tensors_hooks(_pack_into_open_blocks, _unpack)
        self._hooks.__enter__()
        _open_blocks().append(self)
        return self

    def __exit__(self, *exc):
        if self._hooks is None:
            raise RuntimeError("this SavedTensors block was not open.")
        blocks = _open_blocks()
        innermost = bool(blocks) and blocks[-1] is self
        if self in blocks:
            blocks.remove(self)
        hooks, self._hooks = self._hooks, None
        hooks.__exit__(*exc)
        if not innermost and exc[0] is None:
            raise RuntimeError("SavedTensors blocks must close in the reverse order of opening (innermost first).")
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


class PeakMemory(TorchDispatchMode):
    """The most bytes of tensors alive at once while the ``with`` block runs, forward *and* backward::

        with PeakMemory() as peak:
            loss_fn(model(x), y).backward()
        peak.bytes, peak.mib

    It watches every operation PyTorch runs in the block (a ``TorchDispatchMode``: the backward pass and a
    checkpoint's recomputation included) and counts each storage an operation creates from when it is made
    until the last tensor on it is gone; the peak is the highest total seen after an operation. Storages that
    existed before the block (parameters, inputs) are not counted, nor are views of them; a ``.grad`` made in
    the block is. It counts tensors, not the allocator: memory a kernel uses only inside itself and what a
    caching allocator keeps in reserve are not in it. It works the same on every device; on CUDA,
    :func:`allocator_peak` reads the allocator itself.

    Using one instance again starts a fresh count; opening it while it is open is an error.
    """

    def __init__(self):
        super().__init__()
        self._live: dict = {}  # storage id -> (weak reference, bytes)
        self._now = self.bytes = 0
        self._open = False

    def __enter__(self):
        if self._open:
            raise RuntimeError("this PeakMemory block is already open: use a new PeakMemory() to nest one.")
        self._live, self._now, self.bytes, self._open = {}, 0, 0, True
        return super().__enter__()

    def __exit__(self, *exc):
        self._open = False
        self._live = {}  # no references kept once the block is closed
        return super().__exit__(*exc)

    def _forget_freed(self):
        for key in [key for key, (ref, _) in self._live.items() if ref.expired()]:
            self._now -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._forget_freed()
        inputs = {_storage_id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            key = _storage_id(t) if isinstance(t, torch.Tensor) else None
            if key is None or key in inputs or key in self._live:
                continue  # not a tensor, a view or in-place result of an input, or counted already
            storage = t.untyped_storage()
            self._live[key] = (StorageWeakRef(storage), storage.nbytes())
            self._now += storage.nbytes()
        self.bytes = max(self.bytes, self._now)
        return out

    @property
    def mib(self) -> float:
        return self.bytes / 2**20

    def __repr__(self):
        return f"PeakMemory({self.bytes} bytes at the peak)"


def allocator_peak(fn, device) -> int:
    """Bytes the CUDA caching allocator had handed out at its peak while ``fn()`` ran, above what it had handed
    out when ``fn`` started (``torch.cuda.max_memory_allocated``, its peak statistics reset first).

    What :class:`SavedTensors` and :class:`PeakMemory` count are tensors, the same on every device; this is the
    allocator's own count on a GPU, which also holds the workspaces that libraries such as cuBLAS and cuDNN take
    from it, with each block rounded up to the allocator's sizes. What the allocator keeps cached for reuse,
    and what nvidia-smi shows beside it, are not in it. ``device``: a CUDA device (``"cuda"``, ``"cuda:1"``, a
    ``torch.device``); on another device there is no such allocator, and the call says what counts there.
    """
    if not callable(fn):
        raise TypeError(f"allocator_peak expects a function taking no arguments, got {type(fn).__name__}.")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise TypeError(f"device must be a CUDA device such as 'cuda' or torch.device('cuda'), got {device!r}.") \
            from None
    if device.type != "cuda":
        raise ValueError(f"allocator_peak measures the CUDA caching allocator, and {device} has none: there, count "
                         "the tensors with SavedTensors (saved for backward) or PeakMemory (all alive at once).")
    if not torch.cuda.is_available():
        raise RuntimeError("allocator_peak needs a CUDA GPU, and torch sees none here (torch.cuda.is_available() "
                           "is False).")
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start


def _storage_id(t: torch.Tensor):
    """The identity of a tensor's storage, or None for a tensor without one (sparse, nested, ...)."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


@dataclass
class Timing:
    """Seconds per call: the median of the timed runs and the fastest of them, and how many runs there were.

    ``fastest`` is the run that other programs on the machine disturbed least: compare two short
    measurements by it when the machine may be busy (a class on a shared server, a test suite in parallel).
    """

    median: float
    runs: int
    label: str = ""
    fastest: float | None = None

    def __post_init__(self):
        if self.fastest is None:
            self.fastest = self.median

    @property
    def us(self) -> float:
        return self.median * 1e6

    def __str__(self):
        return f"{self.label or 'call'}: {self.median * 1e3:.3f} ms (median of {self.runs})"


MAX_MIN_RUN_TIME_S = 60.0  # time_call measures for at most this long (more is a typo: milliseconds?)


def _import_benchmark():
    """torch.utils.benchmark, imported on first use with its one noisy import quieted.

    It pulls in torch.utils.cpp_extension, which logs "No CUDA runtime is found, using CUDA_HOME=..." on a
    machine without CUDA when torch is a CUDA build (PyPI's default on Linux). The course compiles nothing, so
    that line would only puzzle a learner; everything else that logger says later is left as it is.
    """
    if "torch.utils.benchmark" not in sys.modules:
        log = logging.getLogger("torch.utils.cpp_extension")
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            import torch.utils.benchmark  # noqa: F401
        finally:
            log.setLevel(level)
    return sys.modules["torch.utils.benchmark"]


def time_call(fn, *, min_run_time: float = 0.2, label: str = "", threads: int | None = None) -> Timing:
    """Time ``fn()`` with ``torch.utils.benchmark`` (which synchronizes CUDA work).

    Returns the median time per call. ``min_run_time`` bounds the measuring time;
    ``threads`` (default: torch's current number) is how many threads torch may use.
    """
    if not callable(fn):
        raise TypeError(f"time_call expects a function taking no arguments, got {type(fn).__name__}.")
    min_run_time = check_seconds("min_run_time", min_run_time, at_most=MAX_MIN_RUN_TIME_S)
    if threads is not None:
        threads = check_int("threads", threads, "a positive int or None", low=1)
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}.")
    benchmark = _import_benchmark()
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, label=label,
                            num_threads=threads or torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(median=m.median, runs=len(m.times), label=label, fastest=min(m.times))


# --------------------------------------------------------------------------------------------
# The C heap: what a graph holds beyond the tensors it saved (nodes, tensor records, allocator headers)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]


def _load_mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _load_mallinfo2()


def heap_bytes() -> int | None:
    """Bytes the C heap (``malloc``) has handed out and not yet taken back, in this process.

    Read from glibc's ``mallinfo2`` (all arenas, plus the large blocks malloc maps
    directly). That is where PyTorch keeps CPU tensor storages, tensor records and
    autograd's graph nodes; small Python objects live elsewhere (Python's own
    allocator) and are not counted. ``None`` where the C library has no
    ``mallinfo2`` (macOS, Windows, musl, glibc older than 2.33).
    """
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def held_bytes(build, *, repeats: int = 3) -> int | None:
    """C heap bytes that the object returned by ``build()`` keeps alive (median over ``repeats``).

    ``build`` is called once first to warm up (lazy initialisations, caches), then
    ``repeats`` times: each time the heap is read before the call and again while
    its result is still alive; the result is then dropped. Python's cyclic garbage
    collector is paused meanwhile, so that it frees nothing else in between.

    For a loss, that is what its graph holds: the saved tensors' storages *and*
    the bookkeeping around them (graph nodes, edges, tensor records, allocator
    headers and alignment), the loss itself, and nothing the graph freed on the
    way. An estimate: malloc keeps a few freed blocks of each small size for
    quick reuse and reports them as in use. ``None`` where
    :func:`heap_bytes` is not available.
    """
    if not callable(build):
        raise TypeError(f"held_bytes expects a function taking no arguments, got {type(build).__name__}.")
    repeats = check_int("repeats", repeats, "an int, at least 1", low=1)
    if heap_bytes() is None:
        return None
    gc.collect()  # once, before measuring: garbage left by earlier code must not be freed mid-measurement
    was_enabled = gc.isenabled()
    gc.disable()  # no collection of other garbage while the heap is read (and no slow full collections)
    try:
        result = build()  # warm-up
        del result
        sizes = []
        for _ in range(repeats):
            before = heap_bytes()
            result = build()
            sizes.append(heap_bytes() - before)
            del result
    finally:
        if was_enabled:
            gc.enable()
    return int(statistics.median(sizes))
