"""Batches sliced out of a device tensor at a loop's offset: `x = X_train[i:i + batch_size]` in
`for i in range(0, n, batch_size):`. XLA bakes the Python int bounds into the graph as
constants, so in a loop whose every iteration ends at a barrier (a training step) each offset
compiles a graph of its own."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk
from pytpu.engine.rewriter.vocabulary.matches.loop_index_writes import (
    device_tensors,
    each_iteration_syncs,
    range_loop,
)


def _uses(node: cst.CSTNode | None, name: str) -> bool:
    """The expression is the name, or adds something to it (`i + batch_size`, `(i + n)`)."""
    if type(node) is cst.Name:
        return node.value == name
    if type(node) is cst.BinaryOperation and type(node.operator) is cst.Add:
        return _uses(node.left, name) or _uses(node.right, name)
    return False


def _bounds(subscript: cst.Subscript, index: str) -> tuple[cst.CSTNode, cst.CSTNode] | None:
    """`[i:i + n]`, one slice starting at the loop's index and ending past it by an amount."""
    if len(subscript.slice) != 1 or type(subscript.slice[0].slice) is not cst.Slice:
        return None
    window = subscript.slice[0].slice
    if window.step is not None or not _uses(window.lower, index) or window.upper is None:
        return None
    upper = window.upper
    if type(upper) is cst.Name or not _uses(upper, index):
        return None  # `[i:j]`: its length is not the loop's
    return window.lower, upper


def _reads(walk: Walk, node: cst.Subscript, cases: list[Case]) -> bool:
    if not walk.device_aware or walk.loops is None:
        return False
    if walk.path and type(walk.path[-1]) in (cst.AssignTarget, cst.AugAssign, cst.Del):
        return False  # a write, not a read
    found = range_loop(walk)
    if found is None or not each_iteration_syncs(walk, found[0]):
        return False
    bounds = _bounds(node, found[0].target.value)
    if bounds is None:
        return False
    for case in cases:
        if cst_nodes.dotted_name(node.value) not in walk.fact(device_tensors, case.names):
            continue
        bindings = patterns.Bindings(
            nodes={"tensor": node.value, "start": bounds[0], "stop": bounds[1]},
            covered=[node.slice[0], node.slice[0].slice],
        )
        if walk.satisfies(case, bindings):
            walk.plan(node, case, bindings)
            return True
    return False


MATCH_KINDS.register(
    MatchKind(
        name="step_offset_slice",
        doc="a slice `tensor[i:i + n]` of a tensor the file puts on a device (`X = X.cuda()`, "
        "`.to(device)`, `device=`; made by one of the listed calls, or by any with `[]`) at the "
        "index of a loop over `range(...)` whose every iteration ends at a barrier; `$tensor`, "
        "`$start` and `$stop` are bound",
        properties={
            "step_offset_slice": {"type": "array", "items": {"$ref": "#/$defs/dotted"}},
        },
        describe=lambda match: (
            "A slice `tensor[i:i + n]`, at the index of a loop over `range(...)` whose every "
            "iteration ends at a barrier, of a tensor the file puts on a device"
            + (
                " that " + " or ".join(f"`{n}()`" for n in match["step_offset_slice"]) + " made."
                if match["step_offset_slice"]
                else "."
            )
        ),
        words=lambda case: frozenset({"range"}),
        match=_reads,
        node_types=(cst.Subscript,),
        order=40,
    )
)
