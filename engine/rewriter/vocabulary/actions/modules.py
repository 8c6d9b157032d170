"""`rename_module`: point imports of, and references to, a renamed module at its new name."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, node_edits
from pytpu.engine.rewriter.vocabulary import ACTIONS, Action
from pytpu.engine.rewriter.vocabulary.contract import Edit


def _rename(edit: Edit, node: cst.CSTNode, new_module: str) -> cst.CSTNode:
    old = edit.case.names[0]
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return node_edits.rename_module_import(node, old, new_module)
    text = cst_nodes.dotted_name(node) or ""
    return node_edits.keep_parens(node, node_edits.dotted(new_module + text[len(old) :]))


ACTIONS.register(
    Action(
        name="rename_module",
        doc="(with `match: {module: ...}`) use this module name instead",
        parameter={"$ref": "#/$defs/dotted"},
        describe=lambda value: f"renames the module to `{value}`",
        apply=_rename,
    )
)
