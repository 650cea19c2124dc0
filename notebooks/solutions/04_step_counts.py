# Worked solution to notebook 04, exercise 2: what each step adds up
# The copied loop steps where (i - 1) % k == 0: at i = 1, 1 + k, 1 + 2k, ... while i < n (not at i = 0: in
# Python (0 - 1) % k is k - 1). Its first step holds micro-batches 0 and 1; each later step the k that ran since
# the step before. After the last step, the rest of the epoch stays in .grad, and nothing resets it: the next
# epoch's first step, at i = 1 again, holds those and its own 2.
n, k = 41, 8
steps = len(range(1, n, k))                      # i = 1, 9, 17, 25, 33: 5 steps an epoch
last = 1 + (steps - 1) * k                       # i = 33, the last step
left = n - 1 - last                              # micro-batches 34 to 40 stay in .grad: (n - 2) % k of them
answer = [2] + [k] * (steps - 1) + [left + 2] + [k] * (steps - 1)
ex.check_step_counts(answer)
