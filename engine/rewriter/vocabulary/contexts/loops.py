"""Contexts about loops: code that runs once an iteration."""

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context
from pytpu.engine.rewriter.vocabulary.contract import Walk

# (a function or class defined in a loop runs its body when called, not once an iteration)
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _in_loop_body(walk: Walk) -> bool:
    """The node being walked is in the body of a `for` or `while` loop of its own function (not
    in the loop's header or its `else`, which run once)."""
    path = walk.path
    for depth in range(len(path) - 1, -1, -1):
        node = path[depth]
        if type(node) in _SCOPES:
            return False
        if type(node) in (cst.For, cst.While) and depth + 1 < len(path):
            if path[depth + 1] is node.body:
                return True
    return False


CONTEXTS.register(
    Context(
        name="in_loop",
        doc="only in the body of a `for` or `while` loop (not its header or `else`) of the "
        "function it is in",
        holds=_in_loop_body,
    )
)
