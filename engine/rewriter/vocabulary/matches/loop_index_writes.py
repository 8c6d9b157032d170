"""Writes into a device tensor at a loop's index: `obs[step] = next_obs` in `for step in
range(n):`. XLA bakes a Python int index into the graph as a constant: in a loop whose every
iteration ends at a barrier (a rollout, a training step) that is a new graph per index; in a loop
with no barrier the whole loop is one graph with a copy of its body per iteration."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.vocabulary import DOTTED_LIST, MATCH_KINDS, MatchKind, fact
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk

_LOOPS = (cst.For, cst.While)
_DEFINITIONS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_FEW = 16  # a loop over a literal range shorter than this unrolls harmlessly


def _places_on_device(call: cst.Call) -> bool:
    """`device=device`, `.cuda()`, `.to(device)`: not `'cpu'`, not a dtype (`torch.float32`)."""
    method = call.func.attr.value if type(call.func) is cst.Attribute else None
    if method == "cuda":
        return True
    for arg in call.args:
        if arg.keyword is None and method != "to" or arg.star:
            continue
        if arg.keyword is not None and arg.keyword.value != "device":
            continue
        name = cst_nodes.dotted_name(arg.value) or ""
        on_host = cst_nodes.literal_value(arg.value) == "cpu"
        return not on_host and not (name.startswith("torch.") and name != "torch.device")
    return False


def _made_on_device(value: cst.CSTNode, factories: frozenset[str], walk: Walk) -> bool:
    """`torch.zeros(n, device=device)`, `torch.zeros(n).to(device)`: one of the factories made
    it, and a call of the chain put it on a device. Without factories, any value a call of the
    chain put on a device (`X = X.cuda()`)."""
    placed = False
    while type(value) is cst.Call:
        placed = placed or _places_on_device(value) or walk.placed_by_analysis(value)
        if walk.resolver.qualified_names(value.func) & factories:
            return placed
        if type(value.func) is not cst.Attribute:
            return placed and not factories
        value = value.func.value
    return placed and not factories


@fact(
    "device_tensors",
    "for a list of tensor factories (the key; none: any call), the names (`obs`, "
    "`self.obs`) the file assigns a tensor on a device that one of them made",
)
def device_tensors(walk: Walk, factories: tuple[str, ...]) -> frozenset[str]:
    wanted = frozenset(factories)
    return cst_nodes.names_assigned(walk.module, lambda v: _made_on_device(v, wanted, walk))


def range_loop(walk: Walk) -> tuple[cst.For, cst.Call] | None:
    """The innermost loop around the node and its `range(...)`, if it is a `for` over one (or
    over `reversed(range(...))`) in the same function."""
    for node in reversed(walk.path):
        if type(node) in _DEFINITIONS:
            return None
        if type(node) in _LOOPS:
            iterable = node.iter if type(node) is cst.For else None
            if type(iterable) is cst.Call and cst_nodes.last_name(iterable.func) == "reversed":
                iterable = iterable.args[0].value if iterable.args else None
            ranged = type(iterable) is cst.Call and cst_nodes.last_name(iterable.func) == "range"
            return (node, iterable) if ranged and type(node.target) is cst.Name else None
    return None


def _short(call: cst.Call) -> bool:
    """A literal `range(...)` of fewer than `_FEW` steps."""
    values = [cst_nodes.literal_value(a.value) for a in call.args]
    if not values or any(type(v) is not int for v in values) or 0 in values[2:]:
        return False
    return len(range(*values)) < _FEW


def each_iteration_syncs(walk: Walk, loop: cst.For) -> bool:
    """Every iteration of the loop ends at a barrier: one it has, or one the walk plans."""
    plan, _ = walk.loops.plan(loop, inside_training=any(walk.training[:-1]))
    return (plan is not None and plan.loader is None) or walk.loops.summary_of(loop).barrier


def _writes(walk: Walk, node: cst.Assign, step: bool, cases: list[Case]) -> bool:
    if not any(type(t.target) is cst.Subscript for t in node.targets):
        return False
    if not walk.device_aware or walk.loops is None:
        return False
    found = range_loop(walk)
    if found is None or each_iteration_syncs(walk, found[0]) != step:
        return False
    loop, ranged = found
    if not step and _short(ranged):
        return False  # a few copies of the body: harmless
    if step and len(node.targets) != 1:
        return False  # `a[i] = b = x`: no single place for the index
    for target in node.targets:
        subscript = target.target
        if type(subscript) is not cst.Subscript or len(subscript.slice) != 1:
            continue
        index = subscript.slice[0].slice
        if type(index) is not cst.Index or type(index.value) is not cst.Name:
            continue
        if index.value.value != loop.target.value:
            continue
        buffer = subscript.value
        for case in cases:
            if cst_nodes.dotted_name(buffer) not in walk.fact(device_tensors, case.names):
                continue
            bindings = patterns.Bindings(
                nodes={"buffer": buffer, "index": index.value, "value": node.value},
                covered=[subscript, subscript.slice[0], index],
            )
            if walk.satisfies(case, bindings):
                walk.plan(node, case, bindings)
                return True
    return False


_PROPERTIES = DOTTED_LIST


def _made(match: dict[str, Any], key: str) -> str:
    made = " or ".join(f"`{n}()`" for n in match[key])
    return f"a tensor {made} made on a device (`device=`, or moved with `.to(...)`, `.cuda()`)"


MATCH_KINDS.register(
    MatchKind(
        name="step_index_write",
        doc="a write into a device tensor one of the listed calls made (`obs = torch.zeros(n)"
        ".to(device)`) at the index of a loop over `range(...)` whose every iteration ends at a "
        "barrier (`obs[step] = x`); `$buffer`, `$index` and `$value` are bound",
        properties={"step_index_write": _PROPERTIES},
        describe=lambda match: (
            f"A write into {_made(match, 'step_index_write')} at the index of a loop over "
            "`range(...)` whose every iteration ends at a barrier."
        ),
        words=lambda case: frozenset({"range"}),
        match=lambda walk, node, cases: _writes(walk, node, True, cases),
        node_types=(cst.Assign,),
        order=40,
    )
)
MATCH_KINDS.register(
    MatchKind(
        name="unrolled_index_write",
        doc="a write into a device tensor one of the listed calls made at the index of a loop "
        "over `range(...)` with no barrier in it (`advantages[t] = ...`), unless the range is a "
        f"literal one of fewer than {_FEW} steps; `$buffer`, `$index` and `$value` are bound",
        properties={"unrolled_index_write": _PROPERTIES},
        describe=lambda match: (
            f"A write into {_made(match, 'unrolled_index_write')} at the index of a loop over "
            "`range(...)` or `reversed(range(...))` with no barrier in it, unless the range is a "
            f"literal one of fewer than {_FEW} steps."
        ),
        words=lambda case: frozenset({"range"}),
        match=lambda walk, node, cases: _writes(walk, node, False, cases),
        node_types=(cst.Assign,),
        order=40,
    )
)
