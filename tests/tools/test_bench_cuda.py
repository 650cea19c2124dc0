"""make bench's CUDA part (tools/bench_cuda.py), tested without a GPU: it measures nothing where there is none and
says so; its measurements run on any device (here on the CPU, with small stand-ins for the real architectures);
its section goes into the reference beside the CPU figures and onto docs/performance.md, which says "not measured
yet" while the reference has none. The measuring itself runs on a GPU: tools/gpu/check.sh.
"""

import copy
import json

import pytest
import torch

from tools import bench, bench_cuda, bench_page
from tools.architectures import GPT2


def _reference() -> dict:
    return json.loads(bench_page.REFERENCE.read_text(encoding="utf-8"))


def _tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16, bos_token_id=0, eos_token_id=0)
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    return GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


STAND_INS = {  # the real ones' two kinds of input: keyword arguments with labels, and one tensor
    "GPT-2 from a transformers config, 2 layers": (_tiny_gpt2, "transformers"),
    "GPT-2-style, 12 narrow blocks": (lambda: (GPT2(), torch.randint(0, 100, (2, 16))), "torch"),
}


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_without_a_gpu_the_part_measures_nothing_and_says_so(no_gpu, capsys):
    results = {"environment": {}}
    bench_cuda.bench_cuda(results, runs=1, widget_calls=1, max_n=10, draw_runs=1)
    assert results == {"environment": {}}
    assert "the cuda part measured nothing: torch" in capsys.readouterr().out


def test_each_architecture_gets_its_figures_on_any_device():
    rows = bench_cuda.bench_architectures(torch.device("cpu"), runs=1, architectures=STAND_INS)
    assert [r["model"] for r in rows] == list(STAND_INS)
    for row in rows:
        assert row["picture"] and row["nodes"] > 50 and row["saved_MiB"] > 0 and row["draw_s"] > 0, row
        assert row["forward_backward_ms"] > 0 and row["parameters"] > 0
        assert row["allocator_peak_MiB"] is None, "the CPU has no caching allocator to read"


def test_an_architecture_whose_package_is_missing_says_so(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "torchvision" else find_spec(name))
    wanted = {name: entry for name, entry in bench_cuda.ARCHITECTURES.items() if entry[1] == "torchvision"}
    assert len(wanted) == 2, "ViT-B/16 and ResNet-18 come from torchvision"
    rows = bench_cuda.bench_architectures(torch.device("cpu"), runs=1, architectures=wanted)
    assert rows == [{"model": name, "not_measured": "torchvision is not installed"} for name in wanted]


def test_the_section_holds_the_parts_asked_for(monkeypatch):
    monkeypatch.setattr(bench, "_scale_loop_vs_vectorized", lambda device, max_n: [{"N": max_n}])
    monkeypatch.setattr(bench, "_scale_saved_vs_k", lambda device: [{"k": 1}])
    monkeypatch.setattr(bench, "_scale_per_sample_grads", lambda device: {"N": 1000})
    section = bench_cuda.measure(torch.device("cpu"), runs=1, widget_calls=1, max_n=10, draw_runs=1,
                                 parts=("scale", "architectures"), architectures=dict(list(STAND_INS.items())[1:]))
    assert section["scale"] == {"loop_vs_vectorized": [{"N": 10}], "saved_vs_k": [{"k": 1}],
                                "per_sample_grads": {"N": 1000}}
    assert len(section["architectures"]) == 1 and "notebooks" not in section


def test_the_driver_is_read_from_nvidia_smi_or_else_from_torch(monkeypatch):
    monkeypatch.setattr(bench_cuda.shutil, "which", lambda name: None)
    monkeypatch.setattr(torch._C, "_cuda_getDriverVersion", lambda: 12040, raising=False)
    assert bench_cuda._driver() == "unknown (no nvidia-smi; CUDA driver API 12.4)"


def _fake_section() -> dict:
    """A CUDA section of the real shape: figures of the CPU reference run, a GPU's environment."""
    reference = _reference()
    rows = bench_cuda.bench_architectures(torch.device("cpu"), runs=1, architectures=dict(list(STAND_INS.items())[1:]))
    rows.append({"model": "ViT-B/16 (torchvision)", "not_measured": "torchvision is not installed"})
    return {"environment": {"device": "NVIDIA Example GPU", "capability": "9.0", "memory_GiB": 79.2,
                            "driver": "580.1", "torch": "2.11.0+cu130", "torch_cuda": "13.0", "cudnn": 91300,
                            "tf32": {"cudnn": True, "matmul": False}, "date": "2026-12-24 10:00:00"},
            "settings": reference["settings"], "notebooks": reference["notebooks"], "widgets": reference["widgets"],
            "claims": reference["claims"], "scale": reference["scale"]["cpu"], "architectures": rows}


def test_the_page_says_not_measured_yet_until_the_reference_has_a_cuda_section():
    reference = _reference()
    if "cuda" in reference:
        pytest.skip("the committed reference has its CUDA section")
    assert bench_page.cuda(reference).startswith("Not measured yet: no reference run on a CUDA GPU.")


def test_a_cuda_section_becomes_tables_on_the_page():
    results = {**_reference(), "cuda": _fake_section()}
    text = bench_page.cuda(results)
    assert "- GPU: NVIDIA Example GPU (compute capability 9.0, 79.2 GiB), driver 580.1" in text
    assert "- torch 2.11.0+cu130, CUDA 13.0, cuDNN 91300; TF32: cudnn on, matmul off" in text
    for heading in ("### The notebooks on the GPU", "### At scale on the GPU", "### The instruments on real"):
        assert heading in text
    assert "| GPT-2-style, 12 narrow blocks |" in text
    assert "Not measured: ViT-B/16 (torchvision) (torchvision is not installed)." in text
    page = bench_page.render(bench_page.PAGE.read_text(encoding="utf-8"), results)
    assert text in page and "Not measured yet" not in page


@pytest.mark.parametrize("parts, committed_cuda, run_cuda, expected", [
    (set(bench.PARTS), "committed", None, "committed"),  # a CPU machine's reference keeps the GPU's section
    (set(bench.PARTS), "committed", "new", "new"),       # a GPU machine's whole run replaces it
    (set(bench.PARTS), None, None, None),
    ({"cuda"}, "committed", "new", "new"),                # the cuda part alone: only its section changes
], ids=["cpu reference", "gpu reference", "never measured", "cuda part alone"])
def test_the_reference_keeps_or_replaces_its_cuda_section(parts, committed_cuda, run_cuda, expected):
    committed = {"environment": {"machine": "committed"}, **({"cuda": committed_cuda} if committed_cuda else {})}
    run = {"environment": {"machine": "this run"}, **({"cuda": run_cuda} if run_cuda else {})}
    made = bench_cuda.into_reference(copy.deepcopy(run), committed, parts)
    assert made.get("cuda") == expected
    assert made["environment"]["machine"] == ("committed" if parts == {"cuda"} else "this run")


def test_the_cuda_part_alone_cannot_become_the_reference_without_a_gpu_or_a_reference():
    with pytest.raises(SystemExit, match="needs a GPU"):
        bench_cuda.into_reference({"environment": {}}, {"environment": {}}, {"cuda"})
    with pytest.raises(SystemExit, match="there is none"):
        bench_cuda.into_reference({"cuda": {}}, None, {"cuda"})


def test_reference_takes_every_part_or_the_cuda_part_alone():
    assert bench.parse_args(["--reference", "--parts", "cuda"]).parts == {"cuda"}
    assert bench.parse_args(["--reference"]).parts == set(bench.PARTS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--reference", "--parts", "scale"])
    assert bench.parse_args([]).devices == "cpu", "the scale part on the CPU: the cuda part measures it on a GPU"
