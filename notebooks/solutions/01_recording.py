# Worked solution to notebook 01, exercise 2: recorded, not recorded, or raises at backward?
# A: new_zeros records nothing, but fill_ then takes x.sum(), which requires grad, as its value: recorded.
# B: .item() turns x.sum() into a Python number without history; no input of fill_ requires grad: not recorded.
# C: x takes part in the addition and in floor_divide, so both are recorded. Backward walks every path back to x:
#    the direct one works, the other reaches floor_divide's node, which has no derivative formula, and raises.
# D: every value comes from x.detach(), but an in-place operation takes in the tensor it writes into, and x * 2 is
#    recorded: copy_ is recorded, with a derivative (it sends x a zero gradient).
# E: x itself is an input of torch.where, and the result is float: recorded, with a derivative.
answer = {"A": "recorded", "B": "not recorded", "C": "raises", "D": "recorded", "E": "recorded"}
ex.check_recording(answer)
