# Worked solution to notebook 06, exercise 2: the count is right, but ...
# Only micro-batch 0 runs outside no_sync(): one all-reduce per update. But it synchronizes the gradient
# of the first micro-batch only; the 7 later ones stay local to each rank, so the ranks' gradients differ
# at step().
answer = (1, False)
ex.check_first_sync(answer)
