"""`host`: where a checkpoint is loaded (`map_location=`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter.devices import device_subexpressions
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _load_locations(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    assert isinstance(node, cst.Call)
    keywords = walk.positions.host_keywords
    return [
        sub
        for arg in node.args
        if arg.keyword is not None and arg.keyword.value in keywords
        for sub in device_subexpressions(arg.value)
    ]


MARKS.register(
    PositionMark(
        name="host",
        doc="where a checkpoint is loaded: the value of a keyword of "
        "`device_positions.host_keywords` (`map_location=`), through conditionals",
        node_types=(cst.Call,),
        find=_load_locations,
        order=30,
    )
)
