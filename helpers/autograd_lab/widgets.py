"""Widgets: controls that call a plain function and show what it returns.

A widget holds no logic of its own. ``live(fn, name=control, ...)`` builds one
control per keyword and re-runs ``fn(**values)`` whenever a control changes,
showing its result below. The plain function is what tests (and the checked
twin cell beside each widget cell) call directly.

Conventions the browser tests rely on: each control's ``description`` is its
keyword name; the panel carries the class ``al-live`` and its output area
``al-output``.
"""

from __future__ import annotations

import inspect
import time

import ipywidgets as W
from IPython.display import display

__all__ = ["live", "control_for"]


def control_for(name: str, spec):
    """Turn a short description into a control, like ``ipywidgets.interact`` does.

    bool -> Checkbox; list/tuple of str -> Dropdown; (min, max) or (min, max, step)
    of ints -> IntSlider, of floats -> FloatSlider; a ready widget is used as it is.
    """
    if isinstance(spec, W.ValueWidget):
        control = spec
    elif isinstance(spec, bool):
        control = W.Checkbox(value=spec, indent=False)
    elif isinstance(spec, (list, tuple)) and spec and all(isinstance(s, (str, tuple)) for s in spec) and not all(
        isinstance(s, (int, float)) for s in spec
    ):
        control = W.Dropdown(options=list(spec))
    elif isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(s, (int, float)) for s in spec):
        lo, hi, *step = spec
        if all(isinstance(s, int) for s in spec):
            control = W.IntSlider(min=lo, max=hi, step=step[0] if step else 1, value=lo)
        else:
            control = W.FloatSlider(min=lo, max=hi, step=step[0] if step else (hi - lo) / 100, value=lo)
    else:
        raise TypeError(
            f"live(): cannot make a control for {name}={spec!r}. Use True/False (checkbox), a list of strings "
            "(dropdown), (min, max[, step]) numbers (slider), or pass an ipywidgets control."
        )
    control.description = name
    if isinstance(control, (W.IntSlider, W.FloatSlider)):
        control.continuous_update = False
    control.style = {"description_width": "initial"}
    control.add_class("al-control")
    return control


def live(fn, *, _title: str | None = None, **controls):
    """A panel of controls driving ``fn``: every change re-runs ``fn(**values)`` and shows its result.

    Keyword arguments name ``fn``'s parameters; each value is a control spec for
    ``control_for``. Parameters of ``fn`` with defaults may be left out.
    """
    if not callable(fn):
        raise TypeError(f"live() expects a function first, got {type(fn).__name__}.")
    try:
        sig = inspect.signature(fn)
        sig.bind(**{k: None for k in controls})
    except TypeError as err:
        raise TypeError(f"live(): {fn.__name__} cannot take these controls ({', '.join(controls)}): {err}") from None
    widgets = {name: control_for(name, spec) for name, spec in controls.items()}
    for name, w in widgets.items():  # start each control at the function's own default, when it has one
        default = sig.parameters[name].default if name in sig.parameters else inspect.Parameter.empty
        if default is not inspect.Parameter.empty and not isinstance(controls[name], W.Widget):
            try:
                w.value = default
            except Exception:  # a default the control cannot show (out of range): keep the control's own
                pass
    out = W.Output()
    out.add_class("al-output")
    status = W.HTML(value="")
    status.add_class("al-status")

    def refresh(*_):
        values = {k: w.value for k, w in widgets.items()}
        start = time.perf_counter()
        with out:
            out.clear_output(wait=True)
            result = fn(**values)
            if isinstance(result, tuple):
                for item in result:
                    display(item)
            elif result is not None:
                display(result)
        status.value = f"<small>updated in {1000 * (time.perf_counter() - start):.0f} ms</small>"

    for w in widgets.values():
        w.observe(refresh, names="value")
    children = [W.HTML(f"<b>{_title}</b>")] if _title else []
    children += [W.HBox(list(widgets.values()), layout=W.Layout(flex_flow="row wrap")), out, status]
    panel = W.VBox(children)
    panel.add_class("al-live")
    panel.controls = widgets
    panel.output = out
    panel.refresh = refresh
    refresh()
    return panel
