"""The global names a notebook cell binds and reads, and what follows from them: which worked solutions run
without the rest of their notebook (``standalone_runs``: in a fresh namespace holding the notebook's setup cell and
imports), for the tests that run every worked solution and for nbgrader's round trip."""

from __future__ import annotations

import ast
import builtins
import symtable
from pathlib import Path

import nbformat

from .cells import is_answer_cell, source_of
from .layout import exercises
from .source import TEST_SOURCE


def _python(code: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(code)  # magics and shell escapes become plain Python


def global_names(code: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at top level, names it reads from the notebook's globals)."""
    try:
        table = symtable.symtable(_python(code), "<cell>", "exec")
    except SyntaxError:
        return set(), set()
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    stack = list(table.get_children())
    while stack:  # functions, lambdas, comprehensions: the globals they read
        child = stack.pop()
        stack.extend(child.get_children())
        read |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
    return bound, read - bound


def imports(code: str) -> list[str]:
    """The top-level import statements of a cell, as source lines."""
    try:
        tree = ast.parse(_python(code))
    except SyntaxError:
        return []
    return [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]


def solution_cell(ex) -> str:
    """The solution cell of nbgrader's source without its check call: what the reference submission runs."""
    return "\n".join(part for part in (ex.scaffold, ex.region) if part)


def standalone_runs(path: Path) -> list[dict] | None:
    """Each exercise's reference run without the rest of the notebook, or None when a solution reads a name
    that a cell of the notebook computes (rather than imports)."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and not is_answer_cell(c)]
    setup = source_of(code[0])
    lines = [line for cell in code for line in imports(source_of(cell))]
    imported = set().union(global_names(setup)[0], *(global_names(line)[0] for line in lines))
    computed = set().union(*(global_names(source_of(c))[0] - global_names("\n".join(imports(source_of(c))))[0]
                             for c in code[1:]))
    runs = []
    for ex in exercises(nb, path.parent, path.name):
        test = TEST_SOURCE.format(call=ex.check_call)
        needs = global_names(solution_cell(ex) + "\n" + test)[1] - set(dir(builtins))
        if needs & computed or not needs <= imported:
            return None
        runs.append({"key": f"{path.stem}/{ex.solution_id}", "setup": setup, "imports": lines,
                     "cell": solution_cell(ex), "test": test})
    return runs
