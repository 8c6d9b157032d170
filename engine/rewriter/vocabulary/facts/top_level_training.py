"""`trains_at_top_level`: whether the module is a script (or notebook) whose module-level code
trains, with no `if __name__ == '__main__':` entry point."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.loops import LoopAnalyzer
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


def is_main_guard(statement: cst.CSTNode) -> bool:
    """`if __name__ == '__main__':` (either quote, either side)."""
    if type(statement) is not cst.If or type(statement.test) is not cst.Comparison:
        return False
    test = statement.test
    sides = [test.left, *(c.comparator for c in test.comparisons)]
    names = {cst_nodes.dotted_name(side) for side in sides}
    values = {cst_nodes.literal_value(side) for side in sides if cst_nodes.is_literal(side)}
    return "__name__" in names and "__main__" in values


def _module_level(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements that run at import: the module's, and those in its module-level blocks
    (`if`/`elif`/`else`, `with`, `try`, `match`, loops), not in function or class bodies."""
    for child in cst_nodes.iter_children(node):
        if isinstance(child, cst.BaseStatement):
            yield child
        if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _module_level(child)


@fact(
    "trains_at_top_level",
    "whether the module has no `if __name__ == '__main__':` and its module-level code has a "
    "training loop (a backward pass or an optimizer step in a loop, or a loop around a "
    "function that trains): a script or a notebook",
)
def trains_at_top_level(walk: Walk) -> bool:
    module, loops = walk.module, walk.loops
    if module is None or loops is None:
        return False
    statements = list(_module_level(module))
    if any(is_main_guard(s) for s in statements):
        return False
    for statement in statements:
        if isinstance(statement, (cst.For, cst.While)):
            summary = loops.summary_of(statement)
            if summary.step or summary.backward or _calls_a_trainer(statement, loops):
                return True
    return False


def _calls_a_trainer(loop: cst.For | cst.While, loops: LoopAnalyzer) -> bool:
    """The loop calls a function of the module that trains in a loop of its own (a notebook's
    `for epoch in range(n): train_fn(model, loader, ...)`)."""
    for node in cst_nodes.walk(loop):
        if type(node) is cst.Call and type(node.func) is cst.Name:
            definition = loops.functions.get(node.func.value)
            if definition is not None and loops.summary_of(definition).inner_step:
                inner = [n for n in cst_nodes.walk(definition) if type(n) in (cst.For, cst.While)]
                if any(loops.summary_of(n).step or loops.summary_of(n).backward for n in inner):
                    return True
    return False
