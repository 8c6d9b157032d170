"""Edits on libcst nodes that rules need: comments above a statement, parentheses, keyword
arguments, imports of renamed modules, removed or unwrapped statements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns

_EMPTY = cst.Module(body=[])


def changed(before: cst.CSTNode, after: Any) -> bool:
    if not isinstance(after, cst.CSTNode):
        return True
    return _EMPTY.code_for_node(before) != _EMPTY.code_for_node(after)


def same_statement(line: cst.CSTNode, other: cst.CSTNode | None) -> bool:
    if other is None:
        return False
    return _bare_code(line) == _bare_code(other)


def same_small_statement(a: cst.BaseSmallStatement, b: cst.CSTNode | None) -> bool:
    """`a` and `b` are the same small statement, whatever their semicolons and spacing."""
    if not isinstance(b, cst.BaseSmallStatement):
        return False
    plain = [s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in (a, b)]
    return " ".join(_EMPTY.code_for_node(plain[0]).split()) == " ".join(
        _EMPTY.code_for_node(plain[1]).split()
    )


def _bare_code(statement: cst.CSTNode) -> str:
    """A statement's code without its comments and with whitespace collapsed."""
    return " ".join(_EMPTY.code_for_node(statement.with_changes(leading_lines=[])).split())


# Where an expression of lower precedence (comparison, `and`, conditional) may stand unwrapped.
_LOOSE_PARENTS = (
    cst.Arg,
    cst.Element,
    cst.DictElement,
    cst.Param,
    cst.Index,
    cst.Assign,
    cst.AnnAssign,
    cst.AugAssign,
    cst.Return,
    cst.Expr,
    cst.If,
    cst.While,
    cst.Assert,
    cst.IfExp,
    cst.FormattedStringExpression,
    cst.Yield,
    cst.WithItem,
    cst.SimpleStatementLine,
    cst.AssignTarget,
    cst.Lambda,
    cst.Decorator,
)
_LOW_PRECEDENCE = (
    cst.Comparison,
    cst.BooleanOperation,
    cst.IfExp,
    cst.Lambda,
    cst.UnaryOperation,
    cst.BinaryOperation,
)


def needs_parens(parent: cst.CSTNode | None, old: cst.CSTNode, new: cst.CSTNode) -> bool:
    """Whether `new`, put where `old` was under `parent`, must be wrapped in parentheses."""
    if not isinstance(new, _LOW_PRECEDENCE) or getattr(new, "lpar", None):
        return False
    if isinstance(old, _LOW_PRECEDENCE) and type(old) is type(new):
        return False
    if parent is None or isinstance(parent, _LOOSE_PARENTS):
        return False
    if isinstance(parent, cst.BooleanOperation):
        return isinstance(new, (cst.IfExp, cst.Lambda, cst.BooleanOperation))
    return True


def rebind(
    bindings: patterns.Bindings, original: cst.CSTNode, updated: cst.CSTNode
) -> patterns.Bindings:
    """Map bound nodes of the original tree to their rewritten versions inside `updated`."""
    if original is updated:
        return bindings
    mapping: dict[int, cst.CSTNode] = {}

    def walk(orig: cst.CSTNode, upd: cst.CSTNode) -> None:
        mapping[id(orig)] = upd
        orig_children = list(cst_nodes.iter_children(orig))
        upd_children = list(cst_nodes.iter_children(upd))
        if len(orig_children) != len(upd_children):
            return
        for o, u in zip(orig_children, upd_children, strict=True):
            if type(o) is type(u) or not isinstance(o, cst.BaseExpression):
                walk(o, u)
            else:
                mapping[id(o)] = u

    walk(original, updated)
    return patterns.Bindings(
        nodes={k: mapping.get(id(v), v) for k, v in bindings.nodes.items()},
        rests={k: [mapping.get(id(a), a) for a in v] for k, v in bindings.rests.items()},
        covered=bindings.covered,
    )


def keep_parens(old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """Keep the parentheses that wrapped the old expression (they may carry line breaks)."""
    lpar, rpar = getattr(old, "lpar", ()), getattr(old, "rpar", ())
    if lpar and hasattr(new, "lpar") and not new.lpar:
        return new.with_changes(lpar=lpar, rpar=rpar)
    return new


def with_comments(stmt: cst.CSTNode, comments: list[str]) -> cst.CSTNode:
    existing = {
        line.comment.value.strip() for line in stmt.leading_lines if line.comment is not None
    }
    codes = {c.split(":", 1)[0].split(" note")[0] for c in existing}
    new_lines = [
        cst.EmptyLine(comment=cst.Comment(text))
        for text in comments
        if text not in existing and text.split(":", 1)[0].split(" note")[0] not in codes
    ]
    if not new_lines:
        return stmt
    return stmt.with_changes(leading_lines=[*stmt.leading_lines, *new_lines])


def dedupe_module_header(module: cst.Module) -> cst.Module:
    """Comments above a module's first statement live in its header: a finding whose comment is
    already there (from an earlier run) must not be added again."""
    header = {line.comment.value for line in module.header if line.comment is not None}
    first = module.body[0]
    kept = [
        ln for ln in first.leading_lines if ln.comment is None or ln.comment.value not in header
    ]
    if len(kept) == len(first.leading_lines):
        return module
    return module.with_changes(body=[first.with_changes(leading_lines=kept), *module.body[1:]])


def hoist_body(node: cst.If | cst.With) -> Any:
    """Replace a compound statement by the statements of its body, dedented (its comments go
    to the first of them): an unwrapped `with`, or an `if True:` left by a replacement."""
    body = node.body
    if isinstance(body, cst.SimpleStatementSuite):
        # `if x: a; b` -> `a; b`: one line still, so the comments about it stay true
        statements: list[cst.BaseStatement] = [
            cst.SimpleStatementLine(body=body.body, trailing_whitespace=body.trailing_whitespace)
        ]
    else:
        statements = list(body.body)
    if not statements:
        return cst.RemovalSentinel.REMOVE
    above = {line.comment.value for line in node.leading_lines if line.comment is not None}
    own = [
        line
        for line in statements[0].leading_lines
        if line.comment is None or line.comment.value not in above  # said once is enough
    ]
    first = statements[0].with_changes(leading_lines=[*node.leading_lines, *own])
    return cst.FlattenSentinel([first, *statements[1:]])


def as_else(node: cst.If) -> cst.Else:
    """An `elif` whose test a replacement made `True`, as the `else` it amounts to."""
    return cst.Else(
        body=node.body,
        leading_lines=node.leading_lines,
        whitespace_before_colon=node.whitespace_after_test,
    )


def edit_kwargs(
    call: cst.Call, action: dict[str, Any], render: Callable[[str, str | None], cst.BaseExpression]
) -> cst.Call:
    drop = set(action.get("drop_kwargs", ()))
    rename = action.get("rename_kwargs", {})
    set_kwargs = dict(action.get("set_kwargs", {}))
    args: list[cst.Arg] = []
    for arg in call.args:
        key = arg.keyword.value if arg.keyword is not None else None
        if key in drop:
            continue
        if key in rename:
            arg = arg.with_changes(keyword=cst.Name(rename[key]))
            key = rename[key]
        if key in set_kwargs:
            quote = arg.value.quote if isinstance(arg.value, cst.SimpleString) else None
            arg = arg.with_changes(value=render(set_kwargs.pop(key), quote))
        args.append(arg)
    no_space = cst.SimpleWhitespace("")
    for key, value in set_kwargs.items():
        equal = cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space)
        args.append(cst.Arg(keyword=cst.Name(key), value=render(value, None), equal=equal))
    return call.with_changes(args=cst_nodes.normalise_commas(args))


def rename_module_import(node: Any, old: str, new: str) -> Any:
    """Point an import of module `old` (or of something inside it) at `new`."""

    def renamed(path: str) -> str:
        return new + path[len(old) :] if path == old or path.startswith(old + ".") else path

    if isinstance(node, cst.Import):
        names = []
        for alias in node.names:
            path = cst_nodes.dotted_name(alias.name) or ""
            names.append(alias.with_changes(name=dotted(renamed(path))))
        return node.with_changes(names=names)
    if isinstance(node, cst.ImportFrom) and node.module is not None:
        base = cst_nodes.dotted_name(node.module) or ""
        if base == old or base.startswith(old + "."):
            return node.with_changes(module=dotted(renamed(base)))
        # from <parent of old> import <last part of old> [as alias]
        if isinstance(node.names, Sequence) and len(node.names) == 1:
            alias = node.names[0]
            full = f"{base}.{cst_nodes.dotted_name(alias.name)}"
            if full == old:
                parent, _, last = new.rpartition(".")
                asname = alias.asname or (
                    cst.AsName(name=cst.Name(cst_nodes.dotted_name(alias.name) or last))
                    if last != cst_nodes.dotted_name(alias.name)
                    else None
                )
                return node.with_changes(
                    module=dotted(parent),
                    names=[alias.with_changes(name=cst.Name(last), asname=asname)],
                )
    return node


def dotted(path: str) -> cst.Attribute | cst.Name:
    parts = path.split(".")
    node: cst.Attribute | cst.Name = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def is_import_line(statement: cst.CSTNode) -> bool:
    """A statement line that imports something."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
    )


def replace_node(tree: cst.CSTNode, target: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """`tree` with the node `target` (found by identity) replaced by `new`."""
    if tree is target:
        return new

    class Replace(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            return new if original is target else updated

    return tree.visit(Replace())
