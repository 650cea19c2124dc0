# Worked solution to notebook 01, exercise 3: repair a weight whose .grad stays None
# In make_weight, `* 0.01` is a recorded operation, so the returned tensor is its result, not a leaf.
# Do the arithmetic first, on a tensor that records nothing, and switch gradients on last: the returned
# tensor is then the leaf that backward fills.
def make_weight_fixed():
    return (torch.rand(3) * 0.01).requires_grad_()

answer = make_weight_fixed
ex.check_make_weight(answer)
