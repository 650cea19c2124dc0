# Worked solution to notebook 01, exercise 2: recorded, not recorded, or raises at backward?
# A: x > 0 is boolean and records nothing; .float() then converts a tensor that requires no grad.
# B: always 0, but recording never looks at values: x requires grad and enters the subtraction.
# C: with weights, bincount sums values of x per bin (a float result): recorded, but with no derivative formula.
# D: full_like reads only the shape, dtype and device of x, like zeros_like: not recorded.
# E: x itself is an input of torch.where, and the result is float: recorded, with a derivative.
answer = {"A": "not recorded", "B": "recorded", "C": "raises", "D": "not recorded", "E": "recorded"}
ex.check_recording(answer)
