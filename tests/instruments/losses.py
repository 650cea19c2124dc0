"""Graphs of every shape for the graph tests: notebook 03's looped loss (every sample's path meets at the shared
weight), the same loss summed one sample at a time (a deep chain of additions), on n points."""

import torch
from torch import nn


def seed_model():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model


def looped_loss(model, x, y):  # notebook 03's looped loss
    losses = []
    for k in range(len(y)):
        losses.append((y[k] - model(x[k])) ** 2)
    return torch.stack(losses).mean()


def summed_loss(model, x, y):  # the same loss summed one sample at a time: a deep chain of additions
    total = 0
    for k in range(len(y)):
        total = total + (y[k] - model(x[k])) ** 2
    return total / len(y)


def data(n):
    x = torch.linspace(-1, 1, n).unsqueeze(1)
    return x, 2 * x.squeeze(1)
