"""`device`: a value in a position that names a device (the KB's `device_positions`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.devices import device_subexpressions
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _in_call(walk: Walk, node: cst.Call) -> list[cst.CSTNode]:
    positions = walk.positions
    found = [
        arg.value for arg in node.args if arg.keyword and arg.keyword.value in positions.keywords
    ]
    first = next((a for a in node.args if a.keyword is None and not a.star), None)
    if first is None:
        return found
    func = node.func
    if type(func) is cst.Attribute:
        method = func.attr.value
        if method in positions.first_argument_of_methods or (
            method == "startswith" and positions.is_device_valued(func.value)
        ):
            return [*found, first.value]
        if method == "add_argument":
            return found + _argparse_default(walk, node, first.value)
    name = cst_nodes.dotted_name(func)
    if name is not None and name.rsplit(".", 1)[-1] in positions.first_argument_names:
        if walk.resolver.qualified_names(func) & positions.first_argument_of:
            found.append(first.value)
    return found


def _argparse_default(walk: Walk, node: cst.Call, flag: cst.BaseExpression) -> list[cst.CSTNode]:
    """`parser.add_argument('--device', default='cuda')`: the default names a device."""
    if not isinstance(flag, cst.SimpleString) or not isinstance(flag.evaluated_value, str):
        return []
    dest = flag.evaluated_value.lstrip("-").replace("-", "_")
    if not walk.positions.is_device_name(dest):
        return []
    return [
        arg.value
        for arg in node.args
        if arg.keyword is not None and arg.keyword.value in ("default", "const")
    ]


def _assigned(walk: Walk, targets: list[cst.CSTNode], value: cst.CSTNode) -> list[cst.CSTNode]:
    """`device = ...`, `self.device = ...`: a name or attribute that holds a device."""
    held = any(
        isinstance(t, (cst.Name, cst.Attribute)) and walk.positions.is_device_valued(t)
        for t in targets
    )
    return [value] if held else []


def _device_positions(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    kind = type(node)
    if kind is cst.Call:
        values = _in_call(walk, node)
    elif kind is cst.Assign:
        values = [v for t in node.targets for v in _assigned(walk, [t.target], node.value)]
    elif kind is cst.AnnAssign:
        values = _assigned(walk, [node.target], node.value) if node.value is not None else []
    elif kind is cst.Param:
        named = node.default is not None and walk.positions.is_device_name(node.name.value)
        values = [node.default] if named else []
    else:  # a dict's entry: `{'device': 'cuda'}`
        key = node.key
        named = type(key) is cst.SimpleString and walk.positions.is_device_name(
            str(key.evaluated_value)
        )
        values = [node.value] if named else []
    return [sub for value in values for sub in device_subexpressions(value)]


MARKS.register(
    PositionMark(
        name="device",
        doc="a value that names a device: the keywords of `device_positions.keywords` "
        "(`device=`), the first argument of the calls and methods of `first_argument_of` "
        "(`x.to(...)`), a parameter's default, a dict's value or an assigned value whose name "
        "is a device name (`device = ...`, `def f(device='cuda')`), an `add_argument('--device', "
        "default=...)`; through conditionals (`a if c else b`) and `or`/`and`",
        node_types=(cst.Call, cst.Assign, cst.AnnAssign, cst.Param, cst.DictElement),
        find=_device_positions,
        order=10,
    )
)
