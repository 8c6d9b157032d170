"""`assigned_from`: a variable that holds what one of some calls made, as `start` after
`start = torch.cuda.Event(enable_timing=True)` or `self.stream` after
`self.stream = torch.cuda.Stream()`."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, DOTTED_LIST, Condition, fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _made_by(value: cst.CSTNode, callables: frozenset[str], walk: Walk) -> bool:
    return type(value) is cst.Call and bool(walk.resolver.qualified_names(value.func) & callables)


def _record(
    target: cst.BaseExpression,
    value: cst.BaseExpression,
    callables: frozenset[str],
    walk: Walk,
    single: set[str],
    lists: set[str],
) -> None:
    """`a = f()`, `a, b = f(), f()`, `events = [f() for _ in range(n)]` and `[f(), f()]`."""
    if type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List):
        if len(target.elements) == len(value.elements):
            for t, v in zip(target.elements, value.elements, strict=True):
                _record(t.value, v.value, callables, walk, single, lists)
        return
    name = cst_nodes.dotted_name(target)
    if name is None:
        return
    if _made_by(value, callables, walk):
        single.add(name)
    elif type(value) in (cst.ListComp, cst.GeneratorExp) and _made_by(value.elt, callables, walk):
        lists.add(name)
    elif type(value) in (cst.List, cst.Tuple) and value.elements:
        if all(_made_by(e.value, callables, walk) for e in value.elements):
            lists.add(name)


@fact(
    "holders",
    "for a list of callables (the key), the names the file assigns what one returns: "
    "those that hold one object (`start`, `self.stream`) and those of lists of them",
)
def holders(walk: Walk, callables: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """The names (`start`, `self.stream`) the file assigns such an object to."""
    wanted = frozenset(callables)
    words = {c.rsplit(".", 1)[-1] for c in callables}
    single: set[str] = set()
    lists: set[str] = set()
    if walk.module is not None and (not walk.text or any(w in walk.text for w in words)):
        for node in cst_nodes.walk(walk.module):
            if type(node) is cst.Assign:
                for target in node.targets:
                    _record(target.target, node.value, wanted, walk, single, lists)
            elif type(node) is cst.AnnAssign and node.value is not None:
                _record(node.target, node.value, wanted, walk, single, lists)
    return single, lists


def _assigned_from(node: cst.CSTNode, callables: list[str], walk: Walk) -> bool:
    single, lists = walk.fact(holders, tuple(sorted(callables)))
    if type(node) is cst.Subscript:  # `events[i]`
        name = cst_nodes.dotted_name(node.value)
        return name is not None and name in lists
    name = cst_nodes.dotted_name(node)
    return name is not None and name in single


CONDITIONS.register(
    Condition(
        name="assigned_from",
        doc="is a variable or attribute (or an item of a list) the file assigns what one of the "
        "listed calls returns (`start` after `start = torch.cuda.Event()`)",
        check=_assigned_from,
        parameter=DOTTED_LIST,
        describe=lambda names: (
            "what "
            + " or ".join(f"`{n}()`" for n in names)
            + " returned (a variable or attribute the same file assigns it to)"
        ),
        words=lambda names: {frozenset({n.rsplit(".", 1)[-1]}) for n in names},
    )
)
