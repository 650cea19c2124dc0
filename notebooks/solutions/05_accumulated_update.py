# Worked solution to notebook 05, exercise 2: an accumulated update with a penalty and clipping by value
# Each micro-batch's error is weighted by its share of the batch, so the shares add up to the full-batch error.
# The penalty does not depend on the samples: one backward() of its own adds its whole gradient once per update
# (no share), and it comes before the clipping, because the full batch clips error and penalty together.
# Clipping by value clamps entries of the whole gradient, so it comes once, after the loop, just before the step.
def my_accumulated_update(model, opt, x, y, k):
    opt.zero_grad()
    for xb, yb in zip(x.tensor_split(k), y.tensor_split(k)):
        (mse_loss(model(xb), yb) * len(xb) / len(x)).backward()
    (ex.LAM * ex.penalty(model)).backward()                          # once per update, whole
    nn.utils.clip_grad_value_(model.parameters(), ex.MAX_VALUE)     # the finished sum, penalty included
    opt.step()

answer = my_accumulated_update
ex.check_accumulated_update(answer)
