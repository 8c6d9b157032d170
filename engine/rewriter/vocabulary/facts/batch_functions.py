"""`batch_functions`: the module's functions a training loop calls for its batch
(nanoGPT's `X, Y = get_batch('train')`), where the batch reaches the device."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.loops import LoopAnalyzer
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk

_LOOPS = (cst.For, cst.While)


@fact(
    "batch_functions",
    "the names of the module's functions whose result a training loop (one that takes a "
    "backward pass or an optimizer step) assigns (`X, Y = get_batch('train')`), which "
    "return a value and train in no loop of their own",
    names=True,
)
def batch_functions(walk: Walk) -> frozenset[str]:
    module, loops = walk.module, walk.loops
    if module is None or loops is None:
        return frozenset()
    names: set[str] = set()
    for loop in cst_nodes.walk(module):
        if type(loop) not in _LOOPS:
            continue
        summary = loops.summary_of(loop)
        if not (summary.backward or summary.step):
            continue
        for node in cst_nodes.walk(loop):
            value = node.value if type(node) is cst.Assign else None
            if type(value) is cst.Call and type(value.func) is cst.Name:
                definition = loops.functions.get(value.func.value)
                if definition is not None and _returns_a_batch(definition, loops):
                    names.add(value.func.value)
    return frozenset(names)


def _returns_a_batch(definition: cst.FunctionDef, loops: LoopAnalyzer) -> bool:
    """It returns a value and takes no training step itself (a loader, not a trainer)."""
    summary = loops.summary_of(definition)
    if summary.backward or summary.step or summary.inner_step:
        return False
    return any(
        type(node) is cst.Return and node.value is not None
        for node in cst_nodes.walk(definition.body)
    )
