"""The package's top level is exactly the instruments a user is taught: what the notebooks import from it and
what README.md and docs/teaching.md show, and nothing else.

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

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


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


PAGES = ("README.md", "docs/teaching.md")  # the pages that teach a user the package's names


def _page_names() -> set:
    """The package's names the pages' code teaches a learner or an instructor to call, and any module below
    the top level that they import from (there should be none)."""
    code = "\n".join(block for page in PAGES
                     for block in re.findall(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), re.S))
    below = set(re.findall(r"^from (autograd_lab\.\w+) import", code, re.M)) - {"autograd_lab.exercises"}
    return set(re.findall(r"\b([A-Za-z_]+)\(", code)) & set(autograd_lab.__all__) | set(
        n.strip() for line in re.findall(r"^from autograd_lab import (.+)$", code, re.M) for n in line.split(",")
    ) | below


def test_all_is_exactly_what_the_notebooks_import_and_the_pages_teach():
    used = _page_names()
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


def test_the_editors_import_block_names_the_same_homes():
    """The ``if TYPE_CHECKING:`` imports (what an editor follows) and the lazy homes are one list."""
    tree = ast.parse(Path(autograd_lab.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body
                 if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    static = {a.name: node.module for node in block.body for a in node.names}
    assert static == autograd_lab._HOMES
    assert sorted(autograd_lab.__all__) == sorted(autograd_lab._HOMES)
