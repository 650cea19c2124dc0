"""The global names a notebook cell binds and reads (for the classroom tests: which cells a worked solution
needs, and which cells would need it)."""

from __future__ import annotations

import ast
import symtable


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
