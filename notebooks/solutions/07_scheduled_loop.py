# Worked solution to notebook 07, exercise 2: fix the loop
# Two fixes. The loss: a micro-batch's token mean divided by the number of micro-batches weighs a micro-batch with
# few real tokens as much as a full one; sum the token losses and divide by the real tokens of the whole group,
# counted before its first backward(). The schedule counts updates: scheduler.step() moves right after
# optimizer.step(), once per group, the shorter last group included.
def train_epoch(model, optimizer, scheduler, micro_batches, k):
    n = len(micro_batches)
    for i, (tokens, labels) in enumerate(micro_batches):
        group = micro_batches[i // k * k:i // k * k + k]
        group_tokens = sum((group_labels != -100).sum() for _, group_labels in group)
        (token_loss_sum(model, tokens, labels) / group_tokens).backward()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()                     # one step of the schedule per update
            optimizer.zero_grad()

answer = train_epoch
ex.check_scheduled_loop(answer)
