# Worked solution to notebook 01, exercise 2: .grad after two backward calls
# Each backward adds d(w**2 + 4w)/dw = 2w + 4 to w.grad; at w = 3 that is 10. Nothing clears
# .grad between the two calls, so they add up.
answer = 2 * (2 * 3.0 + 4)
ex.check_grad_after_two_backwards(answer)
