"""Showing an error on purpose without stopping Run All: ``with shows_error(): ...``.

A notebook that demonstrates an error (an in-place change of a leaf, a second backward) must still run to its
end in every front-end: VS Code and Colab stop Run All at a cell that raises, whatever its tags. The block's
error is caught and printed as Python prints an uncaught one -- the lines of the cell that led to it, then the
error's class and message -- on the error stream, and the cell ends normally. Anything that is not an
``Exception`` (an interrupt) still stops the cell. A block that raises nothing says so: the demonstration did
not happen.
"""

from __future__ import annotations

import linecache
import sys
import traceback

__all__ = ["shows_error"]


class shows_error:  # noqa: N801 -- used as a statement, ``with shows_error():``, like contextlib's suppress
    """Catch the ``Exception`` the block raises and print it as the traceback's last lines; ``.error`` holds it."""

    def __init__(self):
        self.error = None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None:
            print("(no error: the block ran to its end)", file=sys.stderr)
            return False
        if not isinstance(error, Exception):
            return False
        self.error = error
        print(_report(error, tb), file=sys.stderr)
        return True


def _report(error: BaseException, tb) -> str:
    """The traceback as the learner's own code saw it: each of its lines that led to the error (no file names,
    which differ by machine), then ``Kind: message``."""
    lines = ["Traceback (most recent call last):"]
    for frame in traceback.extract_tb(tb):
        if _is_library(frame.filename):
            continue
        text = frame.line or linecache.getline(frame.filename, frame.lineno).strip()
        lines.append(f"  line {frame.lineno}: {text}")
    lines += traceback.format_exception_only(type(error), error)
    return "\n".join(line.rstrip("\n") for line in lines)


def _is_library(filename: str) -> bool:
    return "site-packages" in filename or "dist-packages" in filename or filename.startswith("<frozen")
