"""Actions that add a statement: after the matched one, or once at the top of the module."""

from __future__ import annotations

from pytpu.engine.rewriter.vocabulary import ACTIONS, Action

CODE = {"type": "string", "minLength": 1}

ACTIONS.register(
    Action(
        name="insert_after",
        doc="add this statement after the matched one (once; a match used as a value is "
        "flagged instead)",
        parameter=CODE,
        describe=lambda value: "this statement is inserted after the matched one",
        apply=lambda edit, node, value: edit.insert_after(value),
        statement_only=True,
        shows_code=True,
    )
)
ACTIONS.register(
    Action(
        name="setup",
        doc="add this statement once, after the module's imports; the site itself is unchanged",
        parameter=CODE,
        describe=lambda value: "this statement is added once after the module's imports",
        at_module_top=True,
        shows_code=True,
    )
)
