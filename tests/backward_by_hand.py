"""The backward loop of notebook 02, written out again for the tests: run each node of a recorded graph by hand,
in reverse topological order, and sum what reaches each leaf. tests/notebooks/test_grad_fn_chains.py checks the
notebook's own loop against this copy and both against ``loss.backward()``; the stepper's tests record their logs
with it.
"""

import torch


def reverse_topological_order(root):
    order, seen = [], set()

    def visit(node):
        if node is None or node in seen:
            return
        seen.add(node)
        for child, _ in node.next_functions:
            visit(child)
        order.append(node)

    visit(root)
    return order[::-1]


def backward_by_hand(loss, log=None):
    """{leaf: gradient} for ``loss``, one node at a time; ``log`` (a list) receives (node, grad_output, grads)."""
    pending = {loss.grad_fn: torch.ones_like(loss)}
    leaf_grads = {}
    for node in reverse_topological_order(loss.grad_fn):
        grad_output = pending.pop(node)
        if hasattr(node, "variable"):
            leaf = node.variable
            leaf_grads[leaf] = leaf_grads[leaf] + grad_output if leaf in leaf_grads else grad_output
            grads = ()
        else:
            with torch.no_grad():
                grads = node(grad_output)
            grads = grads if isinstance(grads, tuple) else (grads,)
            for (child, k), grad in zip(node.next_functions, grads):
                if child is None or grad is None:
                    continue
                grad = grad.sum_to_size(child._input_metadata[k].shape)  # the engine sums on every edge
                pending[child] = pending[child] + grad if child in pending else grad
        if log is not None:
            log.append((node, grad_output, grads))
    return leaf_grads
