# Worked solution to notebook 07, exercise 2: fix the schedule
# The schedule counts updates, so scheduler.step() moves inside the branch that steps the optimizer, right after
# optimizer.step(): once per group of k, the shorter last group included, and never before the first update.
def train_epoch(model, optimizer, scheduler, micro_batches, k):
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        (F.mse_loss(model(x), y) * len(x) / sum(len(xg) for xg, _ in group)).backward()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()                     # one step of the schedule per update
            optimizer.zero_grad()

answer = train_epoch
ex.check_scheduled_loop(answer)
