"""Which statements of a block compute what a later statement reads: the run of a training
step's forward pass and loss before `loss.backward()`, which a `with` statement can wrap."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from pytpu.engine.rewriter import cst_nodes

# Calls that only move a tensor (`x.to(device)`, `x.cuda()`): a batch's move to the device is
# not part of the forward pass, and ends the run.
MOVES = frozenset({"to", "cuda", "xla", "tpu", "cpu"})


def names_read(statement: cst.CSTNode) -> set[str]:
    """The names and dotted names (`self.model`) a statement mentions."""
    names: set[str] = set()
    for node in cst_nodes.walk(statement):
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = cst_nodes.dotted_name(node)
            if name is not None:
                names.add(name)
    return names


def names_written(statement: cst.CSTNode) -> set[str]:
    """The names and dotted names a statement assigns (`a, self.b = ...`), in an `if`'s
    branches too."""
    targets: list[cst.BaseExpression] = []
    for small in cst_nodes.walk(statement):
        if isinstance(small, cst.Assign):
            targets += [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            targets.append(small.target)
    names: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            targets += [element.value for element in target.elements]
        elif isinstance(target, cst.StarredElement):
            targets.append(target.value)
        elif (name := cst_nodes.dotted_name(target)) is not None:
            names.add(name)
    return names


def _only_moves(statement: cst.SimpleStatementLine) -> bool:
    """`x = x.to(device)`, `x, y = x.to(d), y.cuda()`: every value assigned is a move."""
    values: list[cst.BaseExpression] = []
    for small in statement.body:
        if not isinstance(small, cst.Assign):
            return False
        values += (
            [e.value for e in small.value.elements]
            if isinstance(small.value, cst.Tuple)
            else [small.value]
        )
    return bool(values) and all(
        isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value in MOVES
        for v in values
    )


# Statements that end the run: a `with` (autocast already, or a context of its own), a
# definition, a loop (its body repeats: not one forward pass).
_ENDS_RUN = (cst.With, cst.FunctionDef, cst.ClassDef, cst.For, cst.While)


def computing_run(body: Sequence[cst.BaseStatement], end: int) -> int:
    """Where the run of statements before `body[end]` that compute what it reads begins
    (`end` when none does). The run is contiguous; a statement in it that computes nothing
    needed (`optimizer.zero_grad()`) stays in it only between two that do; an `if` whose
    branches compute it (`if transformer: output = model(x) else: ...`) is in it. A `with`, a
    loop, a definition or a move to the device ends it."""
    needed = names_read(body[end])
    start = end
    for index in range(end - 1, -1, -1):
        statement = body[index]
        if isinstance(statement, _ENDS_RUN) or (
            isinstance(statement, cst.SimpleStatementLine) and _only_moves(statement)
        ):
            break
        if names_written(statement) & needed:
            needed |= names_read(statement)
            start = index
    return start
