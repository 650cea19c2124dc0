"""Notebooks 04-06: each general claim, tried on the boundary case that narrows it.

Every test here pairs a claim the notebooks make with a case where the plain version of it fails, so that a
notebook that drops the boundary (or a PyTorch release that moves it) shows up as a red test. The models are
written here independently of the notebooks'.
"""

import math

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm
from torch.utils.data import DistributedSampler

import autograd_lab as lab


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ 04: "saves 1/k of the saved tensors"


class LowRankMerged(nn.Module):
    """A frozen weight plus a trainable low-rank update, merged in every forward pass."""

    def __init__(self, n_in, n_out, rank=2):
        super().__init__()
        self.base = nn.Parameter(torch.randn(n_out, n_in), requires_grad=False)
        self.down = nn.Parameter(torch.randn(rank, n_in))
        self.up = nn.Parameter(torch.randn(n_out, rank))

    def forward(self, x):
        return x @ (self.base + self.up @ self.down).T


def peak_saved(model, x, k):
    peak = 0
    for xb in x.chunk(k):
        with lab.SavedTensors(exclude=[xb, *model.parameters()]) as saved:
            loss = model(xb).square().mean() / k
        loss.backward()
        peak = max(peak, saved.bytes)
    return peak


def test_plain_layers_save_exactly_one_over_k():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 4))
    x = torch.randn(256, 32)
    full = peak_saved(model, x, 1)
    assert all(full == k * peak_saved(model, x, k) for k in (2, 4, 8, 16))


def test_a_merged_low_rank_weight_is_saved_again_by_every_micro_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), LowRankMerged(128, 128), nn.Tanh(), LowRankMerged(128, 4))
    x = torch.randn(256, 32)
    peaks = {k: peak_saved(model, x, k) for k in (1, 2, 4, 8, 16)}
    merged = (128 * 128 + 4 * 128) * 4  # the merged weights of both low-rank layers, float32
    activations = peaks[1] - merged
    for k, peak in peaks.items():
        assert peak == activations // k + merged, k  # the activations' 1/k plus the weights, whatever k
    assert peaks[1] / peaks[16] < 16 / 2


def test_weight_norm_also_keeps_a_part_that_does_not_shrink():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), weight_norm(nn.Linear(128, 128)), nn.Tanh(), nn.Linear(128, 4))
    x = torch.randn(256, 32)
    ratio = peak_saved(model, x, 1) / peak_saved(model, x, 16)
    assert 1 < ratio < 16 / 1.5


# ------------------------------------------------------------------ 06: exact metrics with DistributedSampler


def repeat_weights(n, world, rank, length):
    """1 for a real sample, 0 for a repeat: rank r holds positions r, r + world, ... of the padded list."""
    return torch.tensor([float(rank + j * world < n) for j in range(length)])


def all_reduced_mean(values, n, world, shuffle, weighted, drop_last=False):
    total = count = 0.0
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=3,
                                     drop_last=drop_last)
        idx = list(sampler)
        w = repeat_weights(n, world, rank, len(idx)) if weighted else torch.ones(len(idx))
        total += float((w * values[idx]).sum())
        count += float(w.sum())
    return total / count


@pytest.mark.parametrize("n, world", [(5, 2), (7, 3), (10, 4), (13, 8)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_padding_counts_repeats_and_zero_weights_make_the_metric_exact(n, world, shuffle):
    values = torch.arange(1.0, n + 1) ** 2  # distinct per-sample errors, so a repeat always shows
    exact = float(values.mean())
    assert not math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=False), exact)
    assert not math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=False, drop_last=True), exact)
    assert math.isclose(all_reduced_mean(values, n, world, shuffle, weighted=True), exact, rel_tol=1e-12)


def test_the_zero_weights_mark_exactly_one_copy_of_each_sample_as_real():
    n, world = 11, 4
    seen = []
    for rank in range(world):
        idx = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=1))
        seen += [i for i, w in zip(idx, repeat_weights(n, world, rank, len(idx)).tolist()) if w == 1.0]
    assert sorted(seen) == list(range(n))


def test_the_notebooks_five_samples():
    xs = torch.tensor([4.0, 2.0, 1.0, 3.0, 5.0])  # |y - w x| at w = 1 is x itself
    assert all_reduced_mean(xs, 5, 2, shuffle=False, weighted=False) == pytest.approx(19 / 6)
    assert all_reduced_mean(xs, 5, 2, shuffle=False, weighted=True) == pytest.approx(3.0)
