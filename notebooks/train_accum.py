# train_accum.py -- accumulation in practice, on every rank: token counts across ranks, and
# the same loop written by hand and with Hugging Face accelerate. Launched with torchrun, 2 processes.
import json, os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

VOCAB, DIM, SEQ, N_SEQ, K = 10, 8, 6, 16, 4   # token model: 16 padded sequences, k = 4 per rank
N, D_IN, BATCH, K_ACC = 40, 8, 4, 2           # regression: 10 micro-batches of 4, k = 2 per rank
IGNORE = -100                                 # the label of a padding position


def make_tokens():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(VOCAB, (N_SEQ, SEQ), generator=g)
    labels = torch.randint(VOCAB, (N_SEQ, SEQ), generator=g)
    real = torch.randint(1, SEQ + 1, (N_SEQ,), generator=g)      # real tokens per sequence
    labels[torch.arange(SEQ) >= real[:, None]] = IGNORE           # the rest is padding
    return tokens, labels


def make_lm():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, DIM), torch.nn.Linear(DIM, VOCAB))


def token_loss_sum(model, tokens, labels):
    """The summed cross-entropy over the real tokens (padding ignored)."""
    logits = model(tokens).reshape(-1, VOCAB)
    return F.cross_entropy(logits, labels.reshape(-1), ignore_index=IGNORE, reduction="sum")


def token_update(model, micro_batches, divisor):
    """One update's gradient on this rank; each micro-batch's summed loss divided as `divisor` says."""
    world, k = dist.get_world_size(), len(micro_batches)
    n_rank = sum(int((labels != IGNORE).sum()) for _, labels in micro_batches)   # counted before any backward
    n_all = torch.tensor(n_rank)
    dist.all_reduce(n_all)                                   # the sum over ranks: every real token of the update
    model.zero_grad()
    for i, (tokens, labels) in enumerate(micro_batches):
        with model.no_sync() if i < k - 1 else nullcontext():
            loss_sum = token_loss_sum(model, tokens, labels)
            if divisor == "own mean / k":                    # each micro-batch's token mean, divided by k
                loss = loss_sum / (labels != IGNORE).sum() / k
            elif divisor == "N of this rank":                # counted over the micro-batches, not the ranks
                loss = loss_sum / n_rank
            else:                                            # "N of all ranks": and x world undoes DDP's mean
                loss = loss_sum / n_all * world
            loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]).tolist()


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D_IN, generator=g)
    return x, x[:, :1] - x[:, 1:2] + 0.1 * torch.randn(N, 1, generator=g)


def make_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def flat_grad(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def warmup(update):                      # a schedule: 2 updates of warm-up, then a decay
    return (update + 1) / 2 if update < 2 else 2 / (update + 1)


def constant(update):                    # no schedule, to compare gradients
    return 1.0


def own_loop(model, batches, k, lr_factor):
    """The notebook's loop under DDP: scale by the group's share, sync and step at each group's end."""
    x, y = make_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    rec = {"sync": [], "logged": [], "norm": [], "lr": [], "grads": []}
    for i, idx in enumerate(batches):
        group = batches[i // k * k:i // k * k + k]
        last = (i + 1) % k == 0 or i + 1 == len(batches)
        with nullcontext() if last else model.no_sync():
            loss = F.mse_loss(model(x[idx]), y[idx]) * len(idx) / sum(len(g) for g in group)
            loss.backward()
        rec["sync"].append(last)
        rec["logged"].append(loss.item())                          # the scaled micro-batch loss
        rec["norm"].append(flat_grad(model).norm().item())         # .grad so far, on this rank
        if last:                                                   # clip and log only here
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            rec["grads"].append(flat_grad(model).tolist())
            rec["lr"].append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
            opt.zero_grad()
    return rec


def accelerate_loop(accelerator, lr_factor):
    """The same epoch in accelerate: it shards the loader, scales, syncs and skips the steps itself."""
    x, y = make_data()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    loader = DataLoader(torch.arange(N), batch_size=BATCH)    # yields batches of sample indices
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    rec = {"sync": [], "logged": [], "norm": [], "lr": [], "grads": [], "batches": []}
    for idx in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(x[idx]), y[idx])
            accelerator.backward(loss)                         # divides by gradient_accumulation_steps
            rec["batches"].append(idx.tolist())
            rec["sync"].append(accelerator.sync_gradients)
            rec["logged"].append(loss.item())
            rec["norm"].append(flat_grad(model).norm().item())   # .grad so far, on this rank
            if accelerator.sync_gradients:                     # clip and log only on a synchronizing step
                accelerator.clip_grad_norm_(model.parameters(), max_norm=10.0)
                rec["grads"].append(flat_grad(model).tolist())
                rec["lr"].append(sched.get_last_lr()[0])
            opt.step()                                         # does nothing unless sync_gradients
            sched.step()
            opt.zero_grad()
    return rec


def main():
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=K_ACC, cpu=True)   # joins torchrun's process group
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens, labels = make_tokens()
    mine = torch.arange(rank, N_SEQ, world).chunk(K)                        # this rank's 4 micro-batches
    lm = DDP(make_lm())
    tokens_out = {d: token_update(lm, [(tokens[i], labels[i]) for i in mine], d)
                  for d in ("own mean / k", "N of this rank", "N of all ranks")}
    loops = {}
    for schedule in (constant, warmup):
        acc = loops["accelerate", schedule.__name__] = accelerate_loop(accelerator, schedule)
        batches = [torch.tensor(b) for b in acc["batches"]]                 # the same shard, by hand
        loops["own", schedule.__name__] = own_loop(DDP(make_model()), batches, K_ACC, schedule)
    with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "token_samples": [i.tolist() for i in mine],
                   "tokens": tokens_out, "loops": {" ".join(key): rec for key, rec in loops.items()},
                   "distributed_type": str(accelerator.distributed_type)}, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()
