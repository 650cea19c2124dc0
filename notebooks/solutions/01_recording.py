# Worked solution to notebook 01, exercise 2: recorded, not recorded, or raises at backward?
# A: x > 0 is boolean and records nothing; .float() then converts a tensor that requires no grad.
# B: always 0, but recording never looks at values: x requires grad and enters the subtraction.
# C: x takes part in the addition and in floor_divide, so both are recorded. Backward walks every path back to x:
#    the direct one works, the other reaches floor_divide's node, which has no derivative formula, and raises.
# D: full_like takes only the shape, dtype and device of x, like zeros_like: not recorded.
# E: x itself is an input of torch.where, and the result is float: recorded, with a derivative.
answer = {"A": "not recorded", "B": "recorded", "C": "raises", "D": "not recorded", "E": "recorded"}
ex.check_recording(answer)
