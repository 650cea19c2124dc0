# Worked solution to notebook 05, exercise 1: predict the verdicts
# A: LayerNorm normalizes each sample on its own, and AdamW's step sees the same summed gradient.
# B: BatchNorm's statistics are taken over the micro-batch, not the batch. C: clipping inside the loop
# clips partial gradients. D: summed losses divided by N give the full-batch mean exactly.
# E: dropout draws its masks in another order: equal only on average. F: weight decay acts in the
# optimizer's step, once per update, whatever k is.
answer = {"A": "equivalent", "B": "not equivalent", "C": "not equivalent",
          "D": "equivalent", "E": "only in distribution", "F": "equivalent"}
ex.check_predictions(answer)
