# Worked solution to notebook 02, exercise 3: will a second backward raise?
# The second call raises when a node on the way needs a tensor it saved, because the first call freed
# the saved tensors. Concatenation only cuts the gradient back into pieces and expand only sums it back
# to a's shape: both need sizes, not values, so A and D run twice. The product needs b's values to give
# a its gradient, detached or not (B), and exp's derivative is exp itself, so it saves its result (C).
answer = {"A": False, "B": True, "C": True, "D": False}
ex.check_second_backward(answer)
