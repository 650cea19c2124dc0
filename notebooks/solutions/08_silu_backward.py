# Worked solution to notebook 08, exercise 3: write a backward
# y = x * s with s = sigmoid(x). The product rule gives dy/dx = s + x * s', and sigmoid's derivative is
# s' = s * (1 - s). backward receives grad_output = dL/dy and returns dL/dx = grad_output * dy/dx.
class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (s + x * s * (1 - s))

answer = SiLU
ex.check_silu_backward(answer)
