"""Notebook 07: the facts it states, re-derived here on cases of our own, and its script on two real processes.

- Schedules: stepped per micro-batch a schedule runs n / ceil(n / k) times too fast (k only when k divides n) and
  is spent after about the first 1 / k of the epoch (past its peak at the first update only for some n and k);
  sized for micro-batches and stepped per update, it ends the epoch at (n - ceil(n / k)) / (n - warmup) of its
  peak, far from the peak at small k.
- Tokens: the update's real tokens, counted over micro-batches and ranks, times every divisor still to come --
  the world size for DDP's mean, and k more with accelerate's backward(), which divides by k even in a short group.
  A Hugging Face model's loss, unless given num_items_in_batch, is the mean over its micro-batch's real tokens;
  a causal LM's over the shifted labels, labels[..., 1:].
- A prepared optimizer skips step() and zero_grad() inside accumulate() unless sync_gradients is true.
- accelerate's prepared scheduler steps on a sync step, whether or not the optimizer stepped, num_processes times
  (once with split_batches=True): inside accumulate() only every k-th call moves it, outside it every call does.
  A schedule sized in updates therefore runs num_processes times too fast, inside accumulate() or after it; sized
  in updates x num_processes it gives the same rates exactly where it depends on step / total alone.
- bfloat16: a bfloat16 .grad loses precision with every micro-batch added; with grad_dtype = float32 autograd
  keeps the sum in float32. SGD (and RMSprop, Adagrad) step with that float32 .grad; Adam and AdamW refuse it
  and step once it is converted with .to(p.dtype) (grad_dtype set to None first).
- The two-process part runs the training script that notebooks/07_accumulation_in_practice.ipynb writes with its
  %%writefile cells, once, and checks what the ranks recorded against references computed here. The script names
  its runs neutrally (the notebook asks to predict them): RUNS and WAYS below say what each one is.
"""

from __future__ import annotations

import itertools
import json
import math
import runpy
import warnings
from pathlib import Path

import ddp_probe
import pytest
import torch
import torch.nn.functional as F

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_accumulation_in_practice.ipynb"
SCRIPT_NAME = "scratch-07/train_tokens.py"  # the script the notebook writes, by path (no chdir)
# what each of the script's token runs is (model loop, factor on the summed loss) -> its name in the script
RUNS = {"own, / N of the rank": "run A", "own, x world / N": "run B", "accelerate, x world / N": "run C",
        "accelerate, x k x world / N": "run D"}
# what each of its schedules under accelerate is (sized in, where it steps; 4 updates, k = 4) -> its name
WAYS = {"4 steps, in accumulate()": "way 1", "4 steps, after accumulate()": "way 2",
        "4 x world steps, in accumulate()": "way 3", "4 steps, split_batches=True": "way 4"}


# --------------------------------------------------------------------------- schedules


def _used_lrs(n, k, per_micro_batch, factor):
    """The learning rate each update used, the scheduler stepped per update or right after each backward()."""
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    used = []
    for i in range(n):
        p.grad = torch.ones(2)
        if per_micro_batch:
            sched.step()
        if (i + 1) % k == 0 or i + 1 == n:
            used.append(opt.param_groups[0]["lr"])
            opt.step()
            if not per_micro_batch:
                sched.step()
    return used


@pytest.mark.parametrize("n, k", [(22, 4), (50, 8), (9, 3), (5, 1)])
def test_a_scheduler_stepped_per_update_follows_the_schedule_and_per_micro_batch_runs_k_times_faster(n, k):
    def factor(step):
        return 1 / (1 + step)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        right, fast = _used_lrs(n, k, False, factor), _used_lrs(n, k, True, factor)
    updates = math.ceil(n / k)
    assert right == [factor(u) for u in range(updates)]
    assert fast == [factor(min(u * k + k, n)) for u in range(updates)]
    assert fast != right


@pytest.mark.parametrize("n, k, off_by", [(22, 4, 22 / 6), (24, 4, 4.0), (9, 8, 4.5), (50, 8, 50 / 7)])
def test_a_schedule_stepped_per_micro_batch_is_off_by_n_over_ceil_n_over_k_which_is_k_only_if_k_divides_n(n, k, off_by):
    steps = {}
    for per_micro_batch in (False, True):
        p = torch.nn.Parameter(torch.zeros(1))
        sched = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([p], lr=1.0), lambda step: 1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(n):
                if per_micro_batch or (i + 1) % k == 0 or i + 1 == n:
                    sched.step()
        steps[per_micro_batch] = sched.last_epoch               # the schedule's steps taken in one epoch
    assert steps[False] == math.ceil(n / k) and steps[True] == n
    assert steps[True] / steps[False] == pytest.approx(off_by)
    assert (off_by == k) == (n % k == 0) and off_by <= k


def _warmup_then_decay(updates, warmup=2):
    """The notebook's schedule: a linear warm-up of (u + 1) / warmup, then a linear decay to 0."""
    return lambda u: (u + 1) / warmup if u < warmup else max(0.0, (updates - u) / max(updates - warmup, 1))


@pytest.mark.parametrize("n, k, above_0, mirror_end", [(22, 4, 1, 0.85), (40, 2, 9, 0.553), (10, 3, 1, 0.875)])
def test_how_much_of_the_epoch_each_slip_spoils_depends_on_n_and_k(n, k, above_0, mirror_end):
    """Stepped per micro-batch the schedule is spent after ceil(n / k) micro-batches: about the first 1 / k of the
    updates run above 0. Sized for n and stepped per update, the epoch ends at 0.85 of the peak for n = 22, k = 4,
    but at 0.55 for n = 40, k = 2: 'near its peak' holds only for larger k."""
    updates = math.ceil(n / k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = _used_lrs(n, k, True, _warmup_then_decay(updates))
    assert sum(lr > 0 for lr in fast) == above_0
    assert above_0 <= math.ceil(updates / k)
    assert _warmup_then_decay(n)(updates - 1) == pytest.approx(mirror_end, abs=1e-3)


def test_the_first_update_runs_past_the_peak_only_for_some_n_and_k():
    """Stepped per micro-batch: n = 22, k = 4, the first update already uses a decayed rate; n = 40, k = 2, the peak."""
    first = {}
    for n, k in [(22, 4), (40, 2)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first[n, k] = _used_lrs(n, k, True, _warmup_then_decay(math.ceil(n / k)))[0]
    assert first[22, 4] < 1 and first[40, 2] == 1


def test_pytorch_warns_only_about_the_order_of_the_first_scheduler_step():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _used_lrs(12, 4, True, lambda step: 1.0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "lr_scheduler.step()" in messages[0] and "before" in messages[0]


# --------------------------------------------------------------------------- token counts


def _padded(seed, sequences=12, length=7, vocab=9):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (sequences, length), generator=g)
    labels = torch.randint(vocab, (sequences, length), generator=g)
    labels[torch.arange(length) >= torch.randint(1, length + 1, (sequences, 1), generator=g)] = -100
    return tokens, labels


def _loss_sum(model, tokens, labels):
    return F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


def _token_grad(model, tokens, labels, divisor):
    model.zero_grad()
    (_loss_sum(model, tokens, labels) / divisor).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _lm():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Embedding(9, 5), torch.nn.Linear(5, 9))


def test_a_causal_lm_loss_is_the_mean_over_the_shifted_labels_so_its_real_tokens_are_counted_from_position_1():
    """transformers' ForCausalLMLoss drops each sequence's first label (nothing predicts it); its Trainer counts
    labels[..., 1:] != -100. Counting all the labels adds one per sequence whose first label is real."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.loss.loss_utils import ForCausalLMLoss

    tokens, labels = _padded(seed=9, sequences=6)
    labels[0, 0] = -100                                          # one sequence whose first label is padding
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=9, n_positions=16, n_embd=8, n_layer=1, n_head=2))
    out = model(input_ids=tokens, labels=labels)
    shifted = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100,
                              reduction="sum")
    shifted_count, all_count = (labels[..., 1:] != -100).sum(), (labels != -100).sum()
    assert torch.allclose(out.loss, shifted / shifted_count, atol=1e-6)
    assert torch.allclose(ForCausalLMLoss(out.logits, labels, 9), out.loss, atol=1e-6)
    assert all_count - shifted_count == (labels[:, 0] != -100).sum() == 5
    assert not torch.allclose(out.loss, shifted / all_count, atol=1e-6)
    text = "".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"])
    assert "`(labels[..., 1:] != -100).sum()`" in text


def test_streamed_groups_divided_by_their_prefetched_token_count_give_the_one_batch_gradient():
    tokens, labels = _padded(seed=4)
    model = _lm()
    full = _token_grad(model, tokens, labels, (labels != -100).sum())
    stream = iter(torch.utils.data.DataLoader(list(zip(tokens, labels)), batch_size=3))
    group = list(itertools.islice(stream, 4))                  # prefetched: the whole update, 4 micro-batches
    n = sum(int((lbl != -100).sum()) for _, lbl in group)
    summed = sum(_token_grad(model, t, lbl, n) for t, lbl in group)
    naive = sum(_token_grad(model, t, lbl, (lbl != -100).sum() * len(group)) for t, lbl in group)
    assert torch.allclose(summed, full, atol=1e-6)
    assert (naive - full).norm() / full.norm() > 0.01


def test_ddp_mean_of_rank_gradients_needs_the_all_rank_count_times_the_world_size():
    tokens, labels = _padded(seed=5)
    model, world = _lm(), 3
    full = _token_grad(model, tokens, labels, (labels != -100).sum())
    shares = [torch.arange(r, len(tokens), world) for r in range(world)]
    n_all = int((labels != -100).sum())

    def ddp(divisor_of):                                        # each rank's gradient, then DDP's mean
        return torch.stack([_token_grad(model, tokens[s], labels[s], divisor_of(s)) for s in shares]).mean(0)

    right = ddp(lambda s: n_all / world)
    per_rank = ddp(lambda s: (labels[s] != -100).sum())
    assert len({int((labels[s] != -100).sum()) for s in shares}) > 1
    assert torch.allclose(right, full, atol=1e-6)
    assert (per_rank - full).norm() / full.norm() > 1e-3


@pytest.fixture
def accelerator():
    """A one-process Accelerator with k = 4 (accelerate's state is process-wide: it is reset afterwards)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    yield Accelerator(gradient_accumulation_steps=4, cpu=True)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_accelerate_backward_divides_by_k_even_in_a_short_group_so_the_rule_multiplies_by_k(accelerator):
    tokens, labels = _padded(seed=6, sequences=6)
    k, world = accelerator.gradient_accumulation_steps, accelerator.num_processes
    micro = list(zip(tokens.split(3), labels.split(3)))          # a short group: 2 micro-batches, k = 4
    assert len(micro) < k and world == 1
    n = int((labels != -100).sum())
    full = _token_grad(_lm(), tokens, labels, n)

    def through_accelerate(factor):
        model = accelerator.prepare(_lm())
        for t, lbl in micro:
            accelerator.backward(_loss_sum(model, t, lbl) * factor)
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    assert torch.allclose(through_accelerate(k * world / n), full, atol=1e-6)            # the rule
    assert torch.allclose(through_accelerate(world / n), full / k, atol=1e-6)            # the own loop's: 1 / k
    assert torch.allclose(through_accelerate(len(micro) * world / n), full * len(micro) / k, atol=1e-6)


def _prepared_schedule(accelerator):
    model = accelerator.prepare(_lm())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer, scheduler = accelerator.prepare(optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: 1 / (update + 1)))
    return model, optimizer, scheduler


def test_accelerate_steps_a_prepared_scheduler_on_every_call_outside_accumulate_without_an_optimizer_step(
        accelerator):
    """Its rule's second case: one process, one step per call; nothing asks whether the optimizer stepped."""
    _, _, scheduler = _prepared_schedule(accelerator)
    lrs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                        # PyTorch's order warning: no optimizer step here
        for _ in range(3):
            lrs.append(scheduler.get_last_lr()[0])
            scheduler.step()
    assert accelerator.num_processes == 1 and lrs == pytest.approx([0.1, 0.05, 0.1 / 3])


def test_inside_accumulate_a_scheduler_stepped_per_micro_batch_moves_only_on_every_kth(accelerator):
    model, optimizer, scheduler = _prepared_schedule(accelerator)
    k, lrs = accelerator.gradient_accumulation_steps, []
    for _ in range(2 * k + 1):
        with accelerator.accumulate(model):
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    assert lrs == pytest.approx([0.1] * k + [0.05] * k + [0.1 / 3])


def test_inside_accumulate_a_prepared_optimizer_skips_step_and_zero_grad_unless_sync_gradients(accelerator):
    """accelerate/optimizer.py: AcceleratedOptimizer.step() and zero_grad() act only when sync_gradients is true."""
    model, optimizer, _ = _prepared_schedule(accelerator)
    tokens, labels = _padded(seed=8, sequences=8)
    k, moved, grads_kept = accelerator.gradient_accumulation_steps, [], []
    for t, lbl in zip(tokens.split(1), labels.split(1)):
        with accelerator.accumulate(model):
            before = [p.detach().clone() for p in model.parameters()]
            accelerator.backward(_loss_sum(model, t, lbl))
            optimizer.step()
            optimizer.zero_grad()
            moved.append(any(not torch.equal(b, p) for b, p in zip(before, model.parameters())))
            grads_kept.append(all(p.grad is not None for p in model.parameters()))
    assert len(moved) == 2 * k
    assert moved == [i % k == k - 1 for i in range(2 * k)]
    assert grads_kept == [i % k != k - 1 for i in range(2 * k)]


def test_a_prepared_scheduler_does_not_step_when_the_optimizer_reports_a_skipped_step(accelerator):
    """What a GradScaler overflow sets (AcceleratedOptimizer.step_was_skipped reads _is_overflow)."""
    _, optimizer, scheduler = _prepared_schedule(accelerator)
    optimizer._is_overflow = True
    assert optimizer.step_was_skipped
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.1)
    optimizer._is_overflow = False
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.05)


# --------------------------------------------------------------------------- bfloat16 sums


def test_bfloat16_keeps_8_significant_bits_and_float32_24():
    assert [1 - math.log2(torch.finfo(t).eps) for t in (torch.bfloat16, torch.float32)] == [8, 24]


def test_bfloat16_sums_lose_precision_with_k_and_float32_sums_do_not():
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(1024, 96, generator=g), torch.randn(96, 40, generator=g)
    per_sample = (x[:, :, None] * w[None]).double()            # exact per-sample "gradients"
    exact = per_sample.mean(0)
    errors = {}
    for k in (1, 16, 256):
        parts = [chunk.mean(0).mul(len(chunk) / len(x)).bfloat16() for chunk in per_sample.chunk(k)]
        in_bf16 = torch.zeros_like(parts[0])
        in_fp32 = torch.zeros(exact.shape)
        for part in parts:
            in_bf16 += part
            in_fp32 += part.float()
        errors[k] = [((s.double() - exact).norm() / exact.norm()).item() for s in (in_bf16, in_fp32)]
    assert errors[1][0] < errors[16][0] < errors[256][0] and errors[256][0] > 3 * errors[1][0]
    assert errors[256][1] < 1.5 * errors[1][1] and errors[256][1] < errors[256][0] / 3


def _conv_grads_in(grad_dtype, micro_batches, seed=8):
    """A bfloat16 Conv1d (another layer than the notebook's, with a bias) after `micro_batches` backward()s, its
    parameters' .grad kept in `grad_dtype`; and the float64 sum of the same micro-batch gradients."""
    torch.manual_seed(seed)
    model = torch.nn.Conv1d(3, 4, 5).bfloat16()
    exact = torch.nn.Conv1d(3, 4, 5).double()
    exact.load_state_dict(model.state_dict())
    for p in model.parameters():
        p.grad_dtype = grad_dtype
    g = torch.Generator().manual_seed(seed)
    for _ in range(micro_batches):
        x = torch.randn(2, 3, 16, generator=g).bfloat16()
        model(x).square().mean().backward()
        exact(x.double()).square().mean().backward()
    return model, exact


def _relative_error(model, exact):
    got = torch.cat([p.grad.double().flatten() for p in model.parameters()])
    want = torch.cat([p.grad.flatten() for p in exact.parameters()])
    return ((got - want).norm() / want.norm()).item()


def test_grad_dtype_float32_keeps_a_bfloat16_parameters_sum_in_float32():
    assert torch.nn.Linear(2, 2).bfloat16().weight.grad_dtype == torch.bfloat16        # the default
    errors = {}
    for k in (1, 32, 256):
        low, _ = _conv_grads_in(torch.bfloat16, k)
        high, exact = _conv_grads_in(torch.float32, k)
        assert all(p.grad.dtype == torch.float32 and p.dtype == torch.bfloat16 for p in high.parameters())
        errors[k] = _relative_error(low, exact), _relative_error(high, exact)
    assert errors[256][0] > 3 * errors[256][1]
    assert errors[256][1] < 1.5 * errors[1][1] + 1e-3
    assert errors[1][0] < errors[256][0]


@pytest.mark.parametrize("optimizer, steps", [(torch.optim.SGD, True), (lambda p, lr: torch.optim.SGD(
    p, lr=lr, momentum=0.9, weight_decay=0.1), True), (torch.optim.RMSprop, True), (torch.optim.Adagrad, True),
    (torch.optim.Adam, False), (torch.optim.AdamW, False)])
def test_which_optimizers_step_with_a_float32_grad_on_a_bfloat16_parameter(optimizer, steps):
    model, _ = _conv_grads_in(torch.float32, 4)
    before = [p.detach().clone() for p in model.parameters()]
    if steps:
        optimizer(model.parameters(), lr=0.01).step()
        assert all(p.dtype == torch.bfloat16 and not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    else:
        with pytest.raises(RuntimeError, match="dtype"):
            optimizer(model.parameters(), lr=0.01).step()


def test_adamw_steps_once_the_float32_sum_is_converted_and_grad_dtype_goes_back_after_zero_grad():
    model, exact = _conv_grads_in(torch.float32, 16)
    with pytest.raises(RuntimeError, match="grad_dtype"):
        model.weight.grad = model.weight.grad.bfloat16()                  # refused while grad_dtype is float32
    for p in model.parameters():
        p.grad_dtype = None
        p.grad = p.grad.to(p.dtype)                                       # rounded to bfloat16 once
    assert _relative_error(model, exact) < 2 ** -8
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    optimizer.step()
    optimizer.zero_grad()
    for p in model.parameters():
        p.grad_dtype = torch.float32
    model(torch.randn(2, 3, 16).bfloat16()).square().mean().backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


# --------------------------------------------------------------------------- the notebook's script, 2 processes


def test_the_notebook_writes_its_script_by_path_and_never_changes_folder():
    """A chdir into a scratch folder would strand the kernel there if torchrun raised (every later %load fails)."""
    cells = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    assert not any("chdir" in c for c in cells)
    assert any(c.startswith(f"%%writefile {SCRIPT_NAME}") for c in cells)


@pytest.fixture(scope="module")
def run(script, probed):
    return ddp_probe.torchrun(script, probed, nproc=2, timeout=180)


@pytest.fixture(scope="module")
def train(script):
    return runpy.run_path(str(script))


def test_the_script_frees_every_ddp_model_before_it_ends_training(run, probed):
    assert ddp_probe.alive_at_destroy(probed, 2) == [0, 0]


def _update_sequences(train, world, update, ranks):
    k = train["K"]
    micro = [torch.arange(r, train["SEQUENCES"], world).split(2) for r in ranks]
    return torch.cat([s for m in micro for s in m[update * k:update * k + k]])


def _full_batch(train, sequences):
    tokens, labels = train["make_tokens"]()
    model = train["make_lm"]()
    t, lbl = tokens[sequences], labels[sequences]
    grads = torch.autograd.grad(train["token_loss_sum"](model, t, lbl) / (lbl != -100).sum(),
                                list(model.parameters()))
    return torch.cat([g.flatten() for g in grads])


@pytest.mark.slow
def test_one_token_rule_gives_the_single_process_gradient_by_hand_and_in_accelerate(run, train):
    world, k = run.world_size, train["K"]
    _, labels = train["make_tokens"]()
    updates = len(run.ranks[0]["grads"][RUNS["own, x world / N"]])
    assert updates == 2 and train["SEQUENCES"] // world // 2 % k != 0, "the setting must leave a short last group"
    for update in range(updates):
        full = _full_batch(train, _update_sequences(train, world, update, range(world)))
        counts = [int((labels[_update_sequences(train, world, update, [r])] != -100).sum()) for r in range(world)]
        assert len(set(counts)) > 1, "the ranks must hold different numbers of tokens"
        grads = {rule: [torch.tensor(r["grads"][rule][update]) for r in run.ranks] for rule in run.ranks[0]["grads"]}
        assert all(torch.equal(g[0], g[1]) for g in grads.values())
        assert sorted(grads) == sorted(RUNS.values())
        assert torch.allclose(grads[RUNS["own, x world / N"]][0], full, atol=1e-6)
        assert torch.allclose(grads[RUNS["accelerate, x k x world / N"]][0], full, atol=1e-6)
        assert torch.allclose(grads[RUNS["accelerate, x world / N"]][0], full / k, atol=1e-6)    # short group too
        assert (grads[RUNS["own, / N of the rank"]][0] - full).norm() / full.norm() > 0.05


def _stepped(updates, steps_per_update, schedule):
    """Each update's factor from a LambdaLR stepped `steps_per_update` times per update: the notebook's count of what
    accelerate's prepared scheduler does (num_processes steps per update, one with split_batches=True)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    used = []
    for _ in range(updates):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        for _ in range(steps_per_update):
            scheduler.step()
    return used


@pytest.mark.slow
def test_a_schedule_sized_in_updates_runs_num_processes_times_too_fast_in_accelerate_inside_or_after_accumulate(run):
    world, wanted = run.world_size, [1.0, 0.75, 0.5, 0.25]
    assert world == 2
    for r in run.ranks:
        lrs = {way: r["lrs"][name] for way, name in WAYS.items()}
        assert sorted(r["lrs"]) == sorted(WAYS.values())
        assert lrs["4 steps, in accumulate()"] == lrs["4 steps, after accumulate()"] == pytest.approx([1.0, 0.5, 0, 0])
        assert lrs["4 x world steps, in accumulate()"] == pytest.approx(wanted)
        assert lrs["4 steps, split_batches=True"] == pytest.approx(wanted)


@pytest.mark.slow
def test_the_notebooks_count_of_accelerate_s_scheduler_is_what_both_ranks_recorded(run):
    """The widget's model: a LambdaLR stepped num_processes times per update (once with split_batches)."""
    linear = lambda step: max(0.0, 1 - step / 4)                                     # noqa: E731
    for r in run.ranks:
        assert _stepped(4, run.world_size, linear) == r["lrs"][WAYS["4 steps, in accumulate()"]]
        assert _stepped(4, 1, linear) == r["lrs"][WAYS["4 steps, split_batches=True"]]
        sized = lambda step: max(0.0, 1 - step / (4 * run.world_size))               # noqa: E731
        assert _stepped(4, run.world_size, sized) == pytest.approx(
            r["lrs"][WAYS["4 x world steps, in accumulate()"]])


@pytest.mark.parametrize("processes", [2, 3, 8])
def test_sizing_x_num_processes_is_exact_for_a_schedule_of_step_over_total_and_not_for_the_notebooks_warm_up(
        processes):
    updates, warmup = 12, 3

    def of_fraction(total, w):  # a warm-up of step / warmup, as Hugging Face's schedules have, then a linear decay
        return lambda s: s / w if s < w else max(0.0, (total - s) / (total - w))

    wanted = _stepped(updates, 1, of_fraction(updates, warmup))
    assert _stepped(updates, processes, of_fraction(updates * processes, warmup * processes)) == pytest.approx(wanted)
    notebook = _stepped(updates, processes, _warmup_then_decay(updates * processes, warmup * processes))
    wanted_notebook = _stepped(updates, 1, _warmup_then_decay(updates, warmup))
    assert notebook[warmup:] == pytest.approx(wanted_notebook[warmup:])           # the decay comes back
    assert all(a < b for a, b in zip(notebook[:warmup], wanted_notebook[:warmup]))  # the warm-up starts lower
    assert _stepped(updates, 1, _warmup_then_decay(updates, warmup)) == wanted_notebook  # split_batches: as it was


@pytest.mark.slow
def test_hugging_face_s_linear_and_cosine_schedules_sized_x_num_processes_give_the_same_rates():
    from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

    updates, warmup, processes = 10, 2, 2
    for make in (get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup):
        got = []
        for total, w, steps in ((updates, warmup, 1), (updates * processes, warmup * processes, processes)):
            optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
            scheduler = make(optimizer, w, total)
            used = []
            for _ in range(updates):
                used.append(optimizer.param_groups[0]["lr"])
                optimizer.step()
                for _ in range(steps):
                    scheduler.step()
            got.append(used)
        assert got[0] == pytest.approx(got[1])


def test_with_step_scheduler_with_optimizer_false_a_prepared_scheduler_steps_on_every_call():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    try:
        accelerator = Accelerator(gradient_accumulation_steps=4, cpu=True, step_scheduler_with_optimizer=False)
        model, optimizer, scheduler = _prepared_schedule(accelerator)
        lrs = []
        for _ in range(3):
            with accelerator.accumulate(model), warnings.catch_warnings():
                warnings.simplefilter("ignore")              # PyTorch's order warning: the optimizer did not step
                lrs.append(scheduler.get_last_lr()[0])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        assert lrs == pytest.approx([0.1, 0.05, 0.1 / 3])
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


@pytest.mark.slow
def test_a_hugging_face_models_loss_is_the_mean_over_its_real_tokens_unless_given_num_items_in_batch():
    from transformers.loss.loss_utils import ForCausalLMLoss

    tokens, labels = _padded(seed=9, sequences=4, length=6, vocab=9)
    logits = torch.randn(4, 6, 9, generator=torch.Generator().manual_seed(9))
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]             # the model's shift
    real = int((shifted != -100).sum())
    summed = F.cross_entropy(logits.flatten(0, 1), shifted.flatten(), ignore_index=-100, reduction="sum")
    assert ForCausalLMLoss(logits, labels, 9) == pytest.approx((summed / real).item())
    assert ForCausalLMLoss(logits, labels, 9, num_items_in_batch=torch.tensor(50)) == pytest.approx(
        (summed / 50).item())


def test_the_scripts_ranks_stay_on_the_cpu_beside_a_gpu_as_the_notebook_says():
    """Its Accelerators take cpu=True (one GPU cannot hold two NCCL ranks: notebook 06 states and tests that)."""
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    made = [line for line in cells["script-main"].splitlines() if "Accelerator(" in line]
    assert len(made) == 2 and all("cpu=True" in line for line in made), made
    told = " ".join(cells["tokens-md"].split())
    assert "Its ranks stay on the CPU (`cpu=True`) even beside a GPU" in told and "(notebook 06)" in told
