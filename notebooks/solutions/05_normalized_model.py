# Worked solution to notebook 05, exercise 3: keep the normalization, lose the pitfall
# GroupNorm (like LayerNorm) normalizes each sample over its own features, so a sample's output does not
# depend on which micro-batch it is in; BatchNorm's batch statistics would. 4 groups of 4 of the 16 units.
def make_model():
    return nn.Sequential(nn.Linear(8, 16), nn.GroupNorm(4, 16), nn.Tanh(), nn.Linear(16, 1))

answer = make_model
ex.check_normalized_model(answer)
