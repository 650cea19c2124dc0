# Worked solution to notebook 05, exercise 1: set-ups the map does not hold
# A: a maximum over the samples is not a sum of per-sample losses: four micro-batch maxima, each times its share,
# are not the batch's maximum. B: x.roll(1, dims=0) pairs each sample with its neighbour in the batch it is given,
# and a micro-batch's first sample gets another neighbour. C: each sample's loss enters .grad with weight 1 / N
# whatever micro-batch holds it, so any cut gives the full-batch gradient. D: one backward() of its own puts the
# penalty's gradient into .grad once per update, as the full batch does. E: the noise is drawn in another order:
# equal only on average. F: lr / k times k times the gradient is lr times the gradient, for plain SGD.
answer = {"A": "not equivalent", "B": "not equivalent", "C": "equivalent",
          "D": "equivalent", "E": "only in distribution", "F": "equivalent"}
ex.check_predictions(answer)
