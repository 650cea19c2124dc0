"""Widgets: controls that call a plain function and show what it returns.

A widget holds no logic of its own. ``live(fn, name=control, ...)`` builds one
control per keyword and re-runs ``fn(**values)`` whenever a control changes,
showing its result below. The plain function is what tests (and the checked
twin cell beside each widget cell) call directly.

The controls and the wiring are ipywidgets' own (``interactive`` and its
abbreviations); what the course adds is thin: specs checked up front with a
message naming the parameter, sliders that update on release, a tuple result
shown item by item, an error shown inside the panel (which stays usable), and
a line saying how long the update took.

The panel's output is *set*, never captured: each update collects what ``fn``
prints and displays, in order, and assigns it to the Output widget's ``outputs``
at once (what ipywidgets' ``append_stdout`` does), where ``interactive`` would
run ``fn`` inside ``with out:``. nbclient (under ``jupyter nbconvert --execute``
and papermill) mirrors each *captured* output back to the kernel, sending on the
shell channel while it waits there for the cell's reply -- through a blocking
shadow of its asyncio socket (jupyter_client's ``Session.send``). That send makes
libzmq drain the socket's edge-triggered wake-up signal; if the reply has just
arrived, nothing wakes the waiting poll, and with nbclient's default (no cell
timeout) the run waits for ever (jupyter/nbclient#312). Set outputs are never
mirrored: a headless run of a ``live()`` cell sends nothing on the shell channel.

Conventions the browser tests rely on: each control's ``description`` is its
keyword name and carries the class ``al-control``; the panel carries the class
``al-live``, its output area ``al-output`` and its status line ``al-status``.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import io
import math
import sys
import time
import traceback

import ipywidgets as W
from IPython import get_ipython
from IPython.core.displaypub import DisplayPublisher
from IPython.display import display
from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

from .arguments import is_number

__all__ = ["control_for", "live"]

_EMPTY = inspect.Parameter.empty
_ACCEPTED = ("Use True/False (checkbox), a list of strings or of (label, value) pairs (dropdown), "
             "(min, max[, step]) numbers (slider), or pass an ipywidgets control.")


def _name(fn) -> str:
    """A readable name for any callable: a function, a ``functools.partial``, a callable object."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _check_range(name: str, spec: tuple) -> None:
    """A (min, max[, step]) slider spec: finite numbers, min <= max, a positive step."""
    if len(spec) not in (2, 3):
        raise TypeError(f"live(): {name}={spec!r} has {len(spec)} numbers; a slider takes (min, max) or "
                        "(min, max, step).")
    lo, hi, *step = spec
    for label, value in (("min", lo), ("max", hi), *(("step", s) for s in step)):
        if not math.isfinite(value):
            raise ValueError(f"live(): the {label} of {name}={spec!r} must be a finite number, got {value!r}.")
    if lo > hi:
        raise ValueError(f"live(): {name}={spec!r} has min {lo!r} greater than max {hi!r}; write (min, max).")
    if step and step[0] <= 0:
        raise ValueError(f"live(): the step of {name}={spec!r} must be positive, got {step[0]!r}.")


def _abbreviation(name: str, spec):
    """``spec`` checked and put in the form ipywidgets' abbreviations understand."""
    if isinstance(spec, W.Widget):
        if not isinstance(spec, W.ValueWidget):
            raise TypeError(f"live(): {name} is a {type(spec).__name__}, which has no value to pass. {_ACCEPTED}")
        return spec
    if isinstance(spec, bool):
        return spec
    if isinstance(spec, tuple) and spec and all(is_number(s) for s in spec):
        _check_range(name, spec)
        return spec
    if isinstance(spec, (list, dict)) and spec:
        return spec  # options, or (label, value) pairs, or {label: value}: a dropdown
    if isinstance(spec, tuple) and spec and not any(is_number(s) or isinstance(s, bool) for s in spec):
        return list(spec)  # a tuple of labels: a dropdown too
    raise TypeError(f"live(): cannot make a control for {name}={spec!r}. {_ACCEPTED}")


def control_for(name: str, spec, default=_EMPTY):
    """Turn a short description into a control, with ipywidgets' abbreviations.

    bool -> Checkbox; a list (of labels, or of (label, value) pairs) or a dict -> Dropdown;
    (min, max) or (min, max, step) of ints -> IntSlider, with a float -> FloatSlider;
    a ready widget is used as it is. ``default`` (the function's own default) is
    the starting value where the control can show it. A spec that cannot work
    (a NaN, min > max, a step <= 0, a mixed tuple) raises an error naming ``name``.
    """
    abbrev = _abbreviation(name, spec)
    control = W.interactive.widget_from_abbrev(abbrev, default)
    if control is not abbrev and default is not _EMPTY:
        try:  # ipywidgets applies a default to sliders and dropdowns, not to a checkbox
            control.value = default
        except Exception:  # noqa: BLE001 -- a default the control cannot show: keep the control's own
            pass
    control.description = name
    if isinstance(control, W.Checkbox) and control is not abbrev:
        control.indent = False
    if isinstance(control, (W.IntSlider, W.FloatSlider)):
        control.continuous_update = False
    control.style = {"description_width": "initial"}
    control.add_class("al-control")
    return control


def _signature(fn, name: str, controls: dict):
    """``fn``'s signature, checked against the control names (None when Python cannot read it)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(**{k: None for k in controls})
    except TypeError as err:
        raise TypeError(f"live(): {name} cannot take these controls ({', '.join(controls) or 'none'}): {err}") from None
    return sig


def _shown(fn, name: str, status: W.HTML):
    """``fn`` wrapped for the panel: shows its result (a tuple item by item) or the error it raised."""

    def call(**values):
        start = time.perf_counter()
        try:
            result = fn(**values)
        except Exception as exc:  # noqa: BLE001 -- shown in the panel; the controls stay usable
            where = ", ".join(f"{k}={v!r}" for k, v in values.items())
            print(f"{name}({where}) raised an error; change a control to try again.", file=sys.stderr)
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next, file=sys.stderr)
            status.value = f"<small><b>error:</b> {html.escape(f'{type(exc).__name__}: {exc}')}</small>"
            call.error = exc
            return
        call.error = None
        for item in result if isinstance(result, tuple) else (result,):
            if item is not None:
                display(item)
        status.value = f"<small>updated in {1000 * (time.perf_counter() - start):.0f} ms</small>"

    call.error = None
    return call


class _Publisher(DisplayPublisher):
    """IPython's ``display()`` during a panel update: each display becomes one output in ``outputs``."""

    def __init__(self, outputs: list):
        super().__init__()
        self.outputs = outputs

    def publish(self, data, metadata=None, *args, **kwargs):
        self.outputs.append({"output_type": "display_data", "data": data, "metadata": metadata or {}})

    def clear_output(self, wait=False):
        self.outputs.clear()


class _Stream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` during a panel update: text joins the last output if it is the same stream."""

    def __init__(self, outputs: list, name: str):
        self._outputs, self._name = outputs, name

    def writable(self):
        return True

    def write(self, text):
        last = self._outputs[-1] if self._outputs else {}
        if last.get("output_type") == "stream" and last["name"] == self._name:
            last["text"] += text
        else:
            self._outputs.append({"output_type": "stream", "name": self._name, "text": text})
        return len(text)


@contextlib.contextmanager
def _collected():
    """Collect, in order, what the block prints and displays, as the outputs an Output widget holds."""
    outputs = []
    shell = get_ipython()  # None outside IPython: display() then prints, and the stream collects it
    saved = shell.display_pub if shell is not None else None
    if shell is not None:
        shell.display_pub = _Publisher(outputs)
    try:
        with contextlib.redirect_stdout(_Stream(outputs, "stdout")), \
                contextlib.redirect_stderr(_Stream(outputs, "stderr")):
            yield outputs
    finally:
        if shell is not None:
            shell.display_pub = saved


class interactive(W.interactive):  # noqa: N801 -- ipywidgets' name: the panel's text form stays interactive(...)
    """ipywidgets' ``interactive``, whose update sets its Output widget's outputs instead of capturing them."""

    def update(self, *args):
        self.kwargs = {w._kwarg: w.get_interact_value() for w in self.kwargs_widgets}
        show_inline_matplotlib_plots()  # figures the cell drew before the panel stay in the cell
        with _collected() as outputs:
            try:
                self.result = self.f(**self.kwargs)
                show_inline_matplotlib_plots()
            except Exception:  # noqa: BLE001 -- shown in the panel, as interactive shows it
                traceback.print_exc()
        self.out.outputs = tuple(outputs)


def live(fn, **controls):
    """A panel of controls driving ``fn``: every change re-runs ``fn(**values)`` and shows its result.

    Keyword arguments name ``fn``'s parameters; each value is a control spec for
    ``control_for``. Parameters of ``fn`` with defaults may be left out; each
    control starts at ``fn``'s default. ``fn`` may be any callable (a
    ``functools.partial`` too). An error raised by ``fn`` is shown in the panel.
    """
    if not callable(fn):
        raise TypeError(f"live() expects a function first, got {type(fn).__name__}.")
    name = _name(fn)
    sig = _signature(fn, name, controls)
    params = sig.parameters if sig is not None else {}
    widgets = {k: control_for(k, spec, params[k].default if k in params else _EMPTY) for k, spec in controls.items()}
    status = W.HTML(value="")
    status.add_class("al-status")
    call = _shown(fn, name, status)
    panel = interactive(call, **widgets)
    panel.out.add_class("al-output")
    panel.children = [W.HBox(list(widgets.values()), layout=W.Layout(flex_flow="row wrap")), panel.out, status]
    panel.add_class("al-live")
    panel.controls = widgets
    panel.output = panel.out
    panel.status = status
    panel.refresh = panel.update
    return panel
