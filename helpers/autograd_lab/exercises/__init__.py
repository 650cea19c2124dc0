"""Answer checks for the exercises, one module per notebook, named after it (``leaf_tensors``,
``grad_fn_chains``, ...): ``from autograd_lab.exercises import leaf_tensors as ex`` then ``ex.check_leaves(answer)``.

Each check takes the learner's answer and returns a ``Feedback`` (:mod:`.feedback`): right, wrong
(with a hint that teaches), not answered yet, or malformed. What the checks share lives beside them:
reading an answer (:mod:`.answers`) and watching a learner's training loop (:mod:`.loops`).
"""
