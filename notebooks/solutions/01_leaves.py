# Worked solution to notebook 01, exercise 1: which tensors are leaves?
# A leaf is a tensor without a grad_fn. w and x were created directly. s = x * 2 recorded nothing, because x
# does not require grad; z = torch.zeros_like(w) takes only w's shape, dtype and device, not w as an input.
# h came out of a recorded product with w. m was created as a leaf, but m[1] = w[1] writes w's value into it in
# place: w requires grad, so that write was recorded and m got a grad_fn (CopySlices).
answer = {"w", "x", "s", "z"}
ex.check_leaves(answer)
