"""Actions on a call's keyword arguments: drop, rename, set (in that order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import node_edits
from pytpu.engine.rewriter.vocabulary import ACTIONS, Action
from pytpu.engine.rewriter.vocabulary.contract import Edit

IDENTIFIERS = {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/identifier"}}


def _edit(key: str) -> Callable[[Edit, Any, Any], Any]:
    def apply(edit: Edit, node: Any, value: Any) -> Any:
        if not isinstance(node, cst.Call):
            return node
        return node_edits.edit_kwargs(node, {key: value}, edit.render_text)

    return apply


def _arguments() -> Callable[[cst.CSTNode, Any], list[cst.CSTNode]]:
    """The keyword arguments an edit replaces whole: nothing inside them is matched again."""

    def claims(node: cst.CSTNode, value: Any) -> list[cst.CSTNode]:
        if not isinstance(node, cst.Call):
            return []
        names = set(value) if isinstance(value, (list, dict)) else set()
        return [a for a in node.args if a.keyword is not None and a.keyword.value in names]

    return claims


def _noun(value: list) -> str:
    return "argument" if len(value) == 1 else "arguments"


ACTIONS.register(
    Action(
        name="drop_kwargs",
        doc="remove the listed keyword arguments from the matched (or replacing) call",
        parameter=IDENTIFIERS,
        describe=lambda v: f"drops the keyword {_noun(v)} " + ", ".join(f"`{k}=`" for k in v),
        apply=_edit("drop_kwargs"),
        claims=_arguments(),
        order=10,
    )
)
ACTIONS.register(
    Action(
        name="rename_kwargs",
        doc="rename keyword arguments (`{old: new}`)",
        parameter={
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"$ref": "#/$defs/identifier"},
        },
        describe=lambda v: (
            "renames " + ", ".join(f"`{k}=` to `{n}=`" for k, n in sorted(v.items()))
        ),
        apply=_edit("rename_kwargs"),
        order=20,
    )
)
ACTIONS.register(
    Action(
        name="set_kwargs",
        doc="set keyword arguments to code (`{name: code}`), replacing or adding them",
        parameter={
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "string"},
        },
        describe=lambda v: "sets " + ", ".join(f"`{k}={c}`" for k, c in sorted(v.items())),
        apply=_edit("set_kwargs"),
        claims=_arguments(),
        order=30,
    )
)
