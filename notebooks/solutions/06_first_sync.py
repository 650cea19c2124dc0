# Worked solution to notebook 06, exercise 2: one synchronization, but when?
# Only micro-batch 0 runs outside no_sync(): one synchronizing backward, one call per bucket, 2 calls.
# But they average the gradient of the first micro-batch only; the 4 later ones are added on each rank
# afterwards and never averaged, so the ranks' gradients differ at step().
answer = (2, False)
ex.check_first_sync(answer)
