# Worked solution to notebook 06, exercise 3: the divisor, for summed losses
# On each rank the 2 summed losses add up to the sum over its 2 x 16 = 32 samples; dividing each by 32
# makes that the rank's mean. DDP's all-reduce then averages the 4 ranks' means: the mean over all
# 128 samples. Dividing by 128 would count the ranks twice; dividing by k = 2 forgets the sums.
answer = 2 * 16
ex.check_loss_divisor(answer)
