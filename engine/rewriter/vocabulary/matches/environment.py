"""`os.environ['XLA_USE_BF16'] = '1'`: environment switches the KB knows."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk


def _name_matches(key: Any, name: str) -> bool:
    if not isinstance(key, str):
        return False
    return key.startswith(name[:-1]) if name.endswith("*") else key == name


def _env(walk: Walk, node: cst.Assign, cases: list[Case]) -> bool:
    target = node.targets[0].target
    if len(node.targets) != 1 or type(target) is not cst.Subscript or len(target.slice) != 1:
        return False
    index = target.slice[0].slice
    if type(index) is not cst.Index or type(index.value) is not cst.SimpleString:
        return False
    key = index.value.evaluated_value
    if "os.environ" not in walk.resolver.qualified_names(target.value):
        return False
    value = node.value.evaluated_value if type(node.value) is cst.SimpleString else None
    for case in cases:
        if any(_name_matches(key, n) for n in case.names):
            if case.values and value not in case.values:
                continue
            walk.plan(node, case, patterns.Bindings())
            return True
    return False


def _rewrite(edit: Edit) -> cst.CSTNode | None:
    """With a `replace:`, the template is the new value of the variable."""
    if edit.case.template is None or type(edit.updated) is not cst.Assign:
        return None  # the case's action
    return edit.updated.with_changes(value=edit.render(edit.case.template))


def _describe(match: dict) -> str:
    names = ", ".join(f"`{n}`" for n in match["env"])
    values = match.get("value")
    when = " to " + " or ".join(f"`{v!r}`" for v in values) if values else ""
    return f"Setting the environment variable {names} (`os.environ[...] = ...`){when}."


MATCH_KINDS.register(
    MatchKind(
        name="env",
        doc="setting one of the listed environment variables (`os.environ['NAME'] = ...`; "
        "`NAME_*` matches a prefix), optionally only to one of the listed `value`s",
        properties={
            "env": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "pattern": "^[A-Z_][A-Z0-9_]*\\*?$"},
            },
            "value": {"type": "array", "items": {"type": "string"}},
        },
        describe=_describe,
        words=lambda case: frozenset({"environ"}),
        match=_env,
        node_types=(cst.Assign,),
        rewrite=_rewrite,
        order=40,
        roots=lambda case: {"os"},
        values_of=lambda match: tuple(match.get("value", ())),
    )
)
