"""The answer checks judge plain values and the final state, trust only what was there when they were imported,
draw fresh test points, watch every run alike, and leave the kernel as they found it.

Each test is a route by which a graded student once scored without the work, or a piece of kernel state a check
once changed; each must now fail to score, or stay as found.
"""

import copy
import math
import random
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_accumulation_in_practice_checks import make_loop as loop07
from test_accumulation_pitfalls_checks import right_update as right05
from test_beyond_backward_checks import silu_function
from test_grad_fn_chains_checks import right_div
from test_gradient_accumulation_checks import loop as loop04
from test_out_of_reach import _layer_norm_model, _Silu
from torch import nn

from autograd_lab.exercises import accumulation_in_practice as ex07
from autograd_lab.exercises import accumulation_pitfalls as ex05
from autograd_lab.exercises import beyond_backward as ex08
from autograd_lab.exercises import grad_fn_chains as ex02
from autograd_lab.exercises import gradient_accumulation as ex04
from autograd_lab.exercises import leaf_tensors as ex01
from autograd_lab.exercises import trust
from autograd_lab.exercises import vectorized_vs_looped as ex03
from autograd_lab.exercises.feedback import Feedback


class _SaysYes(torch.Tensor):
    """A tensor whose __torch_function__ answers every comparison with True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.allclose, torch.Tensor.equal):
            return True
        if func in (torch.isclose, torch.Tensor.isclose):
            return torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs)


def _yes(t):
    return torch.zeros_like(t).as_subclass(_SaysYes)


@pytest.fixture(autouse=True)
def _nothing_left_replaced():
    yield
    left = trust.replaced()
    trust.restore()
    assert not left, f"a test left {left} replaced"


# =========================================================================== five answers that once scored


def test_1_a_subclass_that_says_yes_to_comparisons_does_not_pass_02():
    fb = ex02.check_div_backward(lambda a, b, g: (_yes(a), _yes(b)))
    assert not fb.passed, fb


def test_2_a_backward_that_zeroes_grad_output_in_place_does_not_pass_08():
    assert not ex08.check_silu_backward(silu_function(lambda x, g: g.zero_())).passed
    assert not ex08.check_silu_backward(silu_function(lambda x, g: _yes(g))).passed
    assert ex08.check_silu_backward(_Silu).passed


def test_3_an_update_that_leaves_nan_does_not_pass_05_and_says_why():
    def nan_after_step(model, opt, x, y, k):
        right05(model, opt, x, y, k)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))

    fb = ex05.check_accumulated_update(nan_after_step)
    assert fb.status == "wrong" and "NaN or infinite" in fb.message, fb


def _zeroed_micro_batches_then_the_full_batch(model, loss_fn, optimizer, micro_batches, k):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), k):
        group = micro_batches[start:start + k]
        for x, y in group:
            (loss_fn(model(x), y) * 0.0).backward()  # counts like a micro-batch pass, sends nothing back
        x, y = torch.cat([x for x, _ in group]), torch.cat([y for _, y in group])
        with torch._C.DisableTorchFunction():
            F.mse_loss(F.linear(x, model.weight, model.bias), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def test_4_zeroed_micro_batches_beside_a_hidden_full_batch_do_not_pass_04():
    fb = ex04.check_training_loop(_zeroed_micro_batches_then_the_full_batch)
    assert fb.status == "wrong" and "samples at once" in fb.message, fb


def test_4b_zeroed_micro_batches_alone_are_not_micro_batch_passes_04():
    def zeroed_passes_then_full_batch_through_the_model(model, loss_fn, optimizer, micro_batches, k):
        for i, (x, y) in enumerate(micro_batches):
            (loss_fn(model(x), y) * 0.0).backward()
            if (i + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()

    assert not ex04.check_training_loop(zeroed_passes_then_full_batch_through_the_model).passed


def _vectorized(w, x, y, weights):
    return (weights * (x @ w - y) ** 2).sum() / weights.sum()


def test_5_a_loop_hidden_from_the_tracer_and_from_torch_functions_does_not_pass_03():
    def tracer_off(w, x, y, weights):
        sys.settrace(None)
        with torch._C.DisableTorchFunction():
            total = weights[0] * 0
            for v in weights:
                total = total + v
        return (weights * (x @ w - y) ** 2).sum() / total

    def tracer_off_and_back(w, x, y, weights):
        tracer = sys.gettrace()
        sys.settrace(None)
        with torch._C.DisableTorchFunction():
            total = weights[0] * 0
            for v in weights:
                total = total + v
        sys.settrace(tracer)
        return (weights * (x @ w - y) ** 2).sum() / total

    def loop_under_disabled_torch_functions(w, x, y, weights):
        with torch._C.DisableTorchFunction():
            total = weights[0] * 0
            for v in weights:
                total = total + v
        return (weights * (x @ w - y) ** 2).sum() / total

    for answer in (tracer_off, tracer_off_and_back, loop_under_disabled_torch_functions):
        fb = ex03.check_vectorized_loss(answer)
        assert fb.status == "wrong", (answer.__name__, fb)
    assert ex03.check_vectorized_loss(_vectorized).passed


# =========================================================================== patching before the check


def test_a_check_module_refuses_new_values_for_its_names():
    with pytest.raises(AttributeError, match="cannot be replaced"):
        ex02.check_div_backward = lambda answer: Feedback("correct", "")
    with pytest.raises(AttributeError, match="cannot be replaced"):
        ex04._SCENARIOS = ((1, (4,)),)
    with pytest.raises(AttributeError, match="cannot be removed"):
        del ex01.check_leaves


def test_a_check_written_into_the_module_dict_is_still_the_real_one_and_is_named():
    vars(ex02)["check_div_backward"] = lambda answer: Feedback("correct", "")
    fb = ex02.check_div_backward(lambda a, b, g: (a, b))  # the attribute reads as recorded
    assert fb.status == "wrong" and "grad_fn_chains.check_div_backward" in fb.message, fb
    assert not trust.replaced()  # put back by the check


def test_a_constant_changed_before_the_check_is_named_and_put_back():
    vars(ex04)["_SCENARIOS"] = ((1, (4,)),)
    fb = ex04.check_training_loop(loop04())
    assert fb.status == "wrong" and "gradient_accumulation._SCENARIOS" in fb.message, fb
    assert len(ex04._SCENARIOS) > 1 and ex04.check_training_loop(loop04()).passed


def test_a_list_the_check_reads_emptied_in_place_is_named_and_refilled():
    rows = len(ex07._SCENARIOS)
    ex07._SCENARIOS.clear()
    fb = ex07.check_scheduled_loop(loop07())
    assert fb.status == "wrong" and "accumulation_in_practice._SCENARIOS" in fb.message, fb
    assert len(ex07._SCENARIOS) == rows


def test_assert_passed_replaced_before_the_grader_line_still_raises():
    real = Feedback.assert_passed
    Feedback.assert_passed = lambda self: self
    with pytest.raises(AssertionError, match="assert_passed"):
        ex02.check_div_backward(lambda a, b, g: (a, b)).assert_passed()
    assert Feedback.assert_passed is real


class _EqualToAnything:
    """A replacement that calls itself equal to whatever it is compared with: namespaces are compared by identity."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__

    def __call__(self, *args, **kwargs):
        return True


@pytest.mark.parametrize("owner, name, value, check", [
    (torch.Tensor, "backward", lambda self, *a, **k: None, lambda: ex04.check_training_loop(loop04())),
    (torch.Tensor, "register_hook", lambda self, hook: None, lambda: ex04.check_training_loop(loop04())),
    (torch.Tensor, "is_leaf", property(lambda self: True), lambda: ex01.check_leaves({"w"})),
    (torch, "sigmoid", lambda x: x, lambda: ex08.check_silu_backward(_Silu)),
    (math, "ceil", lambda x: 0, lambda: ex05.check_accumulated_update(right05)),
    (torch, "allclose", lambda *a, **k: True, lambda: ex02.check_div_backward(right_div)),
    (torch, "allclose", _EqualToAnything(), lambda: ex02.check_div_backward(right_div)),
], ids=["Tensor.backward", "Tensor.register_hook", "Tensor.is_leaf", "torch.sigmoid", "math.ceil", "allclose",
        "allclose equal to anything"])
def test_torch_or_math_replaced_before_the_check_fails_it_names_it_and_is_put_back(owner, name, value, check):
    real = vars(owner).get(name)
    setattr(owner, name, value)
    fb = check()
    assert fb.status == "wrong" and f".{name}" in fb.message and "replaced" in fb.message, fb
    assert vars(owner).get(name) is real


def test_a_function_a_notebook_cell_defined_is_told_from_torch_s_own():
    cell = {}
    exec(compile("def allclose(*args, **kwargs):\n    return True\n", "<ipython-input-3-0>", "exec"), cell)
    assert trust._from_the_kernel(cell["allclose"])
    assert not trust._from_the_kernel(torch.Tensor.backward) and not trust._from_the_kernel(torch.allclose)


def test_torch_wrapping_its_own_functions_on_import_is_no_replacement():
    import torch._dynamo  # noqa: F401 -- wraps torch.manual_seed when imported

    assert not trust.replaced()
    wrapped = torch.manual_seed  # noted as torch's own now: replacing it is still found and put back
    torch.manual_seed = lambda seed: None
    assert "torch.manual_seed" in trust.replaced()
    trust.restore()
    assert torch.manual_seed is wrapped and not trust.replaced()


def test_a_check_module_imported_later_is_trusted_from_its_import_on():
    import types

    before = trust.trusted_namespaces()
    module = types.ModuleType("autograd_lab.exercises._imported_later")
    sys.modules[module.__name__] = module
    try:
        assert module not in before and module in trust.trusted_namespaces()
    finally:
        del sys.modules[module.__name__]
    assert module not in trust.trusted_namespaces()


def test_references_are_not_public_names_of_the_check_modules():
    for module in (ex01, ex02, ex03, ex04, ex05, ex07, ex08):
        public = [n for n in vars(module) if not n.startswith("_")]
        assert not [n for n in public if n.startswith("reference") or n in ("silu_derivative", "loss_divisor",
                                                                             "expected_calls", "run_snippet")]


# =========================================================================== answers fitted to the test points


def test_02_draws_fresh_points_for_every_check_so_a_lookup_table_fails():
    seen = []

    def spy(a, b, g):
        seen.append(a.clone())
        return right_div(a, b, g)

    assert ex02.check_div_backward(spy).passed
    table = {tuple(a.flatten().tolist()): right_div(a, b, g) for a, b, g in [ex02._div_points()]}
    points = list(seen)
    table.update({tuple(a.flatten().tolist()): None for a in points})

    def lookup(a, b, g):
        return table.get(tuple(a.flatten().tolist())) or right_div(a, b, g)

    assert ex02.check_div_backward(spy).passed
    assert not any(torch.equal(a, b) for a in seen[:2] for b in seen[2:])

    def fitted(a, b, g):
        key = tuple(a.flatten().tolist())
        return table[key] if table.get(key) is not None else (torch.zeros_like(a), torch.zeros_like(b))

    assert not ex02.check_div_backward(fitted).passed


def test_08_draws_fresh_points_for_every_check():
    seen = []

    def spy(x, g):
        seen.append(x.detach().clone())
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))

    answer = silu_function(spy)
    assert ex08.check_silu_backward(answer).passed and ex08.check_silu_backward(answer).passed
    assert not torch.equal(seen[0], seen[-1])


def test_04_05_07_draw_fresh_data_for_every_check():
    for check, right in ((ex04.check_training_loop, loop04()), (ex07.check_scheduled_loop, loop07())):
        first = []

        def spy(model, *args, _right=right, _first=first):
            _first.append(next(p.detach().clone() for p in model.parameters()))
            return _right(model, *args)

        assert check(spy).passed and check(spy).passed
        assert not torch.equal(first[0], first[len(first) // 2])
    seen = []

    def spy05(model, opt, x, y, k):
        seen.append(x.clone())
        right05(model, opt, x, y, k)

    assert ex05.check_accumulated_update(spy05).passed and ex05.check_accumulated_update(spy05).passed
    assert not torch.equal(seen[0], seen[len(seen) // 2])


# =========================================================================== behaving otherwise while watched


def test_05_a_model_that_normalizes_only_under_no_grad_does_not_pass():
    class Sneaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.last = nn.Linear(ex05.IN_FEATURES, ex05.HIDDEN), nn.Linear(ex05.HIDDEN, 1)

        def forward(self, x):
            h = self.first(x)
            if not torch.is_grad_enabled():
                h = (h - h.mean(1, keepdim=True)) / h.std(1, keepdim=True)
            return self.last(torch.tanh(h))

    fb = ex05.check_normalized_model(Sneaky)
    assert fb.status == "wrong" and "normalizes" in fb.message, fb


def test_05_an_update_that_accumulates_only_when_a_hook_is_on_the_model_does_not_pass():
    def sneaky(model, opt, x, y, k):
        if any(m._forward_hooks for m in model.modules()):
            return right05(model, opt, x, y, k)
        return right05(model, opt, x, y, 1)  # the full batch where nothing seems to watch

    fb = ex05.check_accumulated_update(sneaky)
    assert fb.status == "wrong" and "24 samples" in fb.message, fb


def test_05_an_update_on_an_unwatched_copy_with_the_gradients_copied_back_does_not_pass():
    def on_a_copy(model, opt, x, y, k):
        twin = copy.deepcopy(model)
        for hooks in (m._forward_hooks for m in twin.modules()):
            hooks.clear()
        (F.mse_loss(twin(x), y) + ex05.LAM * ex05.penalty(twin)).backward()  # the full batch, on the copy
        opt.zero_grad()
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = q.grad.clone()
        nn.utils.clip_grad_value_(model.parameters(), ex05.MAX_VALUE)
        opt.step()

    fb = ex05.check_accumulated_update(on_a_copy)
    assert fb.status == "wrong" and "24 samples" in fb.message, fb


def test_04_a_loop_that_pops_the_watcher_does_not_pass():
    def popper(model, loss_fn, optimizer, micro_batches, k):
        torch._C._pop_torch_dispatch_stack(None)
        return loop04()(model, loss_fn, optimizer, micro_batches, k)

    fb = ex04.check_training_loop(popper)
    assert fb.status == "wrong" and "watcher" in fb.message, fb
    assert torch._C._len_torch_dispatch_stack() == 0


def test_03_a_loss_judged_on_one_path_for_its_value_and_another_for_its_work_does_not_pass():
    def looped(w, x, y, weights):
        total = 0
        for k in range(len(y)):
            total = total + weights[k] * (x[k] @ w - y[k]) ** 2
        return total / weights.sum()

    def sneaky(w, x, y, weights):  # right only where nothing seems to watch, vectorized only where watched
        if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
            return 1.5 * _vectorized(w, x, y, weights)
        total = 0.0
        for v in weights.tolist():
            total += v
        return (weights * (x @ w - y) ** 2).sum() / total

    def raises_when_traced(w, x, y, weights):
        if sys.gettrace() is not None:
            raise RuntimeError("not while traced")
        return looped(w, x, y, weights)

    assert not ex03.check_vectorized_loss(sneaky).passed
    assert not ex03.check_vectorized_loss(raises_when_traced).passed


# =========================================================================== the kernel left as found


def _kernel():
    return (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist(), torch.get_num_threads(),
            list(warnings.filters), torch.is_grad_enabled(), torch.get_default_dtype())


def _rude_in(answer):
    """The answer, after reseeding every stream, changing the thread count and the warnings filters."""
    def run(*args, **kwargs):
        torch.manual_seed(123)
        random.seed(123)
        np.random.seed(123)
        torch.set_num_threads(1)
        warnings.simplefilter("error")
        return answer(*args, **kwargs)
    return run


@pytest.mark.parametrize("name, check", [
    ("01 leaves", lambda: ex01.check_leaves({"w", "x", "s", "z"})),
    ("03 looped nodes", lambda: ex03.check_looped_nodes(153)),
    ("03 vectorized loss", lambda: ex03.check_vectorized_loss(_rude_in(_vectorized))),
    ("04 loop", lambda: ex04.check_training_loop(_rude_in(loop04()))),
    ("05 update", lambda: ex05.check_accumulated_update(_rude_in(right05))),
    ("05 model", lambda: ex05.check_normalized_model(_rude_in(_layer_norm_model))),
    ("07 loop", lambda: ex07.check_scheduled_loop(_rude_in(loop07()))),
    ("08 silu", lambda: ex08.check_silu_backward(_Silu)),
])
def test_every_check_leaves_random_streams_threads_and_warnings_as_found(name, check):
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    before = _kernel()
    check()
    after = _kernel()
    assert torch.equal(before[0], after[0]), "torch's random state"
    assert before[1:] == after[1:]
    assert float(torch.rand(())) == float(torch.manual_seed(7) and torch.rand(()))  # the next draw as before


def test_a_check_module_reloaded_is_noted_anew_not_taken_for_replaced():
    import importlib

    importlib.reload(ex08)
    assert not trust.replaced()
    assert ex08.check_silu_backward(_Silu).passed
