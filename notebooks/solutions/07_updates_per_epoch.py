# Worked solution to notebook 07, exercise 1: size the schedule
# An epoch of 50 micro-batches in groups of 8 is 6 full groups and a last one of 2: ceil(50 / 8) = 7 updates.
# Each epoch starts fresh groups, so 3 epochs take 3 x 7 updates -- not ceil(150 / 8), which would let a group
# run on across an epoch's end.
per_epoch = math.ceil(50 / 8)
answer = (per_epoch, 3 * per_epoch)
ex.check_updates_per_epoch(answer)
