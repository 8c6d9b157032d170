"""`shares_memory`: a call is handed something the file puts in shared memory
(`model.share_memory()` before `mp.Process(target=train, args=(model,))`): Hogwild training,
where worker processes update the same CPU tensors."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition, fact
from pytpu.engine.rewriter.vocabulary.contract import Walk

_METHODS = frozenset({"share_memory", "share_memory_"})


@fact(
    "shared_names",
    "the dotted names the file calls `.share_memory()` (or `.share_memory_()`) on",
    names=True,
)
def shared_names(walk: Walk) -> frozenset[str]:
    return frozenset(
        name
        for node in (cst_nodes.walk(walk.module) if walk.module is not None else ())
        if type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and node.func.attr.value in _METHODS
        and (name := cst_nodes.dotted_name(node.func.value)) is not None
    )


def _values(args: list[cst.Arg]) -> list[cst.CSTNode]:
    """The arguments, and the items of a tuple or list given as one (`args=(model, queue)`)."""
    out: list[cst.CSTNode] = []
    for arg in args:
        value = arg.value
        if type(value) in (cst.Tuple, cst.List):
            out += [element.value for element in value.elements]
        else:
            out.append(value)
    return out


def _shares_memory(args: list[cst.Arg], _: Any, walk: Walk) -> bool:
    shared = walk.fact(shared_names)
    return bool(shared) and any(cst_nodes.dotted_name(v) in shared for v in _values(args))


CONDITIONS.register(
    Condition(
        name="shares_memory",
        doc="(for `$*rest`) one of the arguments, or an item of a tuple or list given as one "
        "(`args=(model,)`), is a name the file calls `.share_memory()` or `.share_memory_()` on",
        check=_shares_memory,
        on_arguments=True,
        words=lambda _: {frozenset({"share_memory"})},
    )
)
