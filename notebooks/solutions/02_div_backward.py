# Worked solution to notebook 02, exercise 2: write one node's backward
# out = a / b. With respect to a the local derivative is 1 / b; with respect to b it is -a / b**2.
# The chain rule multiplies each by grad_out. b was broadcast over the rows of a, so every row sent b
# its own share: add them (the sum the engine does on the edge), down to b's shape.
def div_backward(a, b, grad_out):
    grad_a = grad_out / b
    grad_b = (-grad_out * a / b**2).sum(dim=0)
    return grad_a, grad_b

answer = div_backward
ex.check_div_backward(answer)
