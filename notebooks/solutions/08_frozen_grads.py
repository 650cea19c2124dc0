# Worked solution to notebook 08, exercise 2: which parameters get a .grad?
# - 0.weight and 0.bias require grad, but the first layer ran inside torch.no_grad(): nothing recorded
#   what they did, so backward has no path to them and their .grad stays None;
# - 2.bias was frozen with requires_grad_(False): backward skips it;
# - 2.weight requires grad and its layer ran while recording. model.eval() changed nothing about that:
#   it switches dropout and batch norm to inference behaviour, it does not stop recording.
answer = {"2.weight"}
ex.check_frozen_grads(answer)
