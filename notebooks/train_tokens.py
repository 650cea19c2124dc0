# train_tokens.py -- one token-normalised loop on every rank, by hand and with accelerate (torchrun, 2 processes)
import gc, itertools, json, os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SEQUENCES, LENGTH, VOCAB, K = 24, 6, 10, 4


def make_tokens():  # 24 sequences of 6 positions, 1 to 6 of them real tokens; padding has the label -100
    g = torch.Generator().manual_seed(2)
    tokens, labels = torch.randint(VOCAB, (2, SEQUENCES, LENGTH), generator=g)
    real = torch.randint(1, LENGTH + 1, (SEQUENCES, 1), generator=g)
    labels[torch.arange(LENGTH) >= real] = -100
    return tokens, labels


def make_lm():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))


def token_loss_sum(model, tokens, labels):  # summed over the real tokens: how to divide it is the question
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


def run_epoch(model, micro_batches, factor, backward):
    grads, stream = [], iter(micro_batches)
    while group := list(itertools.islice(stream, K)):      # prefetch the group; the last may be shorter
        n_rank = sum(int((labels != -100).sum()) for _, labels in group)
        n_all = torch.tensor(n_rank)
        dist.all_reduce(n_all)                              # the update's real tokens on all ranks
        for i, (tokens, labels) in enumerate(group):
            with model.no_sync() if i < len(group) - 1 else nullcontext():
                backward(token_loss_sum(model, tokens, labels) * factor(n_rank, int(n_all)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).tolist())
        model.zero_grad()                                   # (an optimizer would step here)
    return grads


def main():
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=K, cpu=True)
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens, labels = make_tokens()
    micro_batches = [(tokens[i], labels[i]) for i in torch.arange(rank, SEQUENCES, world).split(2)]
    own, acc = (DDP, torch.Tensor.backward), (accelerator.prepare, accelerator.backward)
    rules = {"own loop,   / N of this rank": (*own, lambda n_rank, n_all: 1 / n_rank),
             "own loop,   x world / N": (*own, lambda n_rank, n_all: world / n_all),
             "accelerate, x world / N": (*acc, lambda n_rank, n_all: world / n_all),
             "accelerate, x k x world / N": (*acc, lambda n_rank, n_all: K * world / n_all)}
    grads = {name: run_epoch(wrap(make_lm()), micro_batches, factor, backward)
             for name, (wrap, backward, factor) in rules.items()}
    optimizer = torch.optim.SGD(make_lm().parameters(), lr=0.1)
    optimizer, scheduler = accelerator.prepare(optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: 1 / (update + 1)))
    lrs = []
    for update in range(3):                    # three updates' worth of scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    with open(os.path.join(os.environ["LAB_RESULTS"], f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "grads": grads, "lrs": lrs}, f)
    accelerator.free_memory()                  # every DDP model goes before the process group (notebook 06)
    gc.collect()
    accelerator.end_training()                 # destroys the process group


if __name__ == "__main__":
    main()
