"""Actions that add a statement: after the matched one, once at the top of the module, or a
`with` around the statements before the matched one."""

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
        keeps_site=True,
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


ACTIONS.register(
    Action(
        name="wrap_before",
        doc="wrap the statements before the matched one that compute what it reads (a training "
        "step's forward pass and loss before `loss.backward()`) in `with` this item; a compound "
        "statement or a move to the device ends them, and a `with` of the same call around the "
        "site already leaves it as it is",
        parameter=CODE,
        describe=lambda value: (
            "the statements that compute what the matched one reads go into a `with` statement"
        ),
        apply=lambda edit, node, value: edit.wrap_before(value),
        statement_only=True,
        shows_code=True,
        keeps_site=True,
    )
)
