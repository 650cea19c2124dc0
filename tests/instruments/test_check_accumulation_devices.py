"""check_accumulation where devices differ: a backward that does not repeat itself from run to run (atomic
additions on a GPU), judged at the precision it repeats itself and named; and conv nets and a ResNet, judged
right on every device (on CUDA with cuDNN's TF32 on, as PyTorch sets it by default).

A CPU repeats every backward, so the run-to-run noise is made here: a custom autograd Function whose backward
adds a relative noise drawn from a generator of its own (never reseeded, so each run draws anew), or a forward
pass that adds such noise. The device cases run on CUDA with ``make test-cuda`` (tests/conftest.py).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograd_lab.accumulation import check_accumulation
from tools.architectures import ResNet18

_NOISE = torch.Generator().manual_seed(1)  # drawn from by every run: the runs differ as atomics' orders do
_RELATIVE_NOISE = 1e-3  # far above the float32 tolerance (rtol 1e-4): the check must allow for it


class Jitter(torch.autograd.Function):
    """The identity, whose backward rounds as if its additions came in another order each run."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * (1 + _RELATIVE_NOISE * torch.randn(grad.shape, generator=_NOISE, dtype=grad.dtype))


class Tokens(nn.Module):
    """Token ids through an embedding, a gather of two positions and a jittery backward, then a linear head."""

    def __init__(self, pick=lambda h: h.index_select(1, torch.tensor([0, 2]))):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head, self.pick = nn.Embedding(10, 8), nn.Linear(8, 1), pick

    def forward(self, tokens):
        return self.head(Jitter.apply(self.pick(self.emb(tokens)).mean(1)))


@pytest.fixture(autouse=True)
def same_noise_whatever_runs_first():
    """Each test draws the same noise whichever tests ran before it (its runs still draw anew, one after another)."""
    _NOISE.manual_seed(1)


@pytest.fixture
def tokens():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 10, (32, 3), generator=g), torch.randn(32, 1, generator=g)


def test_a_backward_that_does_not_repeat_itself_is_judged_at_its_own_precision_and_named(tokens):
    t, y = tokens
    report = check_accumulation(Tokens(), nn.MSELoss(), t, y, k=4)
    assert report.agree and report.grads_agree and report.causes == [], str(report)
    assert report.run_to_run is not None and report.max_diff <= 4 * report.run_to_run
    assert report.max_diff > 1e-5, "the noise exceeds the float32 tolerance: without it the verdict would be wrong"
    named = "; ".join(report.nondeterministic)
    assert "index_add" in named and "IndexSelectBackward0" in named
    assert "embedding backward" in named and "EmbeddingBackward0" in named
    assert "custom autograd Functions" in named and "JitterBackward" in named
    text = str(report)
    assert "AGREE with the full batch as closely as it agrees with itself" in text
    assert "differs from itself by up to" in text and "the only difference" in text
    assert "torch.use_deterministic_algorithms(True)" in text and "IS the full-batch step" in text


def test_with_an_optimizer_the_parameters_are_judged_against_their_own_run_to_run_noise(tokens):
    t, y = tokens
    report = check_accumulation(Tokens(), nn.MSELoss(), t, y, k=2, optimizer=lambda p: torch.optim.Adam(p, lr=1e-3))
    assert report.agree and report.params_agree and report.run_to_run is not None, str(report)


def test_a_real_mistake_is_still_found_under_the_noise_and_the_noise_is_told_apart(tokens):
    t, y = tokens
    report = check_accumulation(Tokens(), nn.MSELoss(), t, y, k=2, sizes=(24, 8), scale="k")
    assert not report.agree and report.causes[0].startswith("unequal micro-batches"), str(report)
    assert report.max_diff > 100 * report.run_to_run
    assert any("larger than that noise" in note for note in report.notes)


def test_a_forward_pass_with_fresh_noise_and_no_suspect_in_the_graph_is_told_so(tokens):
    """A second kind of model: the noise enters forward (as a learner's own random draw outside torch's generator
    might), and no operation of the table is in the graph."""
    _, y = tokens
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(2))

    class NoisyInput(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

        def forward(self, x):
            return self.net(x * (1 + _RELATIVE_NOISE * torch.randn(x.shape, generator=_NOISE)))

    report = check_accumulation(NoisyInput(), nn.MSELoss(), x, y, k=4)
    assert report.agree and report.run_to_run is not None and report.nondeterministic == [], str(report)
    assert "none of the usual suspects is in the graph" in str(report)


@pytest.mark.parametrize("pick, words, grad_fn", [
    (lambda h: h[:, torch.tensor([0, 2])], "index_put_ with accumulate=True", "IndexBackward0"),
    (lambda h: h.gather(1, torch.zeros(h.shape[0], 2, h.shape[2], dtype=torch.long)), "scatter_add", "GatherBackward0"),
    (lambda h: F.interpolate(h.transpose(1, 2), size=6, mode="linear").transpose(1, 2), "interpolate's backward",
     "UpsampleLinear1DBackward0"),
    (lambda h: F.adaptive_avg_pool1d(h.transpose(1, 2), 2).transpose(1, 2), "pooling backward",
     "AdaptiveAvgPool2DBackward0"),
    (lambda h: F.conv1d(h.transpose(1, 2), torch.ones(8, 8, 1) / 8).transpose(1, 2), "convolution backward",
     "ConvolutionBackward0"),
], ids=["indexing", "gather", "interpolate", "adaptive pooling", "convolution"])
def test_each_kernel_that_adds_with_atomics_on_a_gpu_is_named_by_its_grad_fn(tokens, pick, words, grad_fn):
    """Asked for equality to the last bit (atol = rtol = 0), a right loop differs by rounding, and the noise check
    runs every time: judged at the precision the full batch repeats itself, it agrees, and the kernels are named."""
    t, y = tokens
    report = check_accumulation(Tokens(pick), nn.MSELoss(), t, y, k=4, atol=0.0, rtol=0.0)
    assert report.agree and report.run_to_run is not None, str(report)
    assert any(words in kernel and grad_fn in kernel for kernel in report.nondeterministic), report.nondeterministic


def test_a_repeatable_model_is_run_once_more_only_to_find_it_repeats_and_gets_no_noise_note():
    torch.manual_seed(0)
    x, y = torch.randn(10, 3), torch.randn(10, 1)
    report = check_accumulation(nn.Linear(3, 1), nn.MSELoss(), x, y, 2, sizes=(7, 3), scale="k")
    assert not report.agree and report.run_to_run is None and report.nondeterministic == []
    assert not any("differs from itself" in note for note in report.notes)


# --------------------------------------------------------------------------- the same verdicts on every device


def _conv_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 1))


@pytest.fixture
def tf32_as_pytorch_sets_it():
    """cuDNN convolutions in TF32, PyTorch's default, and the caller's settings back after the test."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("make, loss, k", [
    (_conv_net, nn.MSELoss(), 4),
    (lambda: ResNet18().eval(), nn.CrossEntropyLoss(), 2),  # eval: its BatchNorm layers mix no samples
], ids=["conv net", "ResNet-18"])
def test_a_right_loop_on_a_conv_net_agrees_on_every_device(device, tf32_as_pytorch_sets_it, make, loss, k):
    g = torch.Generator().manual_seed(0)
    images = torch.randn(16, 3, 32, 32, generator=g).to(device)
    model = make().to(device)
    targets = (torch.randn(16, 1, generator=g) if isinstance(loss, nn.MSELoss) else torch.arange(16) % 10).to(device)
    report = check_accumulation(model, loss, images, targets, k=k)
    assert report.agree and report.causes == [], str(report)
    assert any("TF32 was switched off" in note for note in report.notes) == (device.type == "cuda")
    assert torch.backends.cudnn.allow_tf32, "the caller's setting is back"
    wrong = check_accumulation(model, loss, images, targets, k=2, sizes=(12, 4), scale="k")
    assert not wrong.agree and wrong.causes[0].startswith("unequal micro-batches"), str(wrong)


def test_kernels_that_may_add_with_atomics_get_the_right_verdict_on_every_device(device):
    """Real index_add, gather and embedding backward (atomic additions on CUDA): a right loop agrees, whether or
    not this run's additions came in another order; when they did, the report names them."""
    g = torch.Generator().manual_seed(0)
    t, y = torch.randint(0, 50, (64, 6), generator=g), torch.randn(64, 1, generator=g)

    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.head = nn.Embedding(50, 32), nn.Linear(32, 1)

        def forward(self, t):
            h = self.emb(t).index_select(1, torch.tensor([0, 2, 4], device=t.device))
            return self.head(h.gather(1, torch.zeros_like(h[:, :2], dtype=torch.long)).mean(1))

    report = check_accumulation(Lookup().to(device), nn.MSELoss(), t.to(device), y.to(device), k=4)
    assert report.agree, str(report)
    if report.run_to_run is not None:
        assert any("embedding backward" in kernel for kernel in report.nondeterministic), report.nondeterministic
