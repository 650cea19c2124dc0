"""make test-cuda (tools/run_cuda_tests.py), tested without a GPU: it stops and says why where torch sees none; its
claim suite selects the CUDA cases of the device and gpu fixtures (tests/conftest.py), which skip here and fail
under it; and its sanitiser (tools/nbval_devices.cfg) leaves out of nbval's comparison exactly the lines that
state a fact of the device, as a GPU's run would print them against the stored CPU outputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tools import run_cuda_tests

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IGNORE_TAG = "nbval-ignore-output"


# --------------------------------------------------------------------------- no GPU: say so, test nothing


@pytest.mark.parametrize("built_for, words", [
    (None, ["is a CPU build: it cannot use a GPU", "TORCH_INDEX=https://download.pytorch.org/whl/cu128"]),
    ("13.0", ["is built for CUDA 13.0 but sees no GPU here", "run make test-cuda on a machine with one"]),
], ids=["cpu build", "cuda build"])
def test_without_a_gpu_it_says_why_and_stops_before_testing_anything(monkeypatch, capsys, built_for, words):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", built_for)
    ran = []
    monkeypatch.setattr(run_cuda_tests.subprocess, "call", lambda *a, **k: ran.append(a) or 0)
    assert run_cuda_tests.main(["--jobs", "1"]) == run_cuda_tests.NO_GPU_EXIT != 0
    err = capsys.readouterr().err
    assert err.startswith("make test-cuda: no CUDA GPU here, so nothing was tested.")
    assert all(w in err for w in words), err
    assert ran == []


@pytest.mark.parametrize("codes, verdict", [((0, 0), 0), ((0, 1), 1), ((1, 0), 1)])
def test_with_a_gpu_both_suites_run_with_cuda_required_and_both_must_pass(monkeypatch, capsys, codes, verdict):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(run_cuda_tests, "device_name", lambda: "a GPU")
    calls, results = [], iter(codes)
    monkeypatch.setattr(run_cuda_tests.subprocess, "call",
                        lambda cmd, cwd, env: calls.append((cmd, env)) or next(results))
    assert run_cuda_tests.main(["--jobs", "3"]) == verdict
    assert [env[run_cuda_tests.REQUIRE_CUDA] for _, env in calls] == ["1", "1"]
    claims, notebooks = (cmd for cmd, _ in calls)
    assert claims[-2:] == list(run_cuda_tests.CLAIM_FOLDERS) and "-m" in claims and notebooks[-1] == "notebooks"
    assert f"--nbval-sanitize-with={run_cuda_tests.SANITIZER}" in notebooks
    out = capsys.readouterr().out
    assert "make test-cuda: on a GPU" in out and ("FAILED" in out) == bool(verdict)


def test_the_make_target_runs_it():
    makefile = (REPO / "Makefile").read_text()
    target = r"^test-cuda: setup-test( ## .*)?\n\t\$\(PY\) -m tools test-cuda --jobs \$\(JOBS\)$"
    assert re.search(target, makefile, re.M)


# --------------------------------------------------------------------------- the device fixtures


def _fixture_project(pytester):
    marks = ["browser", "hub", "autograde", "package", "slow", "cuda"]
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {mark}: a mark\n" for mark in marks))
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text())
    for folder, body in (("tests/instruments", "def test_every_device(device):\n    assert device.type in ('cpu', "
                                                  "'cuda')\n\n\ndef test_no_device():\n    pass\n"),
                         ("tests/notebooks", "def test_gpu_alone(gpu):\n    assert gpu.type == 'cuda'\n")):
        (pytester.path / folder).mkdir(parents=True)
        (pytester.path / folder / f"test_{folder.split('/')[1]}.py").write_text(body)


def _claims_args() -> list:
    claims, _ = run_cuda_tests.commands(jobs=1)
    args = claims[3:]
    at = args.index("-n")
    return args[:at] + args[at + 2:]  # in this process: no workers


def test_the_claim_suite_selects_the_cuda_cases_of_both_fixtures(pytester, monkeypatch):
    _fixture_project(pytester)
    result = pytester.runpytest(*_claims_args(), "--collect-only", "-q")
    collected = {line for line in result.outlines if "::" in line}
    assert collected == {"tests/instruments/test_instruments.py::test_every_device[cuda]",
                         "tests/notebooks/test_notebooks.py::test_gpu_alone[cuda]"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="here the CUDA cases would run")
@pytest.mark.parametrize("required, outcome", [("", {"passed": 2, "skipped": 2}), ("1", {"passed": 2, "errors": 2})],
                         ids=["make test", "make test-cuda"])
def test_without_a_gpu_a_cuda_case_skips_and_says_why_unless_cuda_is_required(pytester, monkeypatch, required,
                                                                                outcome):
    _fixture_project(pytester)
    monkeypatch.setenv(run_cuda_tests.REQUIRE_CUDA, required)
    result = pytester.runpytest("-rs", "tests")
    result.assert_outcomes(**outcome)
    assert "no CUDA GPU here (torch" in result.stdout.str() and "make test-cuda runs this case on a GPU" in \
        result.stdout.str()


@pytest.mark.slow
def test_every_cuda_case_of_the_suite_is_where_the_claim_suite_looks():
    """A CUDA case is a test (or a fixture) that takes the conftest's ``device`` or ``gpu`` fixture: every file that
    has one lies in a folder make test-cuda runs."""
    import ast

    takers = set()
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and {"device", "gpu"} & {a.arg for a in node.args.args}:
                takers.add(path.relative_to(REPO).as_posix())
    assert takers, "the suite has CUDA cases"
    outside = sorted(path for path in takers if not path.startswith(run_cuda_tests.CLAIM_FOLDERS))
    assert outside == [], f"add their folder to tools/run_cuda_tests.CLAIM_FOLDERS: {outside}"


# --------------------------------------------------------------------------- the sanitiser


def _sanitizer():
    from nbval.plugin import get_sanitize_patterns

    return get_sanitize_patterns(run_cuda_tests.SANITIZER.read_text())


def sanitize(text: str) -> str:
    for regex, replace in _sanitizer():
        text = re.sub(regex, replace, text)
    return text


def _compared_texts(path: Path):
    """(cell id, text) of every output nbval compares in a notebook: its streams and text data."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code" or IGNORE_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                yield cell.get("id"), "".join(text)


def test_nbval_reads_one_rule_from_the_sanitiser_and_it_blanks_whole_lines():
    (regex, replace), = _sanitizer()
    assert replace == r"\1", "an empty replacement: nbval reads a pair only when 'replace: ' has text after it"
    assert re.sub(regex, replace, "a\non cuda: x\nb\n") == "a\nb\n"
    assert re.sub(regex, replace, "on cuda:0: last line, no newline") == ""


@pytest.mark.parametrize("line, blanked", [
    ("on cpu: w.to(device) is w -> True\n", True),
    ("on cuda: w.to(device) is w -> False\n", True),
    ("on cuda:1: allocator peak 1.2 MiB\n", True),
    ("MLP 16-64-1  on cpu, N =   10: vectorized 0.85 ms\n", False),  # a device named mid-line: compared
    ("on cpus: 4\n", False),
    ("  on cuda: indented, so not a device line\n", False),
    ("ran on cuda: true\n", False),
])
def test_only_a_line_that_begins_with_on_device_colon_is_left_out(line, blanked):
    assert sanitize("before\n" + line + "after\n") == ("before\nafter\n" if blanked else "before\n" + line + "after\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_gpus_run_of_the_stored_outputs_compares_equal_and_nothing_else_is_left_out(path):
    """Each compared output as a GPU would print it ("cpu" in its device lines turned "cuda:0") sanitises to the
    same text as the stored one; and the sanitiser removes from the stored outputs the device lines only."""
    for cell_id, text in _compared_texts(path):
        on_gpu = re.sub(r"(?m)^on cpu:", "on cuda:0:", text)
        assert sanitize(on_gpu) == sanitize(text), cell_id
        kept = sanitize(text).splitlines()
        assert [line for line in text.splitlines() if line not in kept] == \
            [line for line in text.splitlines() if line.startswith("on cpu:")], cell_id


def test_the_notebooks_device_lines_are_compared_on_the_cpu_and_a_gpu_only_line_goes():
    """01's line names the device and is compared (stored "on cpu:"); 04 prints its allocator line on a GPU only,
    after each k, and the sanitised GPU output is the stored one."""
    lines = [text for path in NOTEBOOKS for _, text in _compared_texts(path) if "on cpu:" in text]
    assert any(text.startswith("on cpu: w.to(device) is w") for text in lines)
    stored = dict(_compared_texts(REPO / "notebooks" / "04_gradient_accumulation.ipynb"))["mem-run"]
    on_gpu = "".join(line + "\non cuda: allocator peak 1.234 MiB\n" for line in stored.splitlines())
    assert sanitize(on_gpu) == stored


NOTEBOOK_CELL = {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {}, "source": "print('x = 1')\n"
                 "print('on cuda:0: a fact of this GPU')", "outputs": [{"name": "stdout", "output_type": "stream",
                                                                       "text": "x = 1\non cpu: a fact of this CPU\n"}]}


@pytest.mark.parametrize("sanitized", [True, False], ids=["make test-cuda", "make test"])
def test_nbval_itself_compares_a_gpus_device_line_only_with_the_sanitiser(pytester, sanitized):
    """nbval on a notebook whose stored output names the CPU and whose run prints a GPU's line (its kernel here)."""
    notebook = {"cells": [NOTEBOOK_CELL], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                      "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (pytester.path / "device.ipynb").write_text(json.dumps(notebook))
    args = ["--nbval", "--nbval-current-env", "-p", "no:cacheprovider", "device.ipynb"]
    result = pytester.runpytest_subprocess(*args, *([f"--nbval-sanitize-with={run_cuda_tests.SANITIZER}"] * sanitized),
                                           timeout=300)
    result.assert_outcomes(**({"passed": 1} if sanitized else {"failed": 1}))
