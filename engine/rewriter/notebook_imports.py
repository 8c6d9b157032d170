"""Where the imports a rewrite adds to a notebook go: with the notebook's own imports.

libcst (`AddImportsVisitor`, through `imports.py`) puts them at the end of the module's first
block of imports, or at its very top when the module does not open with imports. A notebook's
first cell often opens with IPython lines (`%matplotlib inline`, `!pip install ...`) or has no
imports at all, so that place is often the top of the first cell: above the `!pip install` of
what it imports, and with a blank line after it. The notebook's imports cell is the first code
cell that opens with imports; the added imports move down to the end of those, over code that
does not use the names they bind (IPython lines are masked there: they use nothing). They never
move up: libcst never puts them below that place.

Every function here takes the cells as the engine saw them (masked, each ending with a newline).
"""

from __future__ import annotations

import ast
import difflib

from pytpu.engine.rewriter.ipython import split_lines


def gather(before: list[str], after: list[str]) -> list[str]:
    """The migrated cells `after` with the imports the rewrite added moved to the end of the
    imports that open the first code cell that opens with any."""
    cells = [split_lines(part) for part in after]
    chunk = _added_imports(before, cells)
    if chunk is None:
        return after
    k, start, end = chunk
    added = cells[k][start:end]
    del cells[k][start:end]
    target = _imports_end(cells)
    if target is None or target <= (k, start):
        return after
    if _uses(_between(cells, (k, start), target), _bound_names("".join(added))):
        return after
    f, t = target
    cells[f][t:t] = [line for line in added if line.strip()]
    return ["".join(lines) for lines in cells]


def _added_imports(before: list[str], after: list[list[str]]) -> tuple[int, int, int] | None:
    """(cell, first line, end) of the lines of imports the rewrite inserted, with the blank line
    libcst may put after them (it adds all of a module's imports in one place)."""
    for k, (old, lines) in enumerate(zip(before, after, strict=True)):
        matcher = difflib.SequenceMatcher(None, split_lines(old), lines, autojunk=False)
        for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
            if tag == "insert" and _only_imports("".join(lines[j1:j2])):
                return k, j1, j2
    return None


def _statements(text: str) -> list[ast.stmt] | None:
    try:
        return ast.parse(text).body
    except SyntaxError:
        return None


def _only_imports(text: str) -> bool:
    statements = _statements(text)
    return bool(statements) and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in statements)


def _imports_end(cells: list[list[str]]) -> tuple[int, int] | None:
    """(cell, line) just after the imports that open the first cell that opens with imports
    (its docstring and IPython lines aside)."""
    for k, lines in enumerate(cells):
        end = None
        for i, statement in enumerate(_statements("".join(lines)) or []):
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                end = statement.end_lineno
            elif not (_is_name(statement) or (i == 0 and _is_docstring(statement))):
                break
        if end is not None:
            return k, end
    return None


def _is_name(statement: ast.stmt) -> bool:
    """A statement that is one name: a masked IPython line (or a marker)."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Name)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _between(cells: list[list[str]], start: tuple[int, int], end: tuple[int, int]) -> list[str]:
    """The text from (cell, line) `start` to `end`, a piece per cell (each whole statements)."""
    (k, p), (f, t) = start, end
    if k == f:
        return ["".join(cells[k][p:t])]
    middle = ["".join(lines) for lines in cells[k + 1 : f]]
    return ["".join(cells[k][p:]), *middle, "".join(cells[f][:t])]


def _bound_names(text: str) -> set[str]:
    names = set()
    for statement in _statements(text) or []:
        if isinstance(statement, ast.Import):
            names |= {a.asname or a.name.partition(".")[0] for a in statement.names}
        elif isinstance(statement, ast.ImportFrom):
            names |= {a.asname or a.name for a in statement.names}
    return names


def _uses(pieces: list[str], names: set[str]) -> bool:
    """Whether any piece uses one of `names` (or cannot be read: then it may)."""
    for piece in pieces:
        statements = _statements(piece)
        if statements is None:
            return True
        tree = ast.Module(body=statements, type_ignores=[])
        if any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(tree)):
            return True
    return False
