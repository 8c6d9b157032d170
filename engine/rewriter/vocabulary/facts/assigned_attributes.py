"""`assigned_attributes`: the attribute names the module assigns (`self.is_cuda = ...`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk

_ASSIGNMENTS = (cst.Assign, cst.AnnAssign, cst.AugAssign)


def _targets(node: cst.Assign | cst.AnnAssign | cst.AugAssign) -> list[cst.CSTNode]:
    if type(node) is cst.Assign:
        return [t.target for t in node.targets]
    return [node.target]


@fact(
    "assigned_attributes",
    "the attribute names the module assigns (`self.is_cuda = ...`): there they are the "
    "program's own, not torch's",
    names=True,
)
def assigned_attributes(walk: Walk) -> frozenset[str]:
    if walk.module is None:
        return frozenset()
    return frozenset(
        target.attr.value
        for node in cst_nodes.statements(walk.module.body)
        if type(node) in _ASSIGNMENTS
        for target in _targets(node)
        if type(target) is cst.Attribute
    )
