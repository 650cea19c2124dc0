"""Running a learner's code inside a check without letting it change the kernel or the check.

``kept_as_found()`` wraps every check (through ``never_raises``) and every call of a learner's function in the
function checks. When the block ends it puts back what the learner's code could have changed and a later cell,
or the rest of the check, would observe:

- torch's global modes: grad mode, inference mode, anomaly detection, deterministic algorithms, the default
  dtype and device;
- torch function and dispatch modes the code entered and left on the mode stack (a mode that answers
  ``torch.allclose`` with True would otherwise judge the rest of the check);
- the functions of torch's namespaces that the code replaced (``torch.allclose = ...``,
  ``torch.Tensor.backward = ...``) and those of the checker modules themselves.

What it does not cover: torch's random stream (the notebooks' later draws depend on where a check leaves it), and
objects reached some other way (``gc``), which a process cannot hide from code running in it.
"""

from __future__ import annotations

import contextlib
import sys

import torch

__all__ = ["kept_as_found"]


def _namespaces():
    """The modules and classes whose attributes a learner's code might replace, checker modules included."""
    spaces = [torch, torch.Tensor, torch.nn.functional, torch.autograd, torch.autograd.Function, torch.nn.Module,
              torch.nn.utils, torch.optim.Optimizer, torch.optim.SGD, torch.linalg]
    package = __name__.rpartition(".")[0]
    spaces += [m for name, m in list(sys.modules.items()) if m is not None and name.startswith(package + ".")]
    return spaces


def _snapshot_namespaces():
    return [(space, dict(vars(space))) for space in _namespaces()]


def _restore_namespaces(saved):
    for space, attributes in saved:
        current = vars(space)
        for name, value in attributes.items():
            if current.get(name, _MISSING) is not value:
                setattr(space, name, value)
        if isinstance(space, type):  # a class gains no attributes of its own while a check runs
            for name in [n for n in current if n not in attributes]:
                delattr(space, name)


_MISSING = object()


def _pop_modes(function_modes: int, dispatch_modes: int):
    """Leave the torch function and dispatch mode stacks as deep as they were."""
    while torch._C._len_torch_function_stack() > function_modes:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > dispatch_modes:
        torch._C._pop_torch_dispatch_stack()


@contextlib.contextmanager
def kept_as_found():
    """Run the block; afterwards torch's global modes, mode stacks and namespaces are as they were before it."""
    grad, dtype, device = torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_default_device()
    anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    function_modes, dispatch_modes = torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
    namespaces = _snapshot_namespaces()
    try:
        # an inference-mode guard of our own: leaving it resets the mode, whatever guard the code left alive
        with torch.inference_mode(torch.is_inference_mode_enabled()):
            yield
    finally:
        _restore_namespaces(namespaces)
        _pop_modes(function_modes, dispatch_modes)
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
