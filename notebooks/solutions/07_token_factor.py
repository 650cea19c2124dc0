# Worked solution to notebook 07, exercise 1: one factor, by hand and in accelerate
# The mean was divided by the micro-batch's own real tokens: times n_micro gives its summed loss back. Then section
# 2's rule: divide by the update's real tokens over all micro-batches and ranks, and multiply by every divisor still
# to come -- world for DDP's mean over the ranks, and k more where accelerator.backward() divides by k.
def factor(n_micro, n_all, k, world, accelerate):
    return n_micro / n_all * world * (k if accelerate else 1)

answer = factor
ex.check_token_factor(answer)
