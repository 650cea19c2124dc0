# Worked solution to notebook 03, exercise 1: predict a graph's size from its code
# Inside the loop, once per sample, five operations on tensors that need grad: scale * x[k] (MulBackward0),
# + b (AddBackward0), - y[k] (SubBackward0), ** 2 (PowBackward0) and total + ... (AddBackward0; the first,
# 0 + ..., is recorded too). x[k] and y[k] index data that needs no grad: nothing is recorded for them.
# Outside the loop, once: w.exp() (ExpBackward0), the division (DivBackward0), and one AccumulateGrad for
# each leaf, w and b, however many samples use them.
per_sample, once = 5, 4
answer = per_sample * 50 + once
ex.check_looped_nodes(answer, n=50)
