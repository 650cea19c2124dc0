# Worked solution to notebook 04, exercise 2: count the steps
# Count the micro-batch indices i at which each loop steps. The correct loop steps once per group of k,
# the last, shorter group included: ceil(n / k).
import math

n, k = 41, 8
answer = (sum((i - 1) % k == 0 for i in range(n)), sum((i + 1) % k == 0 for i in range(n)), math.ceil(n / k))
ex.check_step_counts(answer)
