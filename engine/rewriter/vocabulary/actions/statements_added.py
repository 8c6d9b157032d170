"""Actions that add a statement: after the matched one, first in the matched block, or once
at the top of the module."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import ACTIONS, Action
from pytpu.engine.rewriter.vocabulary.contract import Edit

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


def _begin_body(edit: Edit, node: cst.CSTNode, code: str) -> cst.CSTNode:
    """`code` as the first statement of the matched block (`if __name__ == "__main__":`); a
    one-line block (`if c: main()`) becomes an indented one."""
    if not isinstance(node, cst.BaseCompoundStatement):
        return node
    rendered = edit.render(patterns.parse_code(code), edit.plan.bindings)
    if isinstance(rendered, cst.BaseExpression):
        rendered = cst.Expr(value=rendered)
    if isinstance(rendered, cst.BaseSmallStatement):
        rendered = cst.SimpleStatementLine(body=[rendered])
    body = node.body
    if isinstance(body, cst.SimpleStatementSuite):
        body = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=body.body)])
    if not isinstance(body, cst.IndentedBlock):
        return node
    if body.body and body.body[0].deep_equals(rendered):
        return node  # already there
    return node.with_changes(body=body.with_changes(body=[rendered, *body.body]))


ACTIONS.register(
    Action(
        name="begin_body",
        doc="add this statement (simple or compound) first in the body of the matched block "
        "statement (`if __name__ == '__main__':`)",
        parameter=CODE,
        describe=lambda value: "this statement begins the matched block",
        apply=_begin_body,
        shows_code=True,
        keeps_site=True,
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
