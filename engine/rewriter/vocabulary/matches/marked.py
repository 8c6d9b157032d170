"""`marked`: a value in a position the walk marks (`marks/`), named by the rule: a new position
is one file in `marks/` and a rule that names it, no match kind of its own."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.vocabulary import MARKS, MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk
from pytpu.engine.rewriter.vocabulary.matches.patterns import plan_with_flags


def _marked(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    """The first case that changes code rewrites the site; display-only rules marking the
    same position add their flags (a corpus sharded by one rule, flagged by another)."""
    value = cst_nodes.literal_value(node)
    nodes = {"value": node}
    if type(node) is cst.Assign and len(node.targets) == 1:
        nodes["target"] = node.targets[0].target  # (a marked assignment: what it assigns)
    bounds = cst_nodes.row_slice(node)
    if bounds is not None:  # (a marked slice `x[start:stop]`: its parts)
        assert isinstance(node, cst.Subscript)
        nodes.update(sliced=node.value, start=bounds.lower, stop=bounds.upper)

    def bind(_: None, case: Case) -> patterns.Bindings | None:
        if case.values and value not in case.values:
            return None
        bindings = patterns.Bindings(nodes=dict(nodes), covered=[node])
        return bindings if walk.satisfies(case, bindings) else None

    return plan_with_flags(walk, node, [(case, None) for case in cases], bind)


def _describe(match: dict[str, Any]) -> str:
    mark = MARKS[match["marked"]]
    values = match.get("value")
    which = " equal to " + " or ".join(f"`{v!r}`" for v in values) if values else ""
    return (
        f"A value in the position `{mark.name}` ({mark.doc}){which}; it binds `$value`, and a "
        "marked assignment its target as `$target`, a marked slice `x[start:stop]` its parts as "
        "`$sliced`, `$start` and `$stop`."
    )


def _properties() -> dict[str, Any]:
    return {
        "marked": {"enum": MARKS.names()},
        "value": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    }


MATCH_KINDS.register(
    MatchKind(
        name="marked",
        doc="a value in the named position mark (`marks/`: the walk marks the values in that "
        "position before it reaches them), bound as `$value`; with `value`, only a string "
        "literal equal to one of those listed",
        properties=_properties,
        describe=_describe,
        words=lambda case: MARKS[case.names[0]].words,
        match=_marked,
        marks_of=lambda case: case.names[:1],
        values_of=lambda match: tuple(match.get("value", ())),
        order=60,
    )
)
