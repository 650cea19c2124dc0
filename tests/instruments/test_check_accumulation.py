"""check_accumulation: its verdicts and the causes it names (unequal micro-batches, missing scaling, BatchNorm,
dropout, losses over the items that count), and its boundary: the inputs a learner's own project passes
(numpy and torch integers, non-finite values, low-precision models, single-sample BatchNorm, bad arguments),
and what it leaves as found: the caller's batch (a model that changes its input in place), grad mode, random state.
"""

import copy
import itertools
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograd_lab.accumulation import SCALES, AccumulationReport, check_accumulation


@pytest.fixture
def data():
    torch.manual_seed(0)
    return torch.randn(32, 3), torch.randn(32, 1)


def _mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).to(dtype)


def _classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4))


# --------------------------------------------------------------------------- verdicts and causes


def test_check_accumulation_agrees_for_a_plain_mlp(data):
    X, Y = data
    for k in (1, 2, 3, 4, 32):
        report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, k)
        assert report.agree and bool(report) and report.causes == [], k
        assert sum(report.sizes) == 32 and len(report.sizes) == k
    assert "AGREE" in str(report) and "IS the full-batch step" in str(report)


def test_check_accumulation_names_unequal_micro_batches(data):
    X, Y = data
    report = check_accumulation(nn.Linear(3, 1), nn.MSELoss(), X[:10], Y[:10], 2, sizes=(7, 3), scale="k")
    assert not report.agree and report.causes[0].startswith("unequal micro-batches")
    assert report.max_diff > 1e-3 and "DIFFER" in str(report)
    assert check_accumulation(nn.Linear(3, 1), nn.MSELoss(), X[:10], Y[:10], 2, sizes=(7, 3)).agree


def test_check_accumulation_names_missing_scaling(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 4, scale="none")
    assert not report.agree and report.causes[0].startswith("missing /k scaling")
    assert "4 times" in report.causes[0]
    assert report.rel_diff == pytest.approx(3.0, rel=1e-4)


def test_check_accumulation_names_a_summed_loss_scaled_twice(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(reduction="sum"), X, Y, 2, scale="k")
    assert not report.agree and "scale='none'" in report.causes[0]
    assert check_accumulation(_mlp(), nn.MSELoss(reduction="sum"), X, Y, 2, scale="none").agree


def test_check_accumulation_names_batchnorm_and_its_running_stats(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2)
    assert not report.agree and report.causes[0].startswith("BatchNorm")
    assert any("num_batches_tracked (full batch 1, accumulated 2)" in b for b in report.buffers_differ)
    model.eval()  # in eval mode BatchNorm uses its running statistics: nothing mixes samples
    assert check_accumulation(model, nn.MSELoss(), X, Y, 2).agree


def test_check_accumulation_names_dropout(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 8), nn.Dropout(0.5),
                          nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2)
    assert not report.agree and report.causes[0].startswith("dropout")


def test_check_accumulation_names_two_causes_at_once(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    report = check_accumulation(model, nn.MSELoss(), X, Y, 2, scale="none")
    assert report.causes[0].startswith("BatchNorm") and report.causes[1].startswith("missing /k")


def test_check_accumulation_with_an_optimizer_step(data):
    X, Y = data
    sgd = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert sgd.agree and sgd.params_agree and sgd.optimizer == "SGD"
    # Adam divides by the gradient's own size: a missing / k changes the gradient, not (much) the step.
    adam = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, scale="none",
                              optimizer=lambda p: torch.optim.Adam(p, lr=1e-3))
    assert not adam.grads_agree and adam.params_agree and "parameters AGREE" in str(adam)


def test_check_accumulation_leaves_the_model_and_random_state_alone(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 1))
    model(X).sum().backward()
    before = copy.deepcopy(model.state_dict())
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    check_accumulation(model, nn.MSELoss(), X, Y, 4, scale="k")
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name]), name
    for p, g in zip(model.parameters(), grads):
        assert torch.equal(p.grad, g)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(k=0), ValueError, "at least 1"),
    (dict(k=-2), ValueError, "at least 1"),
    (dict(k=33), ValueError, "batch holds 32"),
    (dict(k=2.0), TypeError, "must be an int"),
    (dict(k=True), TypeError, "must be an int"),
    (dict(k=2, scale="mean"), ValueError, "scale must be one of"),
    (dict(k=2, sizes=(30, 3)), ValueError, "adding up to the batch size 32"),
    (dict(k=2, sizes=(32,)), ValueError, "2 positive ints"),
    (dict(k=2, sizes="ab"), TypeError, "sequence of 2 ints"),
    (dict(k=2, optimizer=3), TypeError, "factory"),
])
def test_check_accumulation_bad_arguments_get_clear_errors(data, kwargs, error, words):
    X, Y = data
    with pytest.raises(error, match=words):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, **kwargs)


def test_check_accumulation_bad_models_losses_and_batches(data):
    X, Y = data
    with pytest.raises(ValueError, match="not a scalar"):
        check_accumulation(_mlp(), nn.MSELoss(reduction="none"), X, Y, 2)
    with pytest.raises(TypeError, match="must return a tensor"):
        check_accumulation(_mlp(), lambda out, y: 1.0, X, Y, 2)
    with pytest.raises(ValueError, match="does not depend on any parameter"):
        check_accumulation(_mlp(), lambda out, y: y.sum(), X, Y, 2)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        check_accumulation(lambda x: x, nn.MSELoss(), X, Y, 2)
    with pytest.raises(TypeError, match="callable"):
        check_accumulation(_mlp(), "mse", X, Y, 2)
    with pytest.raises(ValueError, match="must match"):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y[:5], 2)
    with pytest.raises(TypeError, match="inputs must be a torch.Tensor"):
        check_accumulation(_mlp(), nn.MSELoss(), X.tolist(), Y, 2)
    frozen = _mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        check_accumulation(frozen, nn.MSELoss(), X, Y, 2)


def test_each_scale_is_right_for_the_loss_it_is_meant_for(data):
    X, Y = data

    def summed_over_the_batch(out, y):  # already divided by the whole batch's count: needs no scaling
        return F.mse_loss(out, y, reduction="sum") / len(X)

    cases = {"size": (nn.MSELoss(), (20, 12)), "k": (nn.MSELoss(), (16, 16)), "none": (summed_over_the_batch, (20, 12))}
    assert set(cases) == set(SCALES)
    for scale, (loss_fn, sizes) in cases.items():
        assert check_accumulation(_mlp(), loss_fn, X, Y, 2, sizes=sizes, scale=scale).agree, scale
        if scale != "size":
            assert not check_accumulation(_mlp(), loss_fn, X, Y, 2, sizes=(20, 12) if scale == "k" else sizes,
                                          scale="k" if scale == "none" else scale).agree, scale


# --------------------------------------------------------------------------- arguments


def test_a_loss_class_for_an_instance_names_the_argument_and_the_fix(data):
    X, Y = data
    with pytest.raises(TypeError, match=r"loss_fn is the class MSELoss.*MSELoss\(\)"):
        check_accumulation(_mlp(), nn.MSELoss, X, Y, 2)
    with pytest.raises(TypeError, match="model is the class Linear"):
        check_accumulation(nn.Linear, nn.MSELoss(), X, Y, 2)


def test_an_optimizer_instance_for_a_factory_is_refused(data):
    X, Y = data
    model = _mlp()
    with pytest.raises(TypeError, match="optimizer must be a factory"):
        check_accumulation(model, nn.MSELoss(), X, Y, 2, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


@pytest.mark.parametrize("k", [np.int64(4), np.int32(4), torch.tensor(4), torch.tensor([4])], ids=str)
def test_numpy_and_torch_integers_are_accepted_for_k(data, k):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, k)
    assert report.agree and report.k == 4 and type(report.k) is int


@pytest.mark.parametrize("sizes", [np.array([7, 25]), torch.tensor([7, 25]), (np.int64(7), torch.tensor(25))],
                         ids=["numpy", "tensor", "mixed"])
def test_numpy_and_torch_integers_are_accepted_for_sizes(data, sizes):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, sizes=sizes)
    assert report.agree and report.sizes == (7, 25)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(k=2.5), TypeError, "must be an int"),
    (dict(k=torch.tensor(2.0)), TypeError, "must be an int"),
    (dict(k=torch.tensor(True)), TypeError, "must be an int, got a bool"),
    (dict(k=np.bool_(True)), TypeError, "must be an int"),
    (dict(k=2, sizes=(16.5, 15.5)), TypeError, "sequence of 2 ints"),
    (dict(k=2, sizes=(0, 32)), ValueError, "positive ints"),
    (dict(k=2, sizes=(20, 20)), ValueError, "adding up to the batch size 32"),
    (dict(k=3, sizes=(16, 16)), ValueError, "3 positive ints"),
    (dict(k=np.int64(40)), ValueError, "batch holds 32"),
])
def test_impossible_splits_raise_clear_errors(data, kwargs, error, words):
    X, Y = data
    with pytest.raises(error, match=words):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, **kwargs)


# --------------------------------------------------------------------------- non-finite values


@pytest.mark.parametrize("where, value", [("inputs", float("nan")), ("inputs", float("inf")),
                                          ("targets", float("nan")), ("targets", -float("inf"))])
def test_non_finite_inputs_or_targets_are_a_clear_error(data, where, value):
    X, Y = (t.clone() for t in data)
    (X if where == "inputs" else Y)[3, 0] = value
    with pytest.raises(ValueError, match=f"{where} hold 1 NaN or inf value"):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2)


def test_a_non_finite_parameter_is_a_clear_error(data):
    X, Y = data
    model = _mlp()
    with torch.no_grad():
        model[2].bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="parameter '2.bias' holds NaN or inf"):
        check_accumulation(model, nn.MSELoss(), X, Y, 2)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_non_finite_gradients_get_an_explicit_verdict_never_agree(data, bad):
    X, Y = data

    def loss_fn(out, y):  # finite inputs, but the loss blows up
        return F.mse_loss(out, y) * bad

    report = check_accumulation(_mlp(), loss_fn, X, Y, 2)
    text = str(report)
    assert isinstance(report, AccumulationReport) and not report.agree and not report.grads_agree
    assert report.not_finite and "NOT FINITE" in text and "AGREE" not in text
    assert "verdict:    none" in text and "mixes the samples" not in text
    assert "NaN or inf on this batch" in report.causes[0]


def test_non_finite_gradients_on_one_side_only_are_named(data):
    X, Y = data
    seen = []

    def loss_fn(out, y):  # the full batch is fine; the second micro-batch's loss is not
        seen.append(len(out))
        loss = F.mse_loss(out, y)
        return loss * float("inf") if len(seen) == 3 else loss

    report = check_accumulation(_mlp(), loss_fn, X, Y, 2)
    assert not report.agree and all("(accumulated)" in name for name in report.not_finite)


# --------------------------------------------------------------------------- tolerances follow the dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_a_right_loop_on_a_low_precision_model_agrees_and_a_wrong_one_does_not(data, dtype):
    X, Y = (t.to(dtype) for t in data)
    for k in (2, 4, 8):
        report = check_accumulation(_mlp(dtype), nn.MSELoss(), X, Y, k)
        assert report.agree, (k, str(report))
    wrong = check_accumulation(_mlp(dtype), nn.MSELoss(), X, Y, 2, sizes=(24, 8), scale="k")
    assert not wrong.agree and wrong.causes[0].startswith("unequal micro-batches")
    unscaled = check_accumulation(_mlp(dtype), nn.MSELoss(), X, Y, 4, scale="none")
    assert not unscaled.agree and unscaled.causes[0].startswith("missing /k scaling")


def test_float32_keeps_its_tight_tolerance(data):
    """A float32 gradient off by one part in a thousand is a difference, not rounding."""
    X, Y = data
    calls = []

    def slightly_off(out, y):
        calls.append(len(out))
        return F.mse_loss(out, y) * (1.001 if len(calls) == 2 else 1.0)

    assert not check_accumulation(_mlp(), slightly_off, X, Y, 2).agree


def test_explicit_tolerances_win(data):
    X, Y = data
    loose = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, sizes=(24, 8), scale="k", atol=10.0, rtol=10.0)
    assert loose.agree


# --------------------------------------------------------------------------- BatchNorm with one sample per micro-batch


def test_k_equal_to_the_batch_size_with_batchnorm_is_a_clear_error(data):
    X, Y = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    with pytest.raises(ValueError, match="micro-batches of 1 sample .* BatchNorm in training mode"):
        check_accumulation(model, nn.MSELoss(), X, Y, 32)
    with pytest.raises(ValueError, match="1 sample \\(1 of the 2\\)"):
        check_accumulation(model, nn.MSELoss(), X, Y, 2, sizes=(31, 1))
    model.eval()
    assert check_accumulation(model, nn.MSELoss(), X, Y, 32).agree


# --------------------------------------------------------------------------- losses over the items that count


def test_class_weighted_cross_entropy_gets_notebook_04s_lesson(data):
    X, _ = data
    torch.manual_seed(1)
    labels = torch.randint(0, 4, (32,))
    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 5.0, 0.5]))
    report = check_accumulation(_classifier(), weighted, X, labels, 4)
    assert not report.agree
    cause = report.causes[0]
    assert cause.startswith("a loss averaged over the items that count (class weights)")
    assert "reduction='sum'" in cause and "num_items_in_batch" in cause and "mixes the samples" not in cause
    total = float(weighted.weight[labels].sum())
    assert f"({total:.3g} here" in cause


def test_ignore_index_loss_gets_notebook_04s_lesson(data):
    X, _ = data
    torch.manual_seed(1)
    labels = torch.randint(0, 4, (32,))
    labels[:6] = -100  # padding concentrated in the first micro-batch
    report = check_accumulation(_classifier(), nn.CrossEntropyLoss(), X, labels, 4)
    assert not report.agree
    assert "ignore_index = -100" in report.causes[0] and "(2, 8, 8, 8)" in report.causes[0]
    assert "(26 here" in report.causes[0]
    nll = check_accumulation(_classifier(), nn.NLLLoss(ignore_index=3), X, labels.clamp(min=0), 4)
    assert not nll.agree and "ignore_index = 3" in nll.causes[0]


def test_token_level_padding_as_in_notebook_04():
    torch.manual_seed(2)
    vocab, length = 11, 8
    tokens = torch.randint(0, vocab, (2, length))
    labels = torch.randint(0, vocab, (2, length))
    labels[0, 2:] = -100

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Embedding(vocab, 16), nn.Linear(16, vocab))

        def forward(self, t):
            return self.net(t).transpose(1, 2)  # (batch, vocab, length), as CrossEntropyLoss wants it

    report = check_accumulation(TinyLM(), nn.CrossEntropyLoss(), tokens, labels, 2)
    assert not report.agree and "(2, 8)" in report.causes[0] and "(10 here" in report.causes[0]


def test_unweighted_losses_without_padding_still_agree(data):
    X, _ = data
    labels = torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(1))
    assert check_accumulation(_classifier(), nn.CrossEntropyLoss(), X, labels, 4).agree
    summed = nn.CrossEntropyLoss(weight=torch.ones(4), reduction="sum")
    assert check_accumulation(_classifier(), summed, X, labels, 4, scale="none").agree


# --------------------------------------------------------------------------- the report


def test_the_report_keeps_no_unread_gradient_copies(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2)
    assert not hasattr(report, "grads_full") and not hasattr(report, "grads_accumulated")


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(seed=1.5), TypeError, "seed"),
    (dict(atol=float("nan")), ValueError, "atol must be a finite number"),
    (dict(rtol=-1e-3), ValueError, "rtol must be a finite number"),
    (dict(atol="small"), ValueError, "atol"),
])
def test_seed_and_tolerances_are_validated(data, kwargs, error, words):
    X, Y = data
    with pytest.raises(error, match=words):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, **kwargs)


@pytest.mark.parametrize("make", [lambda t: t.to("meta"), lambda t: t.to_sparse()], ids=["meta", "sparse"])
@pytest.mark.parametrize("which", ["inputs", "targets"])
def test_meta_and_sparse_batches_are_refused_at_the_boundary(data, make, which):
    X, Y = data
    X, Y = (make(X), Y) if which == "inputs" else (X, make(Y))
    with pytest.raises(TypeError, match=f"{which} must be an ordinary dense tensor"):
        check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2)


def test_an_agreement_with_dropout_on_says_it_is_not_a_promise():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    x, y = torch.randn(12, 4), torch.randn(12, 1)
    report = check_accumulation(model, nn.MSELoss(), x, y, k=3)
    assert report.agree, "one dropout layer draws the same masks here (the CPU generator's order)"
    assert len(report.notes) == 1 and "only in distribution" in report.notes[0] and "note:" in str(report)
    model.eval()
    quiet = check_accumulation(model, nn.MSELoss(), x, y, k=3)
    assert quiet.agree and quiet.notes == [] and "note:" not in str(quiet)


# --------------------------------------------------------------------------- models as learners bring them


def test_a_gpt2_with_padding_gets_the_token_count_cause_with_dropout_off():
    from hf_models import gpt2, padded_batch, shifted_counts

    batch = padded_batch()
    report = check_accumulation(gpt2(dropout=0.0), lambda out, y: out.loss, batch, None, k=2)
    counts = shifted_counts(batch["labels"], report.sizes)
    assert not report.agree and len(report.causes) == 1 and report.notes == []
    cause = report.causes[0]
    assert cause.startswith("a loss averaged over the items that count") and "dropout" not in cause
    assert f"({counts[0]}, {counts[1]})" in cause and f"({sum(counts)} here" in cause
    assert "num_items_in_batch" in cause


def test_a_gpt2_with_padding_and_dropout_on_gets_both_causes():
    from hf_models import gpt2, padded_batch

    report = check_accumulation(gpt2(dropout=0.1), None, padded_batch(), k=2)  # None: the output's own loss
    assert not report.agree and len(report.causes) == 2
    assert report.causes[0].startswith("dropout") and report.causes[1].startswith("a loss averaged over the items")


def test_a_gpt2_without_padding_agrees_with_dropout_off_and_names_dropout_on():
    from hf_models import gpt2, padded_batch

    full = padded_batch(lengths=(12, 12, 12, 12))
    quiet = check_accumulation(gpt2(dropout=0.0), None, full, k=2)
    assert quiet.agree and quiet.notes == [], "modules in training mode with p = 0 are no dropout"
    noisy = check_accumulation(gpt2(dropout=0.1), None, full, k=2)
    assert not noisy.agree and [c.split(":")[0] for c in noisy.causes] == ["dropout"]


def test_num_items_in_batch_passed_unchanged_makes_a_gpt2_agree():
    """A value that is not batched (an int) goes to every micro-batch as it is: here the full batch's count of
    labels, with which the model sums its loss and divides by that count."""
    from hf_models import gpt2, padded_batch, shifted_counts

    batch = padded_batch()
    count = sum(shifted_counts(batch["labels"], (4,)))
    assert check_accumulation(gpt2(), None, {**batch, "num_items_in_batch": count}, k=2, scale="none").agree


def test_a_learners_own_token_loss_on_an_output_dataclass_is_judged_by_what_it_does():
    from hf_models import TinyLM, padded_batch, token_mean

    batch = padded_batch(lengths=(2, 12, 12, 12))
    labels = batch.pop("labels")
    for dropout_off in (nn.Dropout(0.0), None):  # a dropout with p = 0 in training mode is no dropout
        model = TinyLM()
        if dropout_off is not None:
            model.drop = dropout_off
        report = check_accumulation(model, lambda out, y: token_mean(out.logits, y), batch, labels, k=2)
        assert not report.agree and len(report.causes) == 1
        assert report.causes[0].startswith("a loss averaged over the items that count (labels other than -100")
        assert "(14, 24)" in report.causes[0] and "(38 here" in report.causes[0]
    both = check_accumulation(TinyLM(dropout=0.5), lambda out, y: token_mean(out.logits, y), batch, labels, k=2)
    assert [c.split(" ")[0] for c in both.causes] == ["dropout:", "a"]


def test_inputs_as_a_tuple_split_together_and_unbatched_values_pass_unchanged():
    torch.manual_seed(0)
    seen = []

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 1), nn.Linear(2, 1)

        def forward(self, x, z, offset, gain):  # offset: a tensor of another length; gain: a float
            seen.append((len(x), len(z), offset.shape, gain))
            return self.a(x) + self.b(z) + offset.sum() * gain

    x, z, y = torch.randn(10, 3), torch.randn(10, 2), torch.randn(10, 1)
    report = check_accumulation(TwoInputs(), nn.MSELoss(), (x, z, torch.ones(4), 2.0), y, k=2, sizes=(7, 3))
    assert report.agree
    assert (7, 7, torch.Size([4]), 2.0) in seen and (3, 3, torch.Size([4]), 2.0) in seen and (10, 10) == seen[0][:2]


def test_a_dict_of_keyword_inputs_agrees_when_nothing_is_padded():
    from hf_models import TinyLM, padded_batch

    batch = padded_batch(lengths=(12, 12, 12, 12, 12, 12))
    assert check_accumulation(TinyLM(), None, batch, k=3).agree


def test_models_returning_output_objects_get_clear_errors():
    from hf_models import TinyLM, padded_batch

    batch = padded_batch()
    labels = batch.pop("labels")
    with pytest.raises(ValueError, match="holds none: a Hugging Face model computes it only when given labels"):
        check_accumulation(TinyLM(), None, batch, k=2)
    with pytest.raises(TypeError, match="failed on the model's output, a TinyOutput rather than a tensor"):
        check_accumulation(TinyLM(), nn.CrossEntropyLoss(), batch, labels, k=2)
    with pytest.raises(TypeError, match="returned None"):
        check_accumulation(TinyLM(), lambda out, y: out.loss, batch, labels, k=2)
    with pytest.raises(TypeError, match="needs k"):
        check_accumulation(TinyLM(), None, {**batch, "labels": labels})
    with pytest.raises(TypeError, match="inputs must be a torch.Tensor .* a dict"):
        check_accumulation(TinyLM(), None, {"input_ids": [1, 2, 3]}, k=2)
    with pytest.raises(ValueError, match="inputs\\['attention_mask'\\] hold 1 NaN"):
        check_accumulation(TinyLM(), None, {**batch, "attention_mask": batch["attention_mask"].float().index_put_(
            (torch.tensor(0), torch.tensor(0)), torch.tensor(float("nan"))), "labels": labels}, k=2)


def test_a_long_buffers_line_is_wrapped():
    """Sixty BatchNorm buffers (a ResNet's) on lines a notebook shows whole."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)) for _ in range(20)], nn.Linear(4, 1))
    report = check_accumulation(model, nn.MSELoss(), torch.randn(8, 4), torch.randn(8, 1), k=2)
    lines = str(report).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  buffers:"))
    block = [lines[start]] + list(itertools.takewhile(lambda line: line.startswith(" " * 16), lines[start + 1:]))
    assert len(block) > 5 and all(len(line) <= 110 for line in block), block
    assert "19.1.num_batches_tracked" in str(report)


# ---------------------------------------------------------------------- the caller's batch, grad mode, random states


class _DoublesItsInput(nn.Module):
    """A model that scales its input in place before the first layer, as a learner's normalisation might."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x, z=None):
        x.mul_(2.0)
        return self.net(x) if z is None else self.net(x) + z.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("structure", ["tensor", "tuple", "dict"])
def test_a_model_that_changes_its_input_in_place_leaves_the_callers_batch_alone_and_says_so(data, structure):
    X, Y = data
    Z = torch.randn(32, 2)
    inputs = {"tensor": X, "tuple": (X, Z), "dict": {"x": X, "z": Z}}[structure]
    kept = X.clone(), Y.clone(), Z.clone()
    report = check_accumulation(_DoublesItsInput(), nn.MSELoss(), inputs, Y, k=4)
    assert torch.equal(X, kept[0]) and torch.equal(Y, kept[1]) and torch.equal(Z, kept[2]), "the caller's batch"
    text = str(report)
    assert report.agree and report.causes == [] and "mixes the samples" not in text, text
    assert len(report.notes) == 1 and "changes its input in place" in report.notes[0], report.notes
    assert "inputs" in report.notes[0] and "fresh copy" in report.notes[0] and "note:" in text


def test_a_model_that_leaves_its_input_alone_gets_no_in_place_note(data):
    X, Y = data
    report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, k=4)
    assert report.agree and report.notes == [] and "in place" not in str(report)


def test_grad_mode_left_off_by_the_caller_is_judged_and_stays_off(data):
    X, Y = data
    with torch.no_grad():
        report = check_accumulation(_mlp(), nn.MSELoss(), X, Y, k=4)
        assert not torch.is_grad_enabled(), "the caller's grad mode is restored"
    assert report.agree, str(report)
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)  # as a kernel left it after an evaluation cell
    try:
        wrong = check_accumulation(_mlp(), nn.MSELoss(), X, Y, 2, sizes=(24, 8), scale="k")
        assert not torch.is_grad_enabled()
        with pytest.raises(ValueError, match="not a scalar"):
            check_accumulation(_mlp(), nn.MSELoss(reduction="none"), X, Y, 2)
        assert not torch.is_grad_enabled(), "restored also when the check raises"
    finally:
        torch.set_grad_enabled(previous)
    assert not wrong.agree and wrong.causes[0].startswith("unequal micro-batches")
    with torch.inference_mode():  # a kernel inside an evaluation block
        assert check_accumulation(_mlp(), nn.MSELoss(), X, Y, k=4).agree
        assert torch.is_inference_mode_enabled()


class _NoisyModel(nn.Module):
    """Draws from torch's and Python's global generators in forward (noise injection, random augmentation)."""

    def __init__(self, calls, fail_on_call=None):
        super().__init__()
        torch.manual_seed(0)
        self.net, self.fail_on_call = nn.Linear(3, 1), fail_on_call
        self.count = lambda: calls.append(1) or len(calls)  # a function: the check's deep copies share it

    def forward(self, x):
        if self.count() == self.fail_on_call:
            raise RuntimeError("this model fails on purpose")
        return self.net(x + 0.01 * torch.randn_like(x)) * (1.0 + 1e-3 * random.random())


@pytest.mark.parametrize("fail_on_call", [None, 2], ids=["returns", "raises"])
def test_torch_and_python_random_state_are_left_as_found(data, fail_on_call):
    X, Y = data
    calls = []
    model = _NoisyModel(calls, fail_on_call)
    torch.manual_seed(123)
    random.seed(123)
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    if fail_on_call is None:
        check_accumulation(model, nn.MSELoss(), X, Y, k=2)
    else:
        with pytest.raises(RuntimeError, match="fails on purpose"):
            check_accumulation(model, nn.MSELoss(), X, Y, k=2)
    assert len(calls) >= 2
    assert torch.equal(torch.get_rng_state(), torch_state), "torch's global random state"
    assert random.getstate() == python_state, "Python's global random state"


def test_tf32_is_off_while_the_check_runs_and_the_callers_settings_come_back():
    """On a GPU cuDNN's default TF32 would make a right loop differ from the full batch by ~1e-3: the check runs
    in full float32 and puts the caller's settings back (on the CPU no note: TF32 changes nothing there)."""
    seen = []

    class Spy(nn.Linear):
        def forward(self, x):
            seen.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
                         torch.get_float32_matmul_precision()))
            return super().forward(x)

    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
              torch.get_float32_matmul_precision())
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        report = check_accumulation(Spy(3, 1), nn.MSELoss(), torch.randn(8, 3), torch.randn(8, 1), k=2)
        assert report.agree and not any("TF32" in note for note in report.notes)
        assert seen and set(seen) == {(False, False, "highest")}
        assert (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()) == (True, "high")
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before[0], before[1]
        torch.set_float32_matmul_precision(before[2])
