"""The measuring instruments against answers worked out by hand.

No timings here (speed belongs to the benchmark): node counts, bytes saved for
backward, and heap bytes held, each on a graph small enough to count on paper.
"""

import pytest
import torch

import autograd_lab as lab
from autograd_lab import measure
from autograd_lab.measure import heap_bytes, held_bytes

# ---------------------------------------------------------------- count_nodes


def test_count_nodes_of_a_chain_counted_by_hand():
    w = torch.randn(5, requires_grad=True)
    x = torch.randn(5)
    loss = ((w * x) ** 2).sum()
    # SumBackward0 -> PowBackward0 -> MulBackward0 -> AccumulateGrad(w); x needs no grad: no node
    assert lab.count_nodes(loss) == 4


def test_a_leaf_used_twice_is_one_node():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    # AddBackward0, MulBackward0, AccumulateGrad(a) once (shared by both uses), AccumulateGrad(b)
    assert lab.count_nodes(a * b + a) == 4


def test_count_nodes_of_several_outputs_counts_shared_nodes_once():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    # MulBackward0, AddBackward0, and one AccumulateGrad for each of a and b
    assert lab.count_nodes([a * b, a + b]) == 4


def test_no_graph_no_nodes():
    assert lab.count_nodes(torch.ones(2)) == 0  # nothing recorded
    assert lab.count_nodes(torch.ones(2, requires_grad=True)) == 0  # a leaf has no grad_fn


def test_a_python_loop_adds_one_path_per_iteration():
    w = torch.tensor(2.0, requires_grad=True)
    for n in (1, 2, 7):
        total = sum(w * float(k) for k in range(n))  # 0 + w*0 + w*1 + ...
        # per iteration: MulBackward0 and AddBackward (the running sum); plus AccumulateGrad(w)
        assert lab.count_nodes(total) == 2 * n + 1


# ---------------------------------------------------------------- SavedTensors


def test_saved_bytes_counted_by_hand():
    x = torch.randn(100)  # float32: 400 bytes
    w = torch.randn(100, requires_grad=True)
    with lab.SavedTensors(exclude=[x, w]) as saved:
        out = torch.tanh(w * x) ** 2
    # MulBackward0 saves x (w's gradient needs it; w is not saved since x needs no grad): excluded.
    # TanhBackward0 saves its result (400 bytes); PowBackward0 saves its input, the same storage.
    assert (saved.bytes, saved.storages, saved.tensors) == (400, 1, 3)
    assert saved.mib == 400 / 2**20
    assert "400 bytes in 1 storages, 3 tensors saved" in repr(saved)
    del out


def test_saved_bytes_without_exclusions_count_the_input_too():
    x = torch.randn(100)
    w = torch.randn(100, requires_grad=True)
    with lab.SavedTensors() as saved:
        torch.tanh(w * x) ** 2
    assert (saved.bytes, saved.storages, saved.tensors) == (800, 2, 3)


def test_views_of_one_storage_are_counted_once_and_dtype_sets_the_size():
    w = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    with lab.SavedTensors(exclude=[w]) as saved:
        h = torch.exp(w)  # saves its result: 10 * 8 * 8 bytes
        (h[:5] * h[5:]).sum()  # saves two views of h's storage
    assert (saved.bytes, saved.storages) == (640, 1)
    assert saved.tensors == 3


def test_nothing_saved_for_an_addition():
    a = torch.randn(4, requires_grad=True)
    with lab.SavedTensors() as saved:
        (a + a).sum()
    assert (saved.bytes, saved.storages, saved.tensors) == (0, 0, 0)


def test_saved_tensors_rejects_a_bad_exclude():
    with pytest.raises(TypeError, match="iterable of tensors"):
        lab.SavedTensors(exclude=3)
    with pytest.raises(TypeError, match="tensors only"):
        lab.SavedTensors(exclude=[torch.ones(1), "x"])


def test_nested_blocks_each_count_what_was_saved_while_they_were_open():
    w = torch.randn(100, requires_grad=True)  # excluded everywhere: only results are counted
    with lab.SavedTensors(exclude=[w]) as outer:
        a = torch.exp(w)  # saves its 400-byte result: outer only
        with lab.SavedTensors(exclude=[w]) as inner:
            b = torch.exp(a)  # another 400-byte result: both blocks
        c = torch.exp(b)  # a third: outer only
    assert (inner.bytes, inner.storages, inner.tensors) == (400, 1, 1)
    assert (outer.bytes, outer.storages, outer.tensors) == (1200, 3, 3)
    del c


def test_a_second_with_block_counts_only_itself():
    w = torch.randn(50, requires_grad=True)
    saved = lab.SavedTensors(exclude=[w])
    with saved:
        first = torch.exp(w)
    assert saved.bytes == 200
    with saved:
        second = torch.exp(w).exp()  # two results of 200 bytes
    assert (saved.bytes, saved.storages, saved.tensors) == (400, 2, 2)
    del first, second


def test_the_hooks_are_gone_after_the_block():
    w = torch.randn(10, requires_grad=True)
    with lab.SavedTensors() as saved:
        pass
    torch.exp(w)
    assert saved.tensors == 0 and measure._open_blocks() == []


def test_reentering_an_open_block_or_closing_out_of_order_is_refused():
    saved = lab.SavedTensors()
    with saved:
        with pytest.raises(RuntimeError, match="already open"):
            saved.__enter__()
    outer, inner = lab.SavedTensors(), lab.SavedTensors()
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    assert measure._open_blocks() == []
    with pytest.raises(RuntimeError, match="not open"):
        inner.__exit__(None, None, None)


def test_an_error_inside_the_block_closes_it():
    with pytest.raises(ZeroDivisionError), lab.SavedTensors():
        raise ZeroDivisionError
    assert measure._open_blocks() == []


# ---------------------------------------------------------------- PeakMemory

MIB = 2**20


def test_peak_memory_counts_what_is_alive_at_once_counted_by_hand():
    with lab.PeakMemory() as peak:
        a = torch.zeros(256, 1024)          # 1 MiB
        b = torch.zeros(256, 1024)          # 2 MiB alive
        del a, b
        c = torch.zeros(512, 1024)          # 2 MiB, after both were freed
        d = c + 1                           # 4 MiB alive: the peak
        del c, d
        torch.zeros(128, 1024)              # 0.5 MiB, freed at once
    assert peak.bytes == 4 * MIB and peak.mib == 4.0


def test_saved_and_live_bytes_are_the_same_count_on_every_device(device):
    """Both instruments count tensors: a GPU's saved activations and peak are the CPU's, byte for byte."""
    x = torch.randn(100, device=device)
    w = torch.randn(100, requires_grad=True, device=device)
    with lab.SavedTensors(exclude=[x, w]) as saved:
        out = torch.tanh(w * x) ** 2
    assert (saved.bytes, saved.storages, saved.tensors) == (400, 1, 3)
    with lab.PeakMemory() as peak:
        a = torch.zeros(256, 1024, device=device)
        b = a + 1                           # 2 MiB alive: the peak
        del a, b
    assert peak.bytes == 2 * MIB
    del out


# ---------------------------------------------------------------- allocator_peak


def test_allocator_peak_reads_the_cuda_allocator_above_what_was_there(device):
    if device.type != "cuda":
        with pytest.raises(ValueError, match="measures the CUDA caching allocator, and cpu has none: .*SavedTensors"):
            lab.allocator_peak(lambda: None, device)
        return
    kept = torch.zeros(1024, 1024, device=device)  # 4 MiB allocated before: not counted

    def two_at_once():
        a = torch.zeros(256, 1024, device=device)
        b = a + 1                           # 2 MiB alive at once
        del a, b

    peak = lab.allocator_peak(two_at_once, device)
    assert 2 * MIB <= peak < 3 * MIB, peak
    assert lab.allocator_peak(lambda: None, str(device)) == 0
    del kept


def test_allocator_peak_says_what_is_wrong(monkeypatch):
    with pytest.raises(TypeError, match="expects a function taking no arguments"):
        lab.allocator_peak(torch.zeros(3), "cuda")
    with pytest.raises(TypeError, match="device must be a CUDA device"):
        lab.allocator_peak(lambda: None, "gpu please")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU, and torch sees none here"):
        lab.allocator_peak(lambda: None, "cuda")


def test_peak_memory_leaves_out_what_existed_before_views_of_it_and_in_place_results():
    x = torch.zeros(256, 1024)
    with lab.PeakMemory() as peak:
        x.add_(1)                           # in place: no new storage
        view = x[:128].t()                  # a view of x: no new storage
        y = view.contiguous()               # a copy of half of x: 0.5 MiB
    assert peak.bytes == MIB // 2
    del y


def test_peak_memory_sees_the_backward_pass_and_the_gradient_it_leaves():
    w = torch.randn(256, 1024, requires_grad=True)
    x = torch.randn(256, 1024)
    with lab.PeakMemory() as peak:
        (w * x).sum().backward()            # the product (1 MiB), then backward's gradient of it (1 MiB) = w.grad
    assert w.grad is not None and MIB <= peak.bytes <= 3 * MIB


def test_peak_memory_sees_a_checkpoint_recompute_its_segment():
    from torch.utils.checkpoint import checkpoint

    layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    x = torch.randn(1024, 256)

    def peak(run):
        for p in layers.parameters():
            p.grad = None
        with lab.PeakMemory() as measured:
            run().sum().backward()
        return measured.bytes

    plain = peak(lambda: layers(x))
    whole = peak(lambda: checkpoint(layers, x, use_reentrant=False))
    assert abs(whole - plain) <= 0.02 * plain      # the recomputation brings the whole segment back at once


def test_peak_memory_a_second_block_counts_afresh_and_an_open_block_cannot_reopen():
    peak = lab.PeakMemory()
    with peak:
        torch.zeros(256, 1024)
    with peak:
        torch.zeros(128, 1024)
    assert peak.bytes == MIB // 2 and "bytes at the peak" in repr(peak)
    with peak:
        with pytest.raises(RuntimeError, match="already open"):
            peak.__enter__()


# ---------------------------------------------------------------- time_call (no timing asserted)


def test_time_call_returns_a_positive_median():
    timing = lab.time_call(lambda: None, min_run_time=0.01, label="nothing", threads=1)
    assert timing.median > 0 and timing.runs >= 1 and timing.us == timing.median * 1e6
    assert str(timing).startswith("nothing: ")
    assert 0 < timing.fastest <= timing.median


# ---------------------------------------------------------------- heap_bytes, held_bytes

needs_heap = pytest.mark.skipif(heap_bytes() is None, reason="the C library reports no heap statistics here")


@needs_heap
def test_heap_bytes_grow_by_a_large_allocation():
    before = heap_bytes()
    block = torch.empty(4_000_000, dtype=torch.uint8)
    after = heap_bytes()
    assert 4_000_000 <= after - before <= 4_000_000 + 65536
    del block


@needs_heap
@pytest.mark.parametrize("size", [100_000, 1_000_000])
def test_held_bytes_of_a_tensor_is_its_storage(size):
    held = held_bytes(lambda: torch.empty(size, dtype=torch.uint8))
    assert size <= held <= size + 4096


@needs_heap
def test_held_bytes_of_nothing_is_about_nothing():
    assert abs(held_bytes(lambda: None)) <= 4096


@needs_heap
def test_held_bytes_count_what_a_graph_keeps_beyond_its_saved_data():
    w = torch.randn(1, requires_grad=True)
    xs = torch.randn(2000)

    def looped():  # 2000 one-number paths, each saving one 4-byte number
        return torch.stack([(w * x).exp() for x in xs]).sum()

    def vectorized():
        return (w * xs).exp().sum()

    held_loop, held_vec = held_bytes(looped), held_bytes(vectorized)
    assert held_vec < 4 * 2000 * 2 + 16384  # about the data: exp's result (8000 bytes), little more
    assert held_loop > 50 * held_vec  # nodes, tensor records, one small block per number


def test_held_bytes_where_the_heap_cannot_be_read(monkeypatch):
    monkeypatch.setattr(measure, "_MALLINFO2", None)
    assert heap_bytes() is None
    assert held_bytes(lambda: torch.ones(3)) is None


def test_held_bytes_rejects_bad_arguments():
    with pytest.raises(TypeError, match="function taking no arguments"):
        held_bytes(torch.ones(3))
    with pytest.raises(ValueError, match="at least 1"):
        held_bytes(lambda: None, repeats=0)
