"""Answers and learner code that misbehave, shared by the check tests: no check may raise on them."""

import itertools

import torch


class Hostile:
    """A learner's object whose every operation raises."""

    def _boom(self, *args):
        raise ValueError("hostile object")

    __eq__ = __hash__ = __bool__ = __iter__ = __len__ = __float__ = __index__ = __repr__ = _boom

    def __getattr__(self, name):
        raise ValueError(name)


class LearnerError(Exception):
    """An exception class of the learner's own."""


class BrokenMessage(Exception):
    """An exception whose message cannot even be read."""

    def __str__(self):
        raise RuntimeError("no message either")


class NotAnError(BaseException):
    """A request to stop that is neither KeyboardInterrupt nor SystemExit: a check must let it through."""


def raise_(err):
    raise err


def odd_answers():
    """Answers that are neither right nor of the asked form."""
    return {
        "hostile": Hostile(),
        "list-of-hostile": [Hostile()],
        "sparse": torch.tensor([20.0]).to_sparse(),
        "meta": torch.empty((), device="meta"),
        "complex": torch.tensor(20 + 1j),
        "huge": torch.zeros(10**6),
        "endless-generator": itertools.count(),
        "generator-function": (lambda: (yield 1)),
        "bytes": b"w",
        "type": int,
        "nested": [[["w"]]],
        "nan-tensor": torch.tensor(float("nan")),
    }
