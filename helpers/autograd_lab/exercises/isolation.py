"""Running a learner's code inside a check without letting it change the kernel or the check.

``kept_as_found()`` wraps every check (through ``never_raises``) and every call of a learner's function in the
function checks. When the block ends it puts back what the learner's code could have changed and a later cell,
or the rest of the check, would observe:

- torch's global modes: grad mode, inference mode, anomaly detection, deterministic algorithms, the default
  dtype and device;
- torch function and dispatch modes the code entered and left on the mode stack (a mode that answers
  ``torch.allclose`` with True would otherwise judge the rest of the check);
- the functions of torch's namespaces that the code replaced (``torch.allclose = ...``,
  ``torch.Tensor.backward = ...``) and those of the checker modules themselves;
- the random streams a notebook's next cell draws from: torch's (CPU, and CUDA once it is in use), Python's
  ``random`` and NumPy's global one, so that a learner's next random cell draws what it would have without
  the check; torch's thread count; the warnings filters.

What changed *before* a check is :mod:`.trust`'s business. Objects reached some other way (``gc``) a process
cannot hide from code running in it.
"""

from __future__ import annotations

import contextlib
import random
import sys
import warnings

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from . import trust
from .trust import trusted_namespaces

__all__ = ["kept_as_found"]


def _snapshot_namespaces():
    return [(space, dict(vars(space))) for space in trusted_namespaces()]


def _restore_namespaces(saved):
    for space, attributes in saved:
        current = vars(space)
        if trust.unchanged(current, attributes):
            continue
        for name, value in attributes.items():
            if current.get(name, _MISSING) is not value:
                (type.__setattr__ if isinstance(space, type) else object.__setattr__)(space, name, value)
        if isinstance(space, type):  # a class gains no attributes of its own while a check runs
            for name in [n for n in current if n not in attributes]:
                type.__delattr__(space, name)


_MISSING = object()


TAKEN_OFF: set = set()  # ids of the dispatch modes a learner's code took off the stack (a watcher, say)


def _pop_modes(function_modes: int, dispatch_modes: list):
    """Leave the torch function and dispatch mode stacks as they were: modes the code entered and left are
    popped, and dispatch modes it took off (a check's watcher) are put back and noted in ``TAKEN_OFF``."""
    while torch._C._len_torch_function_stack() > function_modes:
        torch._C._pop_torch_function_stack()
    now = _get_current_dispatch_mode_stack()
    if now[:len(dispatch_modes)] == dispatch_modes:
        while torch._C._len_torch_dispatch_stack() > len(dispatch_modes):
            torch._C._pop_torch_dispatch_stack(None)
        return
    while torch._C._len_torch_dispatch_stack():
        torch._C._pop_torch_dispatch_stack(None)
    for mode in dispatch_modes:
        if mode not in now:
            TAKEN_OFF.add(id(mode))
        torch._C._push_on_torch_dispatch_stack(mode)


class _RandomState:
    """The global random streams a notebook cell draws from, taken and put back."""

    def __init__(self):
        self.torch = torch.random.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.python = random.getstate()
        numpy = sys.modules.get("numpy")  # only where the kernel uses NumPy already
        self.numpy = (numpy, numpy.random.get_state()) if numpy is not None else None

    def put_back(self):
        torch.random.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        if self.numpy is not None:
            self.numpy[0].random.set_state(self.numpy[1])


_PYTHON_KEYS = (torch._C.DispatchKey.Python, torch._C.DispatchKey.PythonTLSSnapshot)


def _mend_dispatch_keys():
    """With no dispatch mode on the stack, torch must not route operations to Python. A guard a learner's code
    entered inside a check's watcher and left alive (``torch.inference_mode().__enter__()``) puts that routing back
    when it is finally dropped, and every later operation fails; this takes it off again."""
    if torch._C._len_torch_dispatch_stack() == 0:
        for key in _PYTHON_KEYS:
            if torch._C._dispatch_tls_is_dispatch_key_included(key):
                torch._C._dispatch_tls_set_dispatch_key_included(key, False)


@contextlib.contextmanager
def kept_as_found():
    """Run the block; afterwards torch's global modes, mode stacks and namespaces are as they were before it."""
    _mend_dispatch_keys()
    grad, dtype, device = torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_default_device()
    anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    function_modes, dispatch_modes = torch._C._len_torch_function_stack(), _get_current_dispatch_mode_stack()
    namespaces = _snapshot_namespaces()
    streams, threads, filters = _RandomState(), torch.get_num_threads(), list(warnings.filters)
    try:
        # an inference-mode guard of our own: leaving it resets the mode, whatever guard the code left alive
        with torch.inference_mode(torch.is_inference_mode_enabled()):
            yield
    finally:
        _restore_namespaces(namespaces)
        _pop_modes(function_modes, dispatch_modes)
        streams.put_back()
        warnings.filters[:] = filters
        warnings._filters_mutated()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        # each put back only when changed: use_deterministic_algorithms imports half of torch on its first call
        if torch.get_default_device() != device:
            torch.set_default_device(device)
        if torch.is_grad_enabled() != grad:
            torch.set_grad_enabled(grad)
        if torch.get_default_dtype() != dtype:
            torch.set_default_dtype(dtype)
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != anomaly:
            torch.set_anomaly_enabled(*anomaly)
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])


trust.record(__name__)  # last: every name above is defined (see .trust)
