"""``shows_error``: an error shown on purpose reads as Python's own, and the cell goes on (Run All does not stop)."""

import pytest
import torch

from autograd_lab import shows_error


def test_the_error_is_printed_with_the_line_that_raised_and_the_cell_goes_on(capsys):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with shows_error() as shown:
        w.add_(1.0)
    err = capsys.readouterr().err
    assert isinstance(shown.error, RuntimeError)
    assert err.startswith("Traceback (most recent call last):\n")
    assert "w.add_(1.0)" in err
    assert "RuntimeError: a leaf Variable that requires grad is being used in an in-place operation." in err
    assert "site-packages" not in err and "/" not in err.split("\n")[1]  # no file names, which differ by machine


def test_a_block_that_raises_nothing_says_so(capsys):
    with shows_error() as shown:
        pass
    assert shown.error is None
    assert "no error" in capsys.readouterr().err


def test_an_interrupt_still_stops_the_cell():
    with pytest.raises(KeyboardInterrupt), shows_error():
        raise KeyboardInterrupt
