# Worked solution to notebook 04, exercise 1: fix the copied loop, for good
# Three fixes. Step at the end of each group of k, (i + 1) % k == 0, not (i - 1). Step once more when the
# stream ends inside a group, so the tail is not left in .grad: a stream tells its end only by ending, so that
# step comes after the loop. Weigh each micro-batch by its samples without knowing the group's total in advance:
# sum-reduce each loss (loss_fn takes a mean: times len(x) makes it a sum), count the samples as they come, and
# divide .grad by that count right before the step (section 2's divide at step).
def divide_and_step(model, optimizer, samples):
    for p in model.parameters():
        if p.grad is not None:                           # None: frozen, or not used by the loss
            p.grad /= samples                            # the summed gradient becomes the group's mean
    optimizer.step()
    optimizer.zero_grad()


def train_epoch(model, loss_fn, optimizer, micro_batches, k):
    samples = 0                                          # samples accumulated since the last step
    for i, (x, y) in enumerate(micro_batches):           # no len(), no indexing: it may be a stream
        (loss_fn(model(x), y) * len(x)).backward()       # this micro-batch's summed loss
        samples += len(x)
        if (i + 1) % k == 0:                             # the end of a group of k
            divide_and_step(model, optimizer, samples)
            samples = 0
    if samples:                                          # the stream ended inside a group: step that group too
        divide_and_step(model, optimizer, samples)


answer = train_epoch
ex.check_training_loop(answer)
