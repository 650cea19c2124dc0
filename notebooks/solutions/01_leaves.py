# Worked solution to notebook 01, exercise 1: which tensors are leaves?
# A leaf is a tensor without a grad_fn. w and x were created directly. v = w.detach() has no history,
# and s = x * 2 recorded nothing because x does not require grad. h and loss came out of recorded
# operations on w, so they carry a grad_fn and are not leaves.
answer = {"w", "x", "v", "s"}
ex.check_leaves(answer)
