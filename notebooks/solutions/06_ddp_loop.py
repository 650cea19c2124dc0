# Worked solution to notebook 06, exercise 1: write the loop
# Rule 2: every micro-batch but the last runs its forward and its backward inside no_sync(), so only the last
# backward all-reduces: the sum of all of them, one call per bucket. Rule 1, for a summed loss: dividing each
# micro-batch's sum by the rank's sample count n makes the rank's k losses add up to its mean loss, and DDP's
# all-reduce averages the ranks' means. Not by k (that suits mean losses), not by n x world (DDP divides by it).
# That takes equal sample counts on every rank, as the check gives; with unequal ones divide by N / world, N the
# samples of all ranks (all-reduce each rank's n), so each sample counts once.
def accumulate(model, loss_fn, micro_batches):
    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else nullcontext():
            (loss_fn(model(x), y) / n).backward()

answer = accumulate
ex.check_ddp_accumulation(answer)
