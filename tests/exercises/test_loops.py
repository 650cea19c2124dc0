"""Watching a learner's loop (the observation that notebook 04's, 05's and 07's checks share): what
``record_passes`` sees, and the hint a loop that does not accumulate gets."""

import torch
from torch import nn

from autograd_lab.exercises.loops import pass_mistake, record_passes, wide_pass_mistake


def test_record_passes_counts_graphs_per_backward_and_ignores_gradient_free_forwards():
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


def test_record_passes_delimits_autograd_grad_calls_too():
    """One torch.autograd.grad call is one gradient computation, though it never reaches .grad."""
    model = nn.Linear(3, 1)
    params = list(model.parameters())
    xs = [torch.randn(4, 3) for _ in range(3)]
    with record_passes(model) as log:
        for x in xs:
            torch.autograd.grad(model(x).pow(2).mean(), params)
        torch.autograd.grad(sum(model(x).pow(2).mean() for x in xs), params)
        (model.weight ** 2).sum().backward()  # a penalty's own backward goes through no output: not a pass
        sum(model(x).pow(2).mean() for x in xs).backward()
    assert log.outputs_per_backward == [1, 1, 1, 3, 3]
    assert log.pass_kinds == ["torch.autograd.grad call"] * 4 + ["backward()"]
    assert log.widest_pass_kind == "torch.autograd.grad call"


def _log_of(losses_per_backward):
    """The PassLog of backward passes that each go through ``n`` micro-batches' outputs."""
    model = nn.Linear(3, 1)
    with record_passes(model) as log:
        for n in losses_per_backward:
            sum(model(torch.randn(4, 3)).pow(2).mean() for _ in range(n)).backward()
    return log


def test_one_backward_through_one_micro_batch_at_a_time_is_no_mistake():
    log = _log_of([1, 1, 1])
    assert wide_pass_mistake("With k = 3", log) is None
    assert pass_mistake("With k = 3", log, micro_batches=3, largest=4, forwards=3) is None


def test_one_backward_through_several_micro_batches_is_named_with_its_fix():
    fb = wide_pass_mistake("With k = 3", _log_of([3]))
    assert fb.status == "wrong" and fb.message.startswith("With k = 3, one backward() went through the forward "
                                                          "passes of 3 micro-batches")
    assert "accumulation saves nothing" in fb.message and "right after its forward pass" in fb.message


def test_the_most_basic_mistake_is_named_first():
    log = _log_of([3])  # three forward passes of 4 samples, one backward() through all three
    assert "3 micro-batches" in pass_mistake("s", log, micro_batches=3, largest=4, forwards=3).message
    assert "ran the model 3 times" in pass_mistake("s", log, micro_batches=2, largest=4, forwards=3).message
    assert "ran on 4 samples at once" in pass_mistake("s", log, micro_batches=3, largest=2, forwards=3).message


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
                                      bos_token_id=0, eos_token_id=0))


def test_record_passes_reads_a_transformers_loop_right():
    """GPT-2 returns a ModelOutput and takes keyword arguments: each forward is still seen, with its batch size,
    and each backward through one micro-batch's loss counts that micro-batch once (loss and logits are one)."""
    model = _gpt2()
    ids = torch.randint(0, 100, (4, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    micro_batches = [dict(input_ids=ids[i:i + 2], attention_mask=mask[i:i + 2], labels=ids[i:i + 2]) for i in (0, 2)]
    with record_passes(model) as log:
        for batch in micro_batches:  # a correct two-micro-batch loop
            (model(**batch).loss / 2).backward()
        with torch.no_grad():
            model(**micro_batches[0])
        sum(model(**batch).loss for batch in micro_batches).backward()  # one backward through both graphs
    assert log.forward_sizes == [2, 2, 2, 2] and log.untracked_forwards == 1
    assert log.outputs_per_backward == [1, 1, 2] and log.pass_kinds == ["backward()"] * 3
    assert pass_mistake("With k = 2", _first(log, 2), micro_batches=2, largest=2, forwards=2) is None


def _first(log, passes):
    """The log of the first ``passes`` forward and backward passes only."""
    from autograd_lab.exercises.loops import PassLog

    return PassLog(forward_sizes=log.forward_sizes[:passes], outputs_per_backward=log.outputs_per_backward[:passes],
                   pass_kinds=log.pass_kinds[:passes])


def test_record_passes_sees_outputs_in_dataclasses_and_tuples():
    from dataclasses import dataclass

    @dataclass
    class Out:
        logits: torch.Tensor
        extra: tuple

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            y = self.lin(x)
            return Out(y, (y.sum(), "note"))

    model = Model()
    with record_passes(model) as log:
        for _ in range(2):
            model(torch.randn(5, 3)).logits.pow(2).mean().backward()
    assert log.forward_sizes == [5, 5] and log.outputs_per_backward == [1, 1]


def test_the_watcher_finds_every_tensor_an_operation_takes_and_gives():
    """Its own walk of an operation's arguments and results finds what torch's general tree walk finds."""
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    from autograd_lab.exercises.loops import _tensors_in

    missed = []

    class Compare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tree in ((args, kwargs or {}), out):
                ids = {id(t) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)}
                if {id(t) for t in _tensors_in(tree)} != ids:
                    missed.append(str(func))
            return out

    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(5, 4)
    with Compare():
        y = torch.nn.functional.linear(x, w)
        parts = y.split(2)
        z = torch.cat(parts, dim=0)[torch.tensor([0, 2]), None]
        z = z.index_put((torch.tensor([1]),), torch.tensor(1.0))
        torch.nn.functional.mse_loss(z.sum(-1), torch.zeros(2)).backward()
    assert not missed, missed
