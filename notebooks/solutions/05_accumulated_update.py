# Worked solution to notebook 05, exercise 2: an accumulated update with a penalty and clipping by value
# Each micro-batch's loss, penalty included, is weighted by its share of the batch, so the shares add up to
# the full-batch loss (the penalty counted once in total). Clipping by value clamps entries of the whole
# gradient, so it comes once, after the loop, just before the step.
def my_accumulated_update(model, opt, x, y, k):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        share = len(xb) / len(x)
        ((mse_loss(model(xb), yb) + ex.LAM * ex.penalty(model)) * share).backward()
    nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE)     # once, after the loop
    opt.step()

answer = my_accumulated_update
ex.check_accumulated_update(answer)
