# Worked solution to notebook 05, exercise 1: set-ups the map does not hold
# A: F.normalize(h, dim=1) works on each sample's own hidden vector, like LayerNorm. B: a mean over dim=0 is a
# mean over the batch, BatchNorm's pitfall without a BatchNorm layer. C: clamping partial sums is not clamping
# the total: clipping by value is not linear either. D: one backward() of its own puts the penalty's gradient
# into .grad once per update, as the full batch does. E: the noise is drawn in another order: equal only on
# average. F: lr / k times k times the gradient is lr times the gradient, for plain SGD.
answer = {"A": "equivalent", "B": "not equivalent", "C": "not equivalent",
          "D": "equivalent", "E": "only in distribution", "F": "equivalent"}
ex.check_predictions(answer)
