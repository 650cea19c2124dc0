# Worked solution to notebook 06, exercise 3: the divisor
# DDP already averages over the ranks when it all-reduces, so each rank only divides by its own number
# of equal micro-batches: k = 4. Dividing by k times the number of ranks would count the ranks twice.
answer = 4
ex.check_loss_divisor(answer)
