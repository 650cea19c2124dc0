# Worked solution to notebook 02, exercise 3: will a second backward raise?
# The second call raises when a node on the way needs a tensor it saved, because the first call freed
# the saved tensors. Addition and subtraction pass the gradient on unchanged, and sum and mean need only
# shapes, so A and D run twice. A product saves its factors to compute its local derivatives: a * b saves
# a and b, and a * 2 saves the 2 as a tensor too, so B and C raise.
answer = {"A": False, "B": True, "C": True, "D": False}
ex.check_second_backward(answer)
