# Worked solution to notebook 02, exercise 1: predict the chain
# Read the forward code backwards: the last operation, `* 3`, made `out` (MulBackward0); before it came
# .sum() (SumBackward0), torch.sigmoid (SigmoidBackward0) and `w * x` (MulBackward0); the walk ends at
# the leaf w, whose node is AccumulateGrad. x requires no grad, so it adds no branch.
answer = ["MulBackward0", "SumBackward0", "SigmoidBackward0", "MulBackward0", "AccumulateGrad"]
ex.check_chain(answer)
