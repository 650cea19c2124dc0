# Worked solution to notebook 06, exercise 1: no_sync() around backward only
# DDP decides whether to synchronize in the forward pass: a forward outside no_sync() makes the next
# backward all-reduce. Here every forward runs outside the context, so each of the 8 backward calls
# all-reduces, as if no_sync() were not there.
answer = 8
ex.check_backward_only_count(answer)
