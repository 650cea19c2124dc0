# Worked solution to notebook 02, exercise 2: one gradient by the chain rule
# loss = mean((y - w * x) ** 2). Going down the chain, each node multiplies by its local derivative:
# mean -> 1/N, pow -> 2r (r the residual y - w * x), sub -> -1 (w * x is subtracted), mul -> x.
# The leaf's gradient is the sum of that product over the samples.
x_, y_, w_ = torch.tensor([4.0, 2.0]), torch.tensor([8.0, 4.0]), 0.5
r_ = y_ - w_ * x_                                          # residuals
answer = float(((1 / len(x_)) * 2 * r_ * -1 * x_).sum())  # mean * pow * sub * mul, summed over samples
ex.check_chain_rule_gradient(answer)
