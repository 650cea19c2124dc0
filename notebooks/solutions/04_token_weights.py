# Worked solution to notebook 04, exercise 3: weigh the micro-batches
# Each micro-batch's loss is a mean over its own tokens, i.e. its token sum divided by its count c.
# Multiplying it by c / (total count) turns it into its token sum over the total: the three then add up
# to the mean over all tokens.
counts = [3, 12, 5]
answer = [c / sum(counts) for c in counts]
ex.check_token_weights(answer)
