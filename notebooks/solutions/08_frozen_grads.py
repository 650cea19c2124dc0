# Worked solution to notebook 08, exercise 2: which parameters get a .grad?
# - 2.weight, 2.bias and 4.bias were frozen with requires_grad_(False): backward skips them;
# - 4.weight requires grad and its layer ran while recording;
# - 0.weight and 0.bias require grad too, and backward reaches them THROUGH the frozen middle layer: its weights
#   are constants, but its input (the first layer's output) required grad, so its operations were recorded.
#   Freezing a layer stops its own parameters from learning, not the gradient's way past it.
answer = {"0.weight", "0.bias", "4.weight"}
ex.check_frozen_grads(answer)
