"""`device_index`: an integer that named a CUDA device (`.to(rank)`, `.to(self.gpu_id)`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _device_index(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    assert isinstance(node, cst.Call)
    positions = walk.positions
    func = node.func
    first = next((a for a in node.args if a.keyword is None and not a.star), None)
    if first is None or type(func) is not cst.Attribute:
        return []
    if func.attr.value not in positions.first_argument_of_methods and not (
        func.attr.value == "startswith" and positions.is_device_valued(func.value)
    ):
        return []
    name = cst_nodes.dotted_name(first.value)
    indexed = name is not None and positions.is_index_name(name.rsplit(".", 1)[-1])
    return [first.value] if indexed else []


MARKS.register(
    PositionMark(
        name="device_index",
        doc="the first argument of a method of `first_argument_of` (`x.to(rank)`) that is a "
        "name or attribute of `device_positions.index_names`: an integer that named a CUDA "
        "device",
        node_types=(cst.Call,),
        find=_device_index,
        order=20,
    )
)
