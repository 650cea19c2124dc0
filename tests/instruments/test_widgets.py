"""The widgets: live() controls that call a plain function, start at its defaults and show what it returns; and
the button that runs a slow start() in the background and hands its result on."""

import sys

import ipywidgets as W
import nbformat
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


def test_dropdowns_from_pairs_tuples_and_dicts():
    assert control_for("k", [("one", 1), ("two", 2)]).value == 1
    assert control_for("op", ("add", "mul")).options == ("add", "mul")
    assert control_for("k", {"one": 1}, default=1).value == 1
    slider = control_for("lr", (0.0, 1.0, 0.25), default=0.5)
    assert isinstance(slider, W.FloatSlider) and slider.step == 0.25 and slider.value == 0.5


def test_an_error_in_the_function_is_shown_and_the_panel_stays_usable():
    def fn(n=1):
        if n == 2:
            raise ValueError("two is not allowed")
        return n

    panel = live(fn, n=(1, 3))
    assert "updated" in panel.status.value
    panel.controls["n"].value = 2  # raises inside fn: shown, not raised
    assert "ValueError: two is not allowed" in panel.status.value
    panel.controls["n"].value = 3
    assert "updated" in panel.status.value and "error" not in panel.status.value


def test_a_partial_works_and_its_errors_name_the_function():
    import functools

    def scaled(n, scale):
        return n * scale

    calls = []
    panel = live(functools.partial(lambda n, scale: calls.append(scaled(n, scale)), scale=10), n=(1, 3))
    panel.controls["n"].value = 3
    assert calls == [20, 30]  # no default: ipywidgets starts a slider in the middle
    with pytest.raises(TypeError, match=r"scaled cannot take these controls \(m\)"):
        live(functools.partial(scaled, scale=2), m=(1, 3))


def test_refresh_reruns_the_function():
    calls = []
    panel = live(lambda n=1: calls.append(n), n=(1, 3))
    panel.refresh()
    assert calls == [1, 1]


def test_the_panel_sets_its_outputs_in_order_and_never_captures():
    def fn(n=1):
        print("first", n)
        print("second")
        print("to stderr", file=sys.stderr)
        return n * 10

    panel = live(fn, n=(1, 3))
    texts = [(o["output_type"], o.get("name"), o.get("text")) for o in panel.output.outputs]
    assert texts[:2] == [("stream", "stdout", "first 1\nsecond\n"), ("stream", "stderr", "to stderr\n")]
    assert len(panel.output.outputs) == 3  # the result, displayed (outside IPython display() prints it)
    assert panel.output.msg_id == ""  # nothing was routed through Output-widget capture
    panel.controls["n"].value = 2
    assert panel.output.outputs[0]["text"].startswith("first 2")


def test_an_error_lands_in_the_panels_outputs_as_stderr():
    def fn(n=1):
        raise ValueError("no good")

    panel = live(fn, n=(1, 3))
    (out,) = panel.output.outputs
    assert out["name"] == "stderr" and "ValueError: no good" in out["text"]


LIVE_CELL = """from autograd_lab import live

def f(n=2):
    print("n =", n)
    return n * 10

live(f, n=(1, 3))"""


@pytest.mark.slow
def test_a_headless_run_sends_nothing_on_the_shell_channel(monkeypatch):
    """nbclient with its defaults (what nbconvert and papermill run): its Output-widget mimic has nothing to
    mirror back to the kernel, so it never sends on the shell channel while it waits for a reply (nbclient#312)."""
    from nbclient import NotebookClient, output_widget

    sends = []
    real = output_widget.OutputWidget._publish_msg
    monkeypatch.setattr(output_widget.OutputWidget, "_publish_msg",
                        lambda self, *a, **k: (sends.append(a), real(self, *a, **k)))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LIVE_CELL)])
    NotebookClient(nb, kernel_name="python3").execute()
    assert sends == []
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    (outputs,) = [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]
    assert outputs[0]["text"] == "n = 2\n" and outputs[1]["data"]["text/plain"] == "20"


# --------------------------------------------------------------------------- the button for a slow run
