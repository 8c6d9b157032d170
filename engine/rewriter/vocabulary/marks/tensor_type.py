"""`tensor_type`: a tensor type given by name or by class: `x.type(T)`,
`torch.set_default_tensor_type(T)`."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter.devices import device_subexpressions
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk

_SETTER = "torch.set_default_tensor_type"


def _tensor_types(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    assert isinstance(node, cst.Call)
    func = node.func
    if type(func) is not cst.Attribute or func.attr.value not in ("type", _SETTER[6:]):
        return []
    if func.attr.value != "type" and _SETTER not in walk.resolver.qualified_names(func):
        return []
    given = [
        arg.value
        for position, arg in enumerate(node.args)
        if not arg.star and (arg.keyword.value in ("dtype", "t") if arg.keyword else position == 0)
    ]
    return [sub for value in given[:1] for sub in device_subexpressions(value)]


MARKS.register(
    PositionMark(
        name="tensor_type",
        doc="the tensor type a tensor is converted to or tensors are made as: the argument of "
        "`$x.type(...)` (`dtype=` too) and of `torch.set_default_tensor_type(...)`, through "
        "conditionals",
        node_types=(cst.Call,),
        find=_tensor_types,
        order=40,
        words=frozenset({"type("}),
    )
)
