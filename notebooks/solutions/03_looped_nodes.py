# Worked solution to notebook 03, exercise 1: predict a graph's size
# From the graphs for N = 1 and N = 2 (section 1): each sample adds the same path of nodes (per_sample),
# and a few nodes are shared by all samples (shared). For N samples: per_sample * N + shared.
answer = per_sample * 50 + shared
ex.check_looped_nodes(answer, n=50)
