# Worked solution to notebook 06, exercise 1: backward only, on a larger model
# DDP decides whether to synchronize in the forward pass: a forward outside no_sync() makes the next
# backward all-reduce. Here every forward runs outside the context, so each of the 6 backward passes
# all-reduces, as if no_sync() were not there -- and each makes one call per bucket.
answer = 6 * 3
ex.check_backward_only_count(answer)
