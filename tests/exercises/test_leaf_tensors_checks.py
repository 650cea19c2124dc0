"""Notebook 01's exercise checks (leaf tensors) cannot be fooled, refuse no right answer and never raise.

For each check: wrong answers a learner could plausibly write, each of which must not pass and must get a
hint naming its own mistake; right answers written differently from the worked solution, which must pass;
odd answers and learner code that misbehaves, which must get feedback instead of escaping as an exception.
Every expected value is computed here by running PyTorch, never typed in.
"""

import contextlib
import io
import itertools
import json
import random
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from learner_code import LearnerError, NotAnError, odd_answers, raise_
from notebook_cells import run_cells

from autograd_lab.exercises import leaf_tensors as lt
from autograd_lab.exercises import trust
from autograd_lab.exercises.feedback import Feedback

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_leaf_tensors.ipynb"
NB = NOTEBOOK.stem


def outcome(make):
    """Run one of exercise 2's results here and place it as the check's rule does (the notebook's outcomes cell,
    which the test below runs beside it): not recorded, recorded, or recorded with a node that raises."""
    return lt._outcome(make(torch.tensor([1.5, -0.5, 2.0], requires_grad=True)))


RECORDING = {
    "A": lambda x: x.new_zeros(3).fill_(x.sum()),
    "B": lambda x: x.new_zeros(3).fill_(x.sum().item()),
    "C": lambda x: x + torch.floor_divide(x, 2),
    "D": lambda x: (x * 2).copy_(x.detach()),
    "E": lambda x: torch.where(x > 0, x, 0.0),
}
TRUTH = {"A": "recorded", "B": "not recorded", "C": "raises", "D": "recorded", "E": "recorded"}


def test_the_snippets_references_are_what_running_them_gives():
    tensors = lt._run_snippet(lt.LEAVES_SNIPPET)
    assert {n for n, t in tensors.items() if t.is_leaf} == {"w", "x", "s", "z"}
    assert set(tensors) == set(lt._LEAF_WHY)  # every tensor of the snippet has its reason
    assert {k: outcome(f) for k, f in RECORDING.items()} == TRUTH == lt._reference_recording()
    assert set(TRUTH.values()) == set(lt.OUTCOMES)  # every outcome of the decision table is asked for


def test_the_notebooks_prompts_show_the_snippets_the_checks_run():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert lt.LEAVES_SNIPPET in markdown
    for key, source in lt.RECORDING.items():
        assert f"- {key}: `{source}`" in markdown
    assert f"x = {lt.RECORDING_X}" in markdown


_TABLE_WORDS = {"recorded, then backward raises": "raises", "recorded": "recorded", "not recorded": "not recorded"}


def _notebook_outcomes(results: dict) -> dict:
    """The notebook's own outcomes cell run on ``results``: each result's outcome, read from the table it prints."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_cells(NB, "outcomes", torch=torch, results=results, advice=[SimpleNamespace(message="")])
    rows = printed.getvalue().splitlines()[1:len(results) + 1]
    return {row[:33].strip(): _TABLE_WORDS[row[33:].split(None, 2)[2]] for row in rows}


def test_the_outcome_rule_is_the_notebooks_outcomes_cell_on_its_rows_and_on_fresh_inputs():
    """The check's rule beside the notebook's own outcomes cell: on the rows of the notebook's table (its exceptions
    and copies cells), and on exercise 2's results built from an x drawn afresh. Each is built twice, since placing
    a result runs backward through it."""
    x = torch.randn(3, generator=torch.Generator().manual_seed(trust.fresh_seed()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # new_tensor's advice on copying x
        table = [run_cells(NB, "exceptions", "copies", torch=torch, warnings=warnings)["results"] for _ in range(2)]
    exercise = [{key: eval(source, {"torch": torch}, {"x": x.clone().requires_grad_()})
                 for key, source in lt.RECORDING.items()} for _ in range(2)]
    placed = [({name: lt._outcome(t) for name, t in mine.items()}, _notebook_outcomes(theirs))
              for mine, theirs in (table, exercise)]
    assert all(mine == theirs for mine, theirs in placed), (x, placed)
    assert placed[1][1] == lt._reference_recording() == TRUTH


def _aten_ops(make) -> tuple:
    """The ATen operations a result runs, in order (so `x // 2` and `torch.floor_divide(x, 2)` read the same)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    ops: list = []
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    with Record():
        make(x)
    return tuple(op for op in ops if op not in ("lift_fresh", "detach", "alias"))  # constants and views of x


def _table_rows() -> dict:
    """The results the notebook's outcomes table prints, each as a function of x (read from its own cells: the
    dict of the first, and the rows the second adds with results[...] = ...)."""
    import ast

    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    tree = ast.parse(cells["exceptions"])
    rows = next(node for node in ast.walk(tree) if isinstance(node, ast.Dict))
    pairs = list(zip(rows.keys, rows.values))
    pairs += [(node.targets[0].slice, node.value) for node in ast.walk(ast.parse(cells["copies"]))
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)]
    made_before = {"doubled": lambda x: torch.no_grad()(lambda: x * 2)()}  # the row built under no_grad
    out = {}
    for key, value in pairs:
        expr = ast.unparse(value)
        out[key.value] = made_before.get(expr) or eval(f"lambda x: {expr}", {"torch": torch})
    return out


def test_no_result_of_exercise_2_is_in_the_notebooks_own_table():
    """No item runs the operations of a row the notebook printed: that row would answer it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # new_tensor's advice on copying x
        rows = {name: _aten_ops(make) for name, make in _table_rows().items()}
    assert len(rows) >= 12 and rows["torch.floor_divide(x, 2)"] == _aten_ops(lambda x: x // 2)  # the test sees `//`
    assert {"x.clone().zero_()", "x.new_tensor(x)"} <= set(rows)
    for key, source in lt.RECORDING.items():
        ops = _aten_ops(eval(f"lambda x: {source}", {"torch": torch}))
        same = [name for name, row_ops in rows.items() if row_ops == ops]
        assert not same, f"{key} = {source} runs what the table's row {same} ran: the table answers it"


CHECKS = {"leaves": lt.check_leaves, "recording": lt.check_recording, "make_weight": lt.check_make_weight}


@pytest.mark.parametrize("odd", list(odd_answers()), ids=str)
@pytest.mark.parametrize("check", list(CHECKS), ids=str)
def test_no_check_raises_on_an_odd_answer(check, odd):
    fb = CHECKS[check](odd_answers()[odd])
    assert isinstance(fb, Feedback) and not fb.passed and fb.message


# ---------------------------------------------------------------- exercise 1: which tensors are leaves?


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ({"w", "h", "m"}, "You chose the tensors that require grad"),
        ({"h", "m"}, "You chose exactly the non-leaves"),
        ({"w"}, "You kept only the leaves that require grad"),
        ({"w", "x", "z", "m"}, "You kept the tensors a torch function created"),
        (set(), "You chose none"),
        ({"w", "x", "z"}, "s is a leaf. `s = x * 2`: made by an operation, but none of its inputs requires grad"),
        ({"w", "x", "s"}, "z is a leaf. `z = torch.zeros_like(w)`: zeros_like takes only w's shape"),
        ({"w", "x", "s", "z", "m"}, "m is not a leaf. `m = torch.zeros(3)`, then `m[1] = w[1]`"),
        ({"w", "x", "s", "z", "h", "m"}, "h is not a leaf"),
    ],
)
def test_leaves_wrong(answer, phrase):
    fb = lt.check_leaves(answer)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "answer",
    [
        ["w", "x", "s", "z"],
        ("z", "s", "x", "w"),
        frozenset("wxsz"),
        {"w": 0, "x": 0, "s": 0, "z": 0}.keys(),
        (name for name in "wxsz"),
        iter(["w", "x", "s", "z", "w"]),
        [" w", "x ", "s", "z"],
        np.array(["w", "x", "s", "z"]).tolist(),
    ],
    ids=["list", "tuple", "frozenset", "dict-keys", "generator", "iterator-with-repeat", "spaces", "numpy-strings"],
)
def test_leaves_right_written_differently(answer):
    assert lt.check_leaves(answer).passed


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ({"w": True, "x": True}, "give only the names of the leaves"),
        ("w, x, s, z", "got str"),
        (itertools.repeat("w"), "expected a set of names"),
        ({"w", "W"}, "no tensor named W"),
        ([torch.ones(1)], "write the names in quotes"),
    ],
)
def test_leaves_malformed(answer, phrase):
    fb = lt.check_leaves(answer)
    assert fb.status == "malformed" and phrase in fb.message, fb


@pytest.mark.parametrize("row", lt._LEAF_DIAGNOSES, ids=lambda row: row.name)
def test_every_leaf_belief_is_named(row):
    fb = lt.check_leaves(row.variant(lt._run_snippet(lt.LEAVES_SNIPPET)))
    assert fb.status == "wrong" and row.says() in fb.message, fb


def test_check_leaves_right_answer_in_any_collection():
    for answer in ({"w", "x", "s", "z"}, ["z", "s", "x", "w"], ("w", "x", "s", "z"), frozenset("wxsz")):
        fb = lt.check_leaves(answer)
        assert isinstance(fb, Feedback) and fb.passed, fb


@pytest.mark.parametrize(
    "answer, hint",
    [
        ({"w", "s", "z"}, "x is a leaf. `x = torch.randn(3)`: created by you, without requires_grad"),
        ({"w", "x", "z"}, "s is a leaf. `s = x * 2`: made by an operation, but none of its inputs requires grad"),
        ({"w", "x", "s"}, "z is a leaf. `z = torch.zeros_like(w)`: zeros_like takes only w's shape, dtype and "
                          "device: w is no differentiable input of it"),
        ({"x", "s", "z"}, "w is a leaf. `w = torch.randn(3, requires_grad=True)`: you created w yourself"),
        ({"w", "x", "s", "z", "h"}, "h is not a leaf. `h = w * x`: an input, w, requires grad"),
        ({"w", "x", "s", "z", "m"}, "the write was recorded, m now has a grad_fn (CopySlices) and is no longer a "
                                    "leaf"),
    ],
)
def test_check_leaves_each_mistake_gets_its_hint(answer, hint):
    fb = lt.check_leaves(answer)
    assert fb.status == "wrong"
    assert hint in fb.message
    assert fb.message.startswith("1 tensor misplaced")


def test_check_leaves_lists_every_mistake():
    fb = lt.check_leaves({"w", "h"})
    assert fb.status == "wrong" and fb.message.startswith("4 tensors misplaced")
    for name in ("x", "h", "s", "z"):
        assert f"- {name} " in fb.message


@pytest.mark.parametrize("answer", ["w", 3, [1, 2], {"w", "q"}])
def test_check_leaves_malformed(answer):
    fb = lt.check_leaves(answer)
    assert fb.status == "malformed" and not fb.passed


def test_check_leaves_unknown_name_is_named():
    assert "no tensor named q" in lt.check_leaves({"w", "q"}).message


@pytest.mark.parametrize("answer", [..., None])
def test_check_leaves_unanswered(answer):
    assert lt.check_leaves(answer).status == "unanswered"


# ---------------------------------------------------------------- exercise 2: recorded, not recorded, or raises?


def flipped(key, verdict):
    return {**TRUTH, key: verdict}


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (flipped("A", "not recorded"), "what does `fill_` take as the value it writes"),  # new_zeros, a factory
        (flipped("A", "raises"), "filling with a value has a derivative"),
        (flipped("B", "recorded"), "`.item()` gives a Python number"),  # every value comes from x
        (flipped("B", "raises"), "only if it was recorded first"),
        (flipped("C", "not recorded"), "walk the addition down the table"),
        (flipped("C", "recorded"), "backward walks every recorded path"),  # the direct path taken for the whole
        (flipped("D", "not recorded"), "Which tensor does an in-place operation always take in"),  # detached source
        (flipped("D", "raises"), "`copy_` has a derivative formula"),
        (flipped("E", "not recorded"), "is `x` itself a differentiable input of `torch.where`"),  # a comparison
        (flipped("E", "raises"), "`torch.where` only picks entries"),
        (dict.fromkeys(TRUTH, "recorded"), "You gave every one the same outcome"),
        (dict.fromkeys(TRUTH, "not recorded"), "the five land in all three"),
        ({**TRUTH, "B": "recorded", "C": "not recorded"}, "2 of 5 not yet"),
    ],
)
def test_recording_wrong(answer, phrase):
    fb = lt.check_recording(answer)
    assert fb.status == "wrong" and phrase in fb.message, fb


def test_item_c_raises_because_backward_reaches_floor_divide_not_because_of_the_addition():
    """C's outcome follows from the graph: with floor_divide's input detached its node is not in the graph, and
    backward works; with x entering floor_divide, backward raises although the direct path alone would work."""
    assert outcome(lambda x: x + torch.floor_divide(x.detach(), 2)) == "recorded"
    assert outcome(lambda x: torch.floor_divide(x, 2)) == "raises"
    assert outcome(lambda x: x * 1.0) == "recorded"
    assert outcome(lambda x: x + torch.floor_divide(x, 2) * 0) == "raises"  # a zero gradient still walks the path


def test_each_item_turns_on_the_corrected_second_question():
    """The items apply 'is a tensor that requires grad a differentiable input?' to cases the table does not list:
    A and B differ only by .item() (a tensor fill value against a Python number); D is recorded although every
    value comes from a detached source, because the tensor written into requires grad, and is not recorded when
    it does not; E's x is a value input, where x only in the condition records nothing."""
    assert outcome(lambda x: x.new_zeros(3).fill_(x.sum())) == "recorded"
    assert outcome(lambda x: x.new_zeros(3).fill_(x.sum().detach())) == "not recorded"
    assert outcome(lambda x: x.new_zeros(3).fill_(x.sum().item())) == "not recorded"
    assert outcome(lambda x: (x * 2).copy_(x.detach())) == "recorded"
    assert outcome(lambda x: (x.detach() * 2).copy_(x.detach())) == "not recorded"
    assert outcome(lambda x: torch.where(x > 0, 1.0, -1.0)) == "not recorded"
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    x.new_zeros(3).fill_(x.sum()).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))  # each entry's gradient goes back to the one fill value
    x.grad = None
    (x * 2).copy_(x.detach()).sum().backward()
    assert torch.equal(x.grad, torch.zeros(3))  # the overwritten values send x zero


def test_no_reason_or_hint_uses_the_old_rule():
    """The old second question ('takes part, more than its shape') failed both ways; no text may lean on it."""
    texts = list(lt._RECORDING_WHY.values()) + list(lt._RECORDING_NUDGE.values()) + list(lt._LEAF_WHY.values())
    for text in texts:
        assert "takes part" not in text and "more than its shape" not in text, text


def test_every_item_can_be_reasoned_out_no_hint_sends_the_learner_to_a_lookup():
    """Which operations PyTorch declares not differentiable is a lookup; no item, reason or hint rests on it."""
    texts = list(lt._RECORDING_WHY.values()) + list(lt._RECORDING_NUDGE.values()) + list(lt.RECORDING.values())
    for text in texts:
        for lookup in ("declare", "histc", "bincount", "derivatives.yaml"):
            assert lookup not in text, f"{lookup!r} in {text!r}"


def test_recording_hint_asks_rather_than_tells():
    for key, right in TRUTH.items():
        for verdict in lt.OUTCOMES:
            if verdict != right:
                fb = lt.check_recording(flipped(key, verdict))
                assert fb.status == "wrong" and "1 of 5" in fb.message
                assert f"{key} = {lt.RECORDING[key]}:" in fb.message
                assert fb.message.count("\n- ") == 1  # one line, for the one misplaced result


@pytest.mark.parametrize(
    "answer",
    [
        dict(TRUTH),
        {k.lower(): v for k, v in TRUTH.items()},
        {k: v.upper() for k, v in TRUTH.items()},
        {**TRUTH, "B": "not-recorded"},
        {**TRUTH, "B": "unrecorded"},
        {**TRUTH, "C": "recorded, then backward raises"},
        {**TRUTH, "C": "recorded then raises"},
        {**TRUTH, "C": " Raises "},
        {**TRUTH, "C": "raises at backward"},
        {**TRUTH, "C": "Raises at backward()"},
        {**TRUTH, "C": "backward raises"},
        {**TRUTH, "C": "recorded, but raises at backward"},
        {**TRUTH, "C": "raises when backward reaches it"},
    ],
    ids=["as-solution", "lower-keys", "upper-values", "hyphen", "unrecorded", "table-wording", "no-comma", "spaces",
         "heading-wording", "heading-with-parentheses", "backward-raises", "recorded-but-raises-at-backward",
         "table-text-wording"],
)
def test_recording_right_written_differently(answer):
    assert lt.check_recording(answer).passed


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (["recorded", "not recorded", "raises", "recorded", "recorded"], "give a dict"),
        ({**TRUTH, "a": "recorded"}, "appears twice"),
        ({**TRUTH, "F": "recorded"}, "unknown 'F'"),
        ({k: v for k, v in TRUTH.items() if k != "E"}, "missing E"),
        ({**TRUTH, "A": True}, "must be one of"),
        ({**TRUTH, "C": "not raises"}, "must be one of"),
        ({**TRUTH, "C": "raises, not recorded"}, "must be one of"),
        ({**TRUTH, "C": "error"}, "must be one of"),
        ({**TRUTH, "C": "at backward"}, "must be one of"),
        ({**TRUTH, "B": "maybe"}, "must be one of"),
    ],
)
def test_recording_malformed(answer, phrase):
    fb = lt.check_recording(answer)
    assert fb.status == "malformed" and phrase in fb.message, fb


def test_check_recording_unanswered():
    assert lt.check_recording(...).status == "unanswered"
    assert lt.check_recording(None).status == "unanswered"


# ---------------------------------------------------------------- exercise 3: repair make_weight

SHARED = (torch.rand(3) * 0.01).requires_grad_()


def shared_reset():
    SHARED.grad = None
    return SHARED


def seeded_inside():
    torch.manual_seed(0)
    return (torch.rand(3) * 0.01).requires_grad_()


def retained_non_leaf():
    w = torch.rand(3, requires_grad=True) * 0.01
    w.retain_grad()
    return w


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (lambda: torch.rand(3, requires_grad=True) * 0.01, "still not a leaf"),
        (retained_non_leaf, "retain_grad() makes backward fill"),
        (lambda: torch.rand(3) * 0.01, "requires no grad"),
        (lambda: (torch.rand(3, requires_grad=True) * 0.01).detach(), "requires no grad"),
        (lambda: torch.zeros(3, requires_grad=True), "all 0"),
        (lambda: torch.full((3,), 0.005, requires_grad=True), "all 0.005"),
        (lambda: torch.full((3,), float("nan"), requires_grad=True), "not all finite"),
        (lambda: torch.tensor([0.001, float("inf"), 0.002], requires_grad=True), "not all finite"),
        (lambda: torch.tensor([0.001, 0.002, 0.003], requires_grad=True), "two calls returned the same weights"),
        (seeded_inside, "a seed set inside the function"),
        (lambda: SHARED, "same tensor object"),
        (shared_reset, "same tensor object"),
        (lambda: SHARED.detach().requires_grad_(), "shares its memory"),
        (lambda: torch.rand(3, requires_grad=True), "should stay small"),
        (lambda: (torch.randn(3) * 0.01).requires_grad_(), "should stay small"),
        (lambda: (torch.rand(3) * 0.001).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.rand(3) * 0.005).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.randn(3).abs() * 0.003).clamp(max=0.0099).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.rand(4) * 0.01).requires_grad_(), "shape (3,)"),
        (lambda: (torch.rand(1, 3) * 0.01).requires_grad_(), "shape (3,)"),
        (lambda: torch.randint(0, 2, (3,)), "real floating-point"),
        (lambda: (torch.rand(3, dtype=torch.cfloat) * 0.01).requires_grad_(), "real floating-point"),
        (lambda: torch.rand(3, device="meta").requires_grad_(), "meta tensor"),
        (lambda: (torch.rand(3) * 0.01).to_sparse().requires_grad_(), "dense tensor"),
        (lambda n=None: raise_(ZeroDivisionError("division by zero")), "raised ZeroDivisionError"),
        (lambda n: torch.rand(n), "needs arguments"),
    ],
)
def test_make_weight_wrong(fn, phrase):
    fb = lt.check_make_weight(fn)
    assert fb.status == "wrong" and phrase in fb.message, fb


def make_weight_no_grad_then_flag():
    with torch.no_grad():
        w = torch.rand(3, requires_grad=True) * 0.01
    return w.requires_grad_()


def make_weight_scaled_in_place_unrecorded():
    """The optimizer's way (the optional part's SGD step, just before the exercise): change the leaf in place
    where nothing is recorded."""
    w = torch.rand(3, requires_grad=True)
    with torch.no_grad():
        w.mul_(0.01)
    return w


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.nn.Parameter(torch.rand(3) * 0.01),
        lambda: torch.nn.Parameter(torch.rand(3, requires_grad=True) * 0.01),
        lambda: (torch.rand(3, dtype=torch.float64) * 0.01).requires_grad_(),
        lambda: (torch.rand(3) * 0.01).half().requires_grad_(),
        lambda: (torch.rand(3) * 0.01).bfloat16().requires_grad_(),
        lambda: torch.from_numpy(np.random.default_rng().random(3) * 0.01).requires_grad_(),
        lambda: torch.tensor([random.random() * 0.01 for _ in range(3)], requires_grad=True),
        lambda: (torch.rand(3, requires_grad=True) * 0.01).detach().requires_grad_(),
        lambda: torch.empty(3).uniform_(0, 0.01).requires_grad_(),
        lambda: torch.rand(3).mul_(0.01).requires_grad_(True),
        lambda: torch.rand(3, requires_grad=True).mul(0.01).detach().requires_grad_(),
        make_weight_no_grad_then_flag,
        make_weight_scaled_in_place_unrecorded,
    ],
    ids=["Parameter", "Parameter-of-non-leaf", "float64", "float16", "bfloat16", "numpy", "python-random", "detach",
         "uniform_", "mul_", "detach-after", "no_grad", "in-place-under-no_grad"],
)
def test_make_weight_right_written_differently(fn):
    fb = lt.check_make_weight(fn)
    assert fb.passed, fb


def test_make_weight_is_deterministic_and_leaves_the_learners_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    first = lt.check_make_weight(lambda: (torch.rand(3) * 0.0093).requires_grad_())
    assert torch.equal(torch.rand(5), expected)
    assert repr(first) == repr(lt.check_make_weight(lambda: (torch.rand(3) * 0.0093).requires_grad_()))


def test_make_weight_prints_of_the_learner_show_for_the_checked_calls_only(capsys):
    def chatty():
        w = (torch.rand(3) * 0.01).requires_grad_()
        print("made", w.shape)
        return w

    assert lt.check_make_weight(chatty, trials=5).passed
    assert capsys.readouterr().out.count("made") == 5


def notebook_make_weight():
    """The notebook's own make_weight, the trap of exercise 3, from its cell (run as the learner receives it)."""
    return run_cells(NB, "ex-weight", torch=torch, ex=lt)["make_weight"]


def test_the_range_the_check_holds_weights_to_is_the_notebooks_make_weight():
    """The check's range, [0, 0.01), beside the notebook's own make_weight, drawn afresh: its values, detached and
    made leaves, pass the check's value and spread tests; and the same repair of weights ten times larger fails."""
    make_weight = notebook_make_weight()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(trust.fresh_seed())
        assert lt.check_make_weight(lambda: make_weight().detach().requires_grad_()).passed
        assert not lt.check_make_weight(lambda: (make_weight() * 10).detach().requires_grad_()).passed


def test_check_make_weight_right_answers():
    assert lt.check_make_weight(lambda: (torch.rand(3) * 0.01).requires_grad_()).passed
    assert lt.check_make_weight(lambda: torch.nn.Parameter(torch.rand(3) * 0.01)).passed


def test_check_make_weight_never_passes_the_original():
    fb = lt.check_make_weight(notebook_make_weight())
    assert fb.status == "wrong"
    assert "still not a leaf" in fb.message and "MulBackward0" in fb.message


_SHARED = (torch.rand(3) * 0.01).requires_grad_()


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda: torch.rand(3) * 0.01, "requires no grad"),
        (lambda: torch.rand(3, requires_grad=True), "should stay small"),
        (lambda: (torch.rand(4) * 0.01).requires_grad_(), "shape (3,)"),
        (lambda: 1 / 0, "raised ZeroDivisionError"),
        (lambda: _SHARED, "same tensor object on every call"),
    ],
)
def test_check_make_weight_wrong_answers_get_their_hint(fn, hint):
    fb = lt.check_make_weight(fn)
    assert fb.status == "wrong" and hint in fb.message, fb


@pytest.mark.parametrize(
    "answer, text",
    [
        (torch.rand(3), "pass the function itself"),
        (3, "expected a function"),
        (lambda: [0.0, 0.0, 0.0], "should return a tensor"),
    ],
)
def test_check_make_weight_malformed(answer, text):
    fb = lt.check_make_weight(answer)
    assert fb.status == "malformed" and text in fb.message


def test_check_make_weight_unanswered():
    assert lt.check_make_weight(...).status == "unanswered"


# ---------------------------------------------------------------- exceptions: which ones a check turns into feedback


@pytest.mark.parametrize("signal", [SystemExit, NotAnError])
def test_a_stop_raised_by_learner_code_is_feedback(signal):
    # Documented policy (never_raises): everything a learner's code raises becomes feedback, SystemExit included;
    # only KeyboardInterrupt, the learner's own request to stop the cell, passes through.
    assert lt.check_make_weight(lambda: raise_(signal())).status == "malformed"


def test_an_interrupt_passes_through():
    with pytest.raises(KeyboardInterrupt):
        lt.check_make_weight(lambda: raise_(KeyboardInterrupt()))


@pytest.mark.parametrize("err", [LearnerError("x"), TypeError("x"), IndexError("x"), ArithmeticError("x")], ids=str)
def test_every_exception_from_a_learners_factory_is_feedback(err):
    fb = lt.check_make_weight(lambda: raise_(err))
    assert fb.status == "wrong" and f"raised {type(err).__name__}" in fb.message
