"""Code patterns: `match: "torch.cuda.manual_seed($seed)"` (a string, or a list of them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk
from pytpu.engine.rewriter.vocabulary.facts.assigned_attributes import assigned_attributes

PATTERN = "pattern"


def _match(walk: Walk, node: cst.CSTNode, _cases: list[Case]) -> bool:
    """The most specific pattern indexed under the node's name decides; display-only cases of
    other rules that match too add their flags to the same site."""
    kind = type(node)
    key = patterns.index_key(node)
    if key is None and kind is not cst.Assign:  # (`a, b = ...` is dispatched on its value)
        return False
    candidates = walk.index.patterns.get((kind, key)) if key is not None else None
    if candidates is None and (kind is cst.Call or kind is cst.Name):
        candidates = walk.aliased_candidates(node, key)
    if kind is cst.Assign:
        value_key = patterns.index_key(node.value)
        by_value = walk.index.patterns.get((kind, f"={value_key}")) if value_key else None
        if by_value:
            candidates = [*(candidates or ()), *by_value]
    if kind is cst.Attribute and candidates and node.attr.value in walk.fact(assigned_attributes):
        # `self.is_cuda = ...` makes `.is_cuda` the program's own attribute: a pattern over
        # any object's `.is_cuda` is not about it
        candidates = [(c, p) for c, p in candidates if patterns.wildcard_name(p.value) is None]

    def bind(pattern: cst.CSTNode, case: Case) -> patterns.Bindings | None:
        bindings = patterns.Bindings()
        if patterns.match(pattern, node, walk.resolver, bindings) and walk.satisfies(
            case, bindings
        ):
            return bindings
        return None

    return plan_with_flags(
        walk, node, [(case, pattern) for case, pattern in candidates or ()], bind
    )


def plan_with_flags(
    walk: Walk,
    node: cst.CSTNode,
    candidates: list[tuple[Case, Any]],
    bind: Callable[[Any, Case], patterns.Bindings | None],
) -> bool:
    """Plan the site from the candidates in order: the first case that changes code (and
    holds: `bind` gives its bindings) is the one rewrite of the node; display-only cases of
    other rules that hold add their flags to it; within a rule, the first case that holds
    decides."""
    flags: list = []
    chosen = None
    for case, what in candidates:
        if chosen is not None and case.changes_code:
            continue  # one rewrite per node; flags of other rules may join it
        if any(case.rule is c.rule for c, _ in [*flags, *([chosen] if chosen else [])]):
            continue  # within a rule, the first case that matches decides
        bindings = bind(what, case)
        if bindings is not None:
            if case.changes_code:
                chosen = (case, bindings)
            else:
                flags.append((case, bindings))
    if chosen is None and flags:
        chosen = flags.pop(0)
    if chosen is None:
        return False
    overridden = chosen[0].rule.overrides  # (their flags say what no longer happens here)
    flags = [(case, bindings) for case, bindings in flags if case.rule.id not in overridden]
    walk.plan(node, *chosen, flags=[c for c, _ in flags])
    return True


MATCH_KINDS.register(
    MatchKind(
        name=PATTERN,
        doc="Python code with `$name` wildcards (`torch.cuda.manual_seed($seed)`), matched "
        "structurally; dotted names match by what they refer to, whatever the file's imports",
        properties={},
        describe=lambda match: "",
        words=lambda case: frozenset(),  # the index takes the words of each pattern
        match=_match,
        node_types=(),  # the index offers it every node type a pattern is indexed under
        order=0,
    )
)
