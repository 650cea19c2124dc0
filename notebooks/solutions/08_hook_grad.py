# Worked solution to notebook 08, exercise 1: a hook that doubles a gradient
# Follow the gradient backward from z = 5 * y + x. Two paths lead to x:
# - through y: dz/dy = 5 arrives at y, the hook returns twice that (10), and the chain rule carries the
#   doubled gradient on to x, times dy/dx = 2x = 6: 60;
# - directly: the `+ x` term adds dz/dx = 1, which never passes through y, so the hook does not touch it.
answer = 2 * 5 * (2 * 3.0) + 1
ex.check_hook_grad(answer)
