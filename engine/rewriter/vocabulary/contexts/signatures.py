"""Contexts about function signatures: a parameter's default is evaluated once, when the `def`
runs (at import for a module's functions), and a public function's defaults are its API."""

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context
from pytpu.engine.rewriter.vocabulary.contract import Walk

# Where a parameter's default ends, going up from a node: a body or a statement.
_NOT_A_DEFAULT = (
    cst.FunctionDef,
    cst.Lambda,
    cst.ClassDef,
    cst.IndentedBlock,
    cst.SimpleStatementLine,
    cst.SimpleStatementSuite,
    cst.Module,
)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _in_parameter_default(walk: Walk) -> bool:
    for node in reversed(walk.path):
        if type(node) is cst.Param:
            return True
        if type(node) in _NOT_A_DEFAULT:
            return False
    return False


def _in_public_signature(walk: Walk) -> bool:
    """On a parameter itself (not inside its default) of a function whose name, and its
    classes' names, are public."""
    path = walk.path
    if len(path) < 2 or type(path[-1]) is not cst.Parameters:
        return False
    if type(path[-2]) is not cst.FunctionDef:
        return False  # a lambda's
    return not any(
        type(node) in (cst.FunctionDef, cst.ClassDef) and _private(node.name.value) for node in path
    )


CONTEXTS.register(
    Context(
        name="parameter_default",
        doc="only in a parameter's default value (evaluated when the `def` runs: at import for "
        "a module's functions)",
        holds=_in_parameter_default,
    )
)
CONTEXTS.register(
    Context(
        name="public_signature",
        doc="only on a parameter of a public function or method (neither its name nor its "
        "class's starts with an underscore), not inside the parameter's default",
        holds=_in_public_signature,
    )
)
