"""``AllReduceLog(model)``: what a ``DistributedDataParallel`` model hands to all-reduce, call by call.

It registers a DDP communication hook that does what DDP does without one -- divide the bucket by the
number of ranks, then one all-reduce that sums it over the ranks -- and records the bytes of every call.
DDP calls the hook once per bucket of gradients, in every backward pass that synchronizes. Registering
it changes neither the gradients nor the buckets; DDP accepts one hook per model, before its first
backward pass.

torch is imported on first use, so that the launcher's guard process (which imports this package)
starts without it.
"""

from __future__ import annotations

__all__ = ["AllReduceLog"]


class AllReduceLog:
    """The all-reduce calls of one DDP model: ``sizes`` holds the bytes of each call, in order.

    ``log = AllReduceLog(model)`` right after ``model = DistributedDataParallel(...)``; ``log.take()``
    returns the sizes recorded since the last ``take()`` and starts afresh (one update at a time).
    """

    def __init__(self, model):
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            raise TypeError(f"AllReduceLog(model) needs a DistributedDataParallel model, got {type(model).__name__}: "
                            "wrap it first, model = DDP(model), then log = AllReduceLog(model).")
        self.sizes: list[int] = []
        self._group = model.process_group
        try:
            model.register_comm_hook(state=None, hook=self._hook)
        except RuntimeError as err:
            raise RuntimeError(f"AllReduceLog could not attach to this model: {err} DDP takes one communication "
                               "hook per model, registered before its first backward pass: make a fresh model "
                               "and attach the log right after wrapping it.") from None

    def _hook(self, state, bucket):
        import torch.distributed as dist

        grads = bucket.buffer()  # one flat tensor holding the bucket's gradients
        self.sizes.append(grads.numel() * grads.element_size())
        grads.div_(self._group.size())  # the sum over the ranks, divided by their number: the mean
        return dist.all_reduce(grads, group=self._group, async_op=True).get_future().then(lambda f: f.value()[0])

    def take(self) -> list[int]:
        """The bytes of each all-reduce call since the last ``take()``; the log starts afresh."""
        sizes, self.sizes = self.sizes, []
        return sizes
