"""check_accumulation at its boundary and where the course's lessons apply (issue 14 part 5, issue 22 item 4).

The basic verdicts (plain MLP, unequal micro-batches, missing scaling, BatchNorm, dropout) are tested in
tests/notebooks/test_gradient_accumulation.py; this file covers the inputs a learner's own project passes.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograd_lab.accumulation import AccumulationReport, check_accumulation


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


# --------------------------------------------------------------------------- record_passes (used by the checks)


def test_record_passes_counts_graphs_per_backward_and_ignores_gradient_free_forwards():
    from autograd_lab.accumulation import record_passes

    model = nn.Linear(3, 1)
    xs = [torch.randn(4, 3) for _ in range(3)]
    with record_passes(model) as log:
        for x in xs:  # accumulation: one graph per backward
            model(x).pow(2).mean().backward()
            with torch.no_grad():
                model(x)
        sum(model(x).pow(2).mean() for x in xs).backward()  # one backward over three graphs
        torch.cat([model(x) for x in xs]).pow(2).mean().backward()
    assert log.forward_sizes == [4] * 9 and log.untracked_forwards == 3
    assert log.outputs_per_backward == [1, 1, 1, 3, 3] and log.most_outputs_per_backward == 3
    model(xs[0]).sum().backward()  # the hooks are gone after the block
    assert len(log.forward_sizes) == 9 and len(log.outputs_per_backward) == 5


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
