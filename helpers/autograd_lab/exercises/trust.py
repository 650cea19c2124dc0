"""What a check trusts, and why a learner's earlier cells cannot change it.

A check judges the learner's code with torch, a few standard modules and the check modules' own functions and
constants. A cell that ran *before* the check could have replaced any of them (``torch.Tensor.backward = ...``,
``ex._SCENARIOS = ...``, ``Feedback.assert_passed = ...``), and what changes *during* a check is put back by
:func:`.isolation.kept_as_found`. So:

- ``record()`` notes every attribute of those namespaces when the checks are imported (the notebooks import them
  in their setup cell), and ``replaced()`` compares, when a check runs, what is there now with what was noted;
  ``restore()`` puts back what it found changed, so the grader's ``assert_passed`` that follows is the real one.
  A function that a notebook cell defined and put into torch *before* the import is found too (its code comes
  from the kernel, not from a file of the library), though what it replaced cannot be put back.
- ``record()`` also seals the check modules: each refuses new values for its own names (``ex.check_leaves = ...``).
- ``fresh_generator()`` gives each check its own random stream, seeded from the operating system: no answer
  can be fitted to test points that are drawn anew every time, and no seed the learner sets reaches them.

What a process cannot hide from code running in it (``gc``, frames, rebinding the notebook's own name ``ex``)
stays reachable; the checks close the routes an answer can take by accident or by a short trick.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import math
import operator
import os
import secrets
import sys
import types

import torch
import torch.nn.functional
import torch.overrides
import torch.utils._python_dispatch
from torch import nn

__all__ = ["fresh_generator", "fresh_seed", "record", "replaced", "restore", "seed_cpu", "trusted_namespaces",
           "unchanged"]

_randbits = secrets.randbits  # bound here: a cell that replaces secrets.randbits later does not reach the draws
_Generator = torch.Generator
_CPU_GENERATOR = torch.default_generator  # the generator models are made and dropout draws with on the CPU

# Builtins the checks call; the rest of builtins is the kernel's business (ipykernel swaps input() per cell).
_BUILTINS = ("abs", "all", "any", "callable", "enumerate", "float", "getattr", "hasattr", "int", "isinstance",
             "issubclass", "iter", "len", "list", "max", "min", "next", "range", "repr", "round", "sorted", "sum",
             "tuple", "type", "vars", "zip")


def fresh_seed() -> int:
    """A seed from the operating system's entropy (63 bits), never from torch's or Python's random state."""
    return _randbits(63)


def seed_cpu(seed: int) -> None:
    """Seed torch's CPU generator, for a problem that computes on the CPU alone. Not ``torch.manual_seed``: that also
    queues a seed for each device backend not yet started, formatting the caller's stack each time."""
    _CPU_GENERATOR.manual_seed(seed)


def fresh_generator() -> torch.Generator:
    """A CPU generator of its own, freshly seeded: test points no answer can be fitted to."""
    return _Generator().manual_seed(fresh_seed())


# What trusted_namespaces() found last, and len(sys.modules) then (not a list: record() notes lists' contents).
_FOUND = types.SimpleNamespace(modules=-1, spaces=[])


def trusted_namespaces(fresh: bool = False) -> list:
    """The modules and classes whose attributes a check relies on: torch's namespaces and classes the checks call,
    ``math`` and ``copy``, and the course's check modules with the classes they define.

    Every call of a learner's function asks for them: the list is looked for again only when a module has been
    imported since (or ``fresh``: ``record()``, while a check module is being imported, has its classes to add)."""
    if not fresh and _FOUND.modules == len(sys.modules):
        return list(_FOUND.spaces)
    spaces = [torch, torch.Tensor, torch._C.TensorBase, torch.nn.functional, torch.autograd, torch.autograd.graph,
              torch.autograd.Function, torch.autograd.function.FunctionCtx, nn.Module, nn.Parameter, nn.Linear,
              nn.Sequential, nn.MSELoss, nn.utils, nn.utils.clip_grad, torch.optim.Optimizer, torch.optim.SGD,
              torch.optim.Adam, torch.linalg, torch.overrides, torch.utils._python_dispatch,
              torch.utils._python_dispatch.TorchDispatchMode, torch.overrides.TorchFunctionMode, math, copy,
              inspect]
    package = __name__.rpartition(".")[0]
    for name in sorted(name for name in list(sys.modules) if name.startswith(package + ".")):
        module = sys.modules.get(name)
        if module is not None:
            spaces.append(module)
            spaces += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
    _FOUND.modules, _FOUND.spaces = len(sys.modules), spaces
    return list(spaces)


def unchanged(now: dict, recorded: dict) -> bool:
    """Whether a namespace's attributes are the recorded ones: the same names, in the same order, bound to the
    very same objects (compared by identity, never with ``==``, which an object can answer as it likes)."""
    return len(now) == len(recorded) and list(now) == list(recorded) and all(
        map(operator.is_, now.values(), recorded.values()))


_RECORD: dict = {}  # id(namespace) -> (namespace, {name: value}, {name: contents of a check module's container})
_BEFORE: list = []  # functions a notebook cell had put into a trusted namespace before it was recorded
_MISSING = object()
_CONTAINERS = (list, dict, set, bytearray)
_OURS = __name__.rpartition(".")[0] + "."


def _is_ours(space) -> bool:
    name = space.__name__ if isinstance(space, types.ModuleType) else space.__module__
    return name.startswith(_OURS)


def _snapshot(space) -> tuple:
    attrs = dict(vars(space))
    contents = {}
    if isinstance(space, types.ModuleType) and _is_ours(space):  # a check's lists and dicts: emptied in place?
        for name, value in attrs.items():
            if isinstance(value, _CONTAINERS) and not name.startswith("__"):
                try:
                    contents[name] = copy.deepcopy(value)
                except Exception:  # noqa: BLE001 -- an uncopyable container keeps its identity check only
                    pass
    return space, attrs, contents


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def record(finished: str):
    """Seal every check module whose code has run and note every trusted namespace as it is now (a namespace
    noted before keeps its first record). Each check module calls it last, ``record(__name__)``: a module still
    being imported is noted on a later call, once its names are all defined."""
    for space in trusted_namespaces(fresh=True):
        module = sys.modules.get(space.__name__ if isinstance(space, types.ModuleType) else space.__module__)
        if id(space) in _RECORD and not (module is not None and module.__name__ == finished):
            continue  # noted before (a module that just ran again, importlib.reload, is noted anew)
        if module is not None and module.__name__ != finished and _initializing(module):
            continue
        if isinstance(space, types.ModuleType) and _is_ours(space) and not isinstance(space, _SealedModule):
            space.__class__ = _SealedModule
        _RECORD[id(space)] = _snapshot(space)
        if not _is_ours(space):
            _BEFORE.extend(f"{_label(space, n)} (before the checks were imported)"
                           for n, v in vars(space).items() if _from_the_kernel(v))
    _RECORD.setdefault(id(builtins), (builtins, {n: getattr(builtins, n) for n in _BUILTINS}, {}))


_NAMES = {torch.Tensor: "torch.Tensor", torch._C.TensorBase: "torch.Tensor", nn.Module: "torch.nn.Module"}


def _label(space, name) -> str:
    if isinstance(space, types.ModuleType):
        return f"{space.__name__}.{name}"
    return f"{_NAMES.get(space) or space.__module__ + '.' + space.__qualname__}.{name}"


def _same_contents(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 -- contents that cannot be compared count as changed
        return False


def _changed(space, attrs, contents) -> list:
    """(name, recorded value) for each attribute of ``space`` that differs from its record: replaced, removed,
    emptied in place, or (for a class) shadowing what a base class defines (``torch.Tensor.allclose = f``)."""
    now = vars(space) if space is not builtins else {n: getattr(builtins, n, _MISSING) for n in attrs}
    if unchanged(now, attrs):  # the usual case, told at once; a check module's containers may still be emptied
        return [(n, attrs[n]) for n in contents if not _same_contents(attrs[n], contents[n])]
    found = [(n, v) for n, v in attrs.items() if not _kept(now.get(n, _MISSING), v)
             or (n in contents and not _same_contents(v, contents[n]))]
    if isinstance(space, type):
        found += [(n, _MISSING) for n in now if n not in attrs and any(n in vars(b) for b in space.__mro__[1:])]
    if not found and space is not builtins and _only_imports_added(now, attrs):  # torch's wrappers, submodules:
        _RECORD[id(space)] = (space, dict(now), contents)  # noted, so that the next look is quick
    return found


def _only_imports_added(now: dict, recorded: dict) -> bool:
    """No recorded name is gone, and each new one is a module (an import sets ``torch._dynamo`` on ``torch``)."""
    added = now.keys() - recorded.keys()
    return recorded.keys() <= now.keys() and all(isinstance(now[n], types.ModuleType) for n in added)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _kept(now, recorded) -> bool:
    """The recorded value, or torch's own wrapper of it (importing torch._dynamo wraps ``torch.manual_seed``)."""
    if now is recorded:
        return True
    return (isinstance(now, types.FunctionType) and getattr(now, "__wrapped__", None) is recorded
            and now.__code__.co_filename.startswith(_TORCH_DIR))


def _from_the_kernel(value) -> bool:
    """A function whose code a notebook cell wrote (IPython names its cells' files apart from any module's)."""
    if not isinstance(value, types.FunctionType):
        return False
    filename = value.__code__.co_filename
    return getattr(value, "__module__", None) == "__main__" or filename.startswith("<") or "ipykernel" in filename


def replaced() -> list[str]:
    """What differs from the record, as ``torch.Tensor.backward``-style names (empty when nothing does); functions a
    notebook cell had put into torch before the record are named with "(before the checks were imported)"."""
    names = list(_BEFORE)
    for space, attrs, contents in list(_RECORD.values()):
        names += [_label(space, n) for n, _ in _changed(space, attrs, contents)]
    return sorted(set(names))


def restore():
    """Put back every recorded attribute that was replaced, removed, emptied or shadowed."""
    for space, attrs, contents in list(_RECORD.values()):
        for name, value in _changed(space, attrs, contents):
            if value is _MISSING:
                type.__delattr__(space, name)
                continue
            if name in contents:  # the same list or dict object, its recorded contents put back in place
                if isinstance(value, (list, bytearray)):
                    value[:] = copy.deepcopy(contents[name])
                else:
                    value.clear()
                    value.update(copy.deepcopy(contents[name]))
            _put(space, name, value)


def _put(space, name, value):
    if isinstance(space, type):
        type.__setattr__(space, name, value)
    elif isinstance(space, types.ModuleType):
        types.ModuleType.__setattr__(space, name, value)
    else:
        setattr(space, name, value)


class _SealedModule(types.ModuleType):
    """A check module whose names cannot be given new values or removed from outside it, and whose recorded names
    read as recorded even when its ``__dict__`` was written to directly."""

    def __setattr__(self, name, value):
        if name == "__class__" or (name in vars(self) and not name.startswith("__")):  # the import system's own
            # names (__spec__, __loader__) stay writable: importlib.reload sets them
            raise AttributeError(
                f"{self.__name__}.{name} belongs to the course's answer checks and cannot be replaced: a check "
                "judges your answer with its own code only. Give your own function another name."
            )
        types.ModuleType.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise AttributeError(f"{self.__name__}.{name} belongs to the course's answer checks and cannot be removed.")

    def __getattribute__(self, name):
        value = types.ModuleType.__getattribute__(self, name)
        entry = _RECORD.get(id(self))
        if entry is not None and name in entry[1] and callable(entry[1][name]):
            return entry[1][name]
        return value
