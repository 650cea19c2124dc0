"""The package's top level is exactly the instruments the notebooks import from it, and nothing else.

Every notebook imports its instruments from ``autograd_lab`` alone (``from autograd_lab import ...`` or
``lab.name`` after ``import autograd_lab as lab``); the answer checks come from ``autograd_lab.exercises``.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

import autograd_lab

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _sources():
    """(where, [code]) for every notebook (its cells, IPython magics turned into Python) and worked solution."""
    to_python = TransformerManager().transform_cell
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        yield path.name, [to_python("".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    for path in sorted((NOTEBOOKS / "solutions").glob("*.py")):
        yield f"solutions/{path.name}", [path.read_text(encoding="utf-8")]


def _uses(sources: list) -> tuple[set, set]:
    """(names taken from autograd_lab, modules below autograd_lab imported) in the code of one notebook."""
    trees = [ast.parse(source) for source in sources]
    aliases = {a.asname or a.name for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name == "autograd_lab"}
    names, submodules = set(), set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module == "autograd_lab":
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograd_lab."):
            submodules.add(node.module)
        elif isinstance(node, ast.Import):
            submodules |= {a.name for a in node.names if a.name.startswith("autograd_lab.")}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names, submodules


def _readme_names() -> set:
    """The package's names README's code teaches a learner to call on their own model."""
    readme = (NOTEBOOKS.parent / "README.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```python\n(.*?)```", readme, re.S))
    return set(re.findall(r"\b([A-Za-z_]+)\(", code)) & set(autograd_lab.__all__) | set(
        n.strip() for line in re.findall(r"^from autograd_lab import (.+)$", code, re.M) for n in line.split(","))


def test_all_is_exactly_what_the_notebooks_import_and_readme_teaches():
    used = _readme_names()
    for _, sources in _sources():
        used |= _uses(sources)[0]
    assert sorted(autograd_lab.__all__) == sorted(used)


def test_the_notebooks_take_instruments_from_the_top_level_and_checks_from_exercises_only():
    below = {where: _uses(sources)[1] for where, sources in _sources()}
    assert {where: mods for where, mods in below.items() if mods - {"autograd_lab.exercises"}} == {}


def test_every_name_of_the_top_level_is_there_and_listed():
    for name in autograd_lab.__all__:
        assert getattr(autograd_lab, name) is not None
    assert set(autograd_lab.__all__) <= set(dir(autograd_lab))
    assert not hasattr(autograd_lab, "no_such_instrument")


def test_the_small_modules_load_without_torch():
    """The guard of a torchrun run and the test drivers import these; they must start at once."""
    code = ("import sys, autograd_lab, autograd_lab.processes, autograd_lab.arguments, autograd_lab.distributed.sweep\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
