"""``make bench``'s CUDA part (``--parts cuda``): the course on a GPU, kept in the results' ``"cuda"`` section,
beside the CPU figures.

- ``environment``: the GPU, its driver, torch with its CUDA and cuDNN versions, and TF32 as the runs had it
- ``scale``: the scale part's three measurements (tools/bench.py) on the GPU
- ``notebooks``, ``widgets``, ``claims``: each notebook in a fresh kernel, which picks the GPU, against the floor
  measured the same way; its widgets; and the notebooks' timing claims, checked on the GPU's own measurements
- ``architectures``: the instruments on real architectures on the GPU, each built without weights: a 12-layer
  GPT-2 from a transformers config, ViT-B/16 and ResNet-18 from torchvision. One forward and backward pass
  (median time), its graph's nodes, the bytes it saves for backward, the CUDA allocator's peak, and the time
  to draw it as a learner would (``record_modules``, then ``draw_graph``, laid out)

Where torch sees no GPU the part measures nothing and says so. A reference run on a machine without a GPU keeps
the committed reference's CUDA section, measured elsewhere (its environment says where); ``--reference --parts
cuda`` replaces only that section (:func:`into_reference`).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time

from tools import bench

PART = "cuda"
DRIVER_TIMEOUT_S = 10.0


def no_gpu() -> str | None:
    """Why there is nothing to measure here, or None when torch sees a GPU."""
    import torch

    if torch.cuda.is_available():
        return None
    return f"torch {torch.__version__} sees no CUDA GPU here"


def _driver() -> str:
    """The NVIDIA driver's version, as nvidia-smi reports it; else the CUDA driver API version torch sees."""
    import torch

    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=DRIVER_TIMEOUT_S)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    api = torch._C._cuda_getDriverVersion() if hasattr(torch._C, "_cuda_getDriverVersion") else 0
    return f"unknown (no nvidia-smi; CUDA driver API {api // 1000}.{api % 1000 // 10})" if api else "unknown"


def environment(device) -> dict:
    import torch

    props = torch.cuda.get_device_properties(device)
    return {"device": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_GiB": round(props.total_memory / 2**30, 1), "driver": _driver(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "tf32": {"cudnn": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32},
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


# --------------------------------------------------------------------------------------------
# real architectures, built without weights


def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=12))
    ids = torch.randint(0, model.config.vocab_size, (2, 64))
    return model, {"input_ids": ids, "labels": ids}


def _vit():
    import torch
    from torchvision.models import vit_b_16

    return vit_b_16(weights=None), torch.randn(2, 3, 224, 224)


def _resnet():
    import torch
    from torchvision.models import resnet18

    return resnet18(weights=None), torch.randn(2, 3, 224, 224)


# name: (what builds it, the package it needs). Each builder returns (model, inputs): a tensor or keyword arguments.
ARCHITECTURES = {
    "GPT-2, 12 layers (transformers config)": (_gpt2, "transformers"),
    "ViT-B/16 (torchvision)": (_vit, "torchvision"),
    "ResNet-18 (torchvision)": (_resnet, "torchvision"),
}


def _loss(model, inputs):
    """The model's loss on ``inputs``: the output's own (a transformers model given labels), else a mean square."""
    out = model(**inputs) if isinstance(inputs, dict) else model(inputs)
    loss = getattr(out, "loss", None)
    return loss if loss is not None else out.float().square().mean()


def _moved(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()} if isinstance(inputs, dict) else inputs.to(device)


def bench_architecture(build, device, runs: int) -> dict:
    """One architecture on ``device``: its pass, its graph, what it saves, the allocator's peak, its drawing."""
    import torch

    from autograd_lab.graph import draw_graph
    from autograd_lab.measure import SavedTensors, allocator_peak, count_nodes
    from autograd_lab.modules import record_modules

    torch.manual_seed(0)
    model, inputs = build()
    model, inputs = model.to(device), _moved(inputs, device)
    leaves = list(inputs.values()) if isinstance(inputs, dict) else [inputs]

    def step():
        model.zero_grad(set_to_none=True)
        _loss(model, inputs).backward()

    pass_s = bench._time(step, device, min_time=0.5, max_runs=20)
    peak = allocator_peak(step, device) if device.type == "cuda" else None
    with SavedTensors(exclude=[*leaves, *model.parameters()]) as saved:
        loss = _loss(model, inputs)
    nodes = count_nodes(loss)
    draws, picture = [], False
    for _ in range(runs):
        start = time.perf_counter()
        with record_modules(model):
            loss = _loss(model, inputs)
        picture = "image/svg+xml" in draw_graph(loss, params=model, timeout=bench.DRAW_TIMEOUT_S)._repr_mimebundle_()
        bench._sync(device)
        draws.append(time.perf_counter() - start)
    return {"parameters": sum(p.numel() for p in model.parameters()), "nodes": nodes,
            "forward_backward_ms": round(pass_s * 1e3, 2), "saved_MiB": round(saved.bytes / 2**20, 1),
            "allocator_peak_MiB": None if peak is None else round(peak / 2**20, 1),
            "draw_s": round(statistics.median(draws), 3), "picture": picture}


def bench_architectures(device, runs: int, architectures=None) -> list:
    """A row per architecture; one whose package is not installed says so instead of its figures."""
    import importlib.util

    rows = []
    for name, (build, package) in (architectures or ARCHITECTURES).items():
        if importlib.util.find_spec(package) is None:
            rows.append({"model": name, "not_measured": f"{package} is not installed"})
            continue
        rows.append({"model": name, **bench_architecture(build, device, runs)})
    return rows


# --------------------------------------------------------------------------------------------
# the section


def measure(device, *, runs: int, widget_calls: int, max_n: int, draw_runs: int,
            parts=("scale", "notebooks", "architectures"), architectures=None) -> dict:
    """The CUDA section's figures on ``device`` (its environment apart): the ``parts`` asked for."""
    section: dict = {}
    if "scale" in parts:
        section["scale"] = {"loop_vs_vectorized": bench._scale_loop_vs_vectorized(device, max_n),
                            "saved_vs_k": bench._scale_saved_vs_k(device),
                            "per_sample_grads": bench._scale_per_sample_grads(device)}
    if "notebooks" in parts:
        bench.bench_notebooks(runs, widget_calls, section)
    if "architectures" in parts:
        section["architectures"] = bench_architectures(device, draw_runs, architectures)
    return section


def bench_cuda(results: dict, *, runs: int, widget_calls: int, max_n: int, draw_runs: int) -> None:
    """``results["cuda"]``: the environment and every figure of this part, on the first GPU; nothing without one."""
    import torch

    why = no_gpu()
    if why is not None:
        print(f"bench: the cuda part measured nothing: {why}.")
        return
    device = torch.device("cuda", 0)
    results[PART] = {"environment": environment(device),
                     "settings": {"runs": runs, "widget_calls": widget_calls, "max_n": max_n, "draw_runs": draw_runs},
                     **measure(device, runs=runs, widget_calls=widget_calls, max_n=max_n, draw_runs=draw_runs)}


def print_section(table, section: dict) -> None:
    """The CUDA section as tables, with ``table`` (tools/bench.py's print_tables)."""
    env = section["environment"]
    print(f"\nOn CUDA: {env['device']} (compute capability {env['capability']}, {env['memory_GiB']} GiB), driver "
          f"{env['driver']}, torch {env['torch']} with CUDA {env['torch_cuda']} and cuDNN {env['cudnn']}")
    bench._notebook_tables(table, section)
    if "scale" in section:
        bench._scale_tables(table, {f"cuda ({env['device']})": section["scale"]})
    table("The instruments on real architectures, on CUDA", section.get("architectures", []),
          ["model", "parameters", "nodes", "forward_backward_ms", "saved_MiB", "allocator_peak_MiB", "draw_s",
           "picture", "not_measured"])


def into_reference(results: dict, reference: dict | None, parts) -> dict:
    """What the reference becomes after this run: the run itself when it measured every part, its CUDA section
    taken from the committed ``reference`` when it has none of its own; only the CUDA section replaced when the
    run measured the cuda part alone."""
    if set(parts) == {PART}:
        if PART not in results:
            raise SystemExit("bench: --reference --parts cuda needs a GPU, and this run measured nothing on one")
        if reference is None:
            raise SystemExit("bench: --reference --parts cuda adds to the committed reference, and there is none")
        return {**reference, PART: results[PART]}
    if PART not in results and reference is not None and PART in reference:
        return {**results, PART: reference[PART]}
    return results
