"""live(): controls that call a plain function, start at its defaults, and show what it returns."""

import ipywidgets as W
import pytest

from autograd_lab import live
from autograd_lab.widgets import control_for


def test_controls_are_made_from_short_specs():
    assert isinstance(control_for("flag", True), W.Checkbox)
    assert isinstance(control_for("op", ["add", "mul"]), W.Dropdown)
    slider = control_for("n", (1, 10))
    assert isinstance(slider, W.IntSlider) and (slider.min, slider.max) == (1, 10)
    assert not slider.continuous_update
    assert isinstance(control_for("lr", (0.0, 1.0)), W.FloatSlider)
    assert control_for("n", (1, 10)).description == "n"
    assert "al-control" in control_for("n", (1, 10))._dom_classes


def test_bad_spec_says_what_is_accepted():
    with pytest.raises(TypeError, match="checkbox"):
        control_for("x", object())


def test_panel_calls_the_function_on_every_change_and_starts_at_defaults():
    calls = []

    def fn(n=3, op="mul", flag=False):
        calls.append((n, op, flag))
        return f"{op}:{n}:{flag}"

    panel = live(fn, n=(1, 5), op=["add", "mul"], flag=True)
    assert calls == [(3, "mul", False)]  # the function's defaults, not the controls'
    panel.controls["n"].value = 5
    panel.controls["op"].value = "add"
    panel.controls["flag"].value = True
    assert calls[-1] == (5, "add", True)
    assert len(calls) == 4
    assert "al-live" in panel._dom_classes and "al-output" in panel.output._dom_classes


def test_unknown_control_names_are_refused_with_the_function_name():
    def fn(n):
        return n

    with pytest.raises(TypeError, match="fn cannot take these controls"):
        live(fn, m=(1, 3))
    with pytest.raises(TypeError, match="expects a function"):
        live(3, n=(1, 2))
