"""Actions on the matched statement as a whole: remove it, keep a `with`'s body, keep it."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import node_edits
from pytpu.engine.rewriter.vocabulary import ACTIONS, Action

ACTIONS.register(
    Action(
        name="delete",
        doc="remove the matched statement (a match used as a value is flagged instead)",
        parameter=None,
        describe=lambda value: "the matched statement is removed",
        apply=lambda edit, node, value: edit.delete(node),
        statement_only=True,
        removes_names=True,
    )
)
ACTIONS.register(
    Action(
        name="unwrap",
        doc="remove the matched `with` statement and keep its body",
        parameter=None,
        describe=lambda value: "the `with` statement is removed and its body kept",
        apply=lambda edit, node, value: (
            node_edits.hoist_body(node) if isinstance(node, cst.With) else node
        ),
        removes_names=True,
    )
)
ACTIONS.register(
    Action(
        name="keep",
        doc="leave the code as it is and add the rule's `imports`",
        parameter=None,
        describe=lambda value: "the code is kept; the rule's imports are added",
        apply=lambda edit, node, value: node,
    )
)
