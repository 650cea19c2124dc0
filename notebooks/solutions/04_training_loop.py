# Worked solution to notebook 04, exercise 1: fix the copied loop, for good
# Three fixes: step at the end of each group of k, (i + 1) % k == 0, not (i - 1); step at the last
# micro-batch too, so the tail group is not left in .grad; scale each micro-batch's mean loss by its
# share of its group's samples, so that unequal sizes (and a short tail group) still give the group mean.
# (Dividing at the step, as in section 3, is right too: sum-reduce each loss, count the group's samples as they
# come, and divide .grad by that count right before optimizer.step().)
def train_epoch(model, loss_fn, optimizer, micro_batches, k):
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        group = micro_batches[(i // k) * k:(i // k) * k + k]       # the group this micro-batch belongs to
        samples = sum(len(xg) for xg, _ in group)                   # samples in it (the last group may be short)
        loss = loss_fn(model(x), y) * len(x) / samples              # this micro-batch's share of the group mean
        loss.backward()
        if (i + 1) % k == 0 or i + 1 == n:                          # end of a group, or of the data
            optimizer.step()
            optimizer.zero_grad()

answer = train_epoch
ex.check_training_loop(answer)
