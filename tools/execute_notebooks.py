"""Re-execute notebooks in a fresh kernel, top to bottom, and save them (run by `make notebooks`).

Stored outputs then always come from the current code. Stale widget state is
stripped from the notebook metadata (it would describe widgets of a kernel that
no longer exists). Usage: python -m tools notebooks notebooks/*.ipynb
"""

import sys
import time
from pathlib import Path

import nbformat

from tools.kernels import notebook_client


def merge_streams(outputs):
    """One print may arrive as several stream messages: store consecutive pieces of one stream as one output."""
    merged = []
    for out in outputs:
        last = merged[-1] if merged else None
        if last is not None and out.output_type == "stream" and last.output_type == "stream" and last.name == out.name:
            merged[-1].text += out.text
        else:
            merged.append(out)
    return merged


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = notebook_client(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,  # timestamps would change every stored cell on every run
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    lang = nb.metadata.setdefault("language_info", {})
    for key in ("version",):  # the patch version of the machine that ran it says nothing to a reader
        lang.pop(key, None)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths=None) -> int:
    paths = sys.argv[1:] if paths is None else paths
    if not paths:
        sys.exit("usage: python -m tools notebooks NOTEBOOK.ipynb [...]")
    for name in paths:
        path = Path(name)
        if not path.exists():
            sys.exit(f"{path}: no such notebook")
        seconds = execute(path)
        print(f"{path}: executed in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
