"""KB patterns: Python code with `$name` wildcards, matched structurally against libcst nodes.

A pattern is an expression (`torch.cuda.manual_seed($seed)`) or a statement
(`torch.backends.cudnn.benchmark = $value`). Dotted names in a pattern match by fully-qualified
name, so `from torch.cuda import manual_seed as seed_all; seed_all(1)` matches too. Wildcards:

- `$name` matches any one expression and binds it;
- `$*name` in a call's arguments matches the remaining arguments (positional and keyword);
- a wildcard at the root of a dotted name (`$x.cuda()`) matches any receiver that is not a module.

Templates use the same syntax; their dotted names are rendered with the aliases the file already
uses (see `imports.py`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import libcst as cst

from pytpu.engine.rewriter.cst_nodes import (
    chain_root,
    dotted_name,
    is_literal,
    iter_children,
    literal_value,
    normalise_commas,
    walk,
)

# names matched as written: literals, and the module's own globals (`__name__`), which no
# import or assignment binds
_CONSTANTS = frozenset({"True", "False", "None", "__name__", "__file__"})
WILDCARD_PREFIX = "__pytpu_w_"
REST_PREFIX = "__pytpu_r_"
_WILDCARD_RE = re.compile(r"\$(\*?)([A-Za-z_][A-Za-z0-9_]*)")

# Roots of dotted names that denote modules in patterns and templates (anything else, such as
# `True` or a wildcard, is not resolved through imports).
BUILTIN_NAMES = frozenset(
    {"str", "int", "float", "bool", "len", "isinstance", "print", "repr", "getattr"}
)


class PatternError(ValueError):
    """A KB pattern or template that does not parse or is not supported."""


def _substitute_wildcards(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return ("*" + REST_PREFIX if m.group(1) else WILDCARD_PREFIX) + m.group(2)

    return _WILDCARD_RE.sub(repl, text)


def parse_code(text: str) -> cst.CSTNode:
    """Parse pattern or template text: an expression if it is one, else one statement."""
    source = _substitute_wildcards(text.strip())
    if source.startswith("@"):
        try:
            function = cst.parse_statement(source + "\ndef _pytpu_decorated():\n    pass\n")
        except cst.ParserSyntaxError as exc:
            raise PatternError(f"does not parse as a decorator: {text!r} ({exc.message})") from None
        assert isinstance(function, cst.FunctionDef)
        return function.decorators[0]
    try:
        return cst.parse_expression(source)
    except cst.ParserSyntaxError:
        pass
    try:
        stmt = cst.parse_statement(source + "\n")
    except cst.ParserSyntaxError as exc:
        raise PatternError(f"does not parse as Python: {text!r} ({exc.message})") from None
    if isinstance(stmt, cst.SimpleStatementLine):
        if len(stmt.body) != 1:
            raise PatternError(f"one statement per pattern: {text!r}")
        return stmt.body[0]
    return stmt


def wildcard_name(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name) and node.value.startswith(WILDCARD_PREFIX):
        return node.value[len(WILDCARD_PREFIX) :]
    return None


def rest_name(arg: cst.Arg) -> str | None:
    if (
        arg.star == "*"
        and isinstance(arg.value, cst.Name)
        and arg.value.value.startswith(REST_PREFIX)
    ):
        return arg.value.value[len(REST_PREFIX) :]
    return None


def is_qualified_pattern(node: cst.CSTNode) -> bool:
    """A dotted name whose root is a real name (not a wildcard): matched by qualified name."""
    root = chain_root(node)
    return (
        isinstance(node, (cst.Name, cst.Attribute))
        and isinstance(root, cst.Name)
        and wildcard_name(root) is None
    )


def index_key(node: cst.CSTNode) -> str | None:
    """The name a node is dispatched on: the last component of its callee/target.
    (Called for every node of every file: types are compared with `is`, not isinstance,
    which is slow on libcst's ABC-based node classes.)"""
    kind = type(node)
    if kind is cst.Name:
        return None if node.value.startswith(WILDCARD_PREFIX) else node.value
    if kind is cst.Attribute:
        return node.attr.value
    if kind is cst.SimpleString:  # `backend = 'nccl'` is dispatched on the string
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if kind is cst.Tuple:  # `a, b = x.to(d), y.to(d)`: on its first element (`()`: none)
        return index_key(node.elements[0].value) if node.elements else None
    step = _KEY_STEPS.get(kind)
    return index_key(step(node)) if step is not None else None


_KEY_STEPS: dict[type, Callable[[Any], cst.CSTNode]] = {
    cst.Call: lambda n: n.func,
    cst.Assign: lambda n: n.targets[0].target,
    cst.AugAssign: lambda n: n.target,
    cst.AnnAssign: lambda n: n.target,
    cst.Subscript: lambda n: n.value,
    cst.Expr: lambda n: n.value,
    cst.With: lambda n: n.items[0].item,
    cst.If: lambda n: n.test,  # `if __name__ == '__main__':` is dispatched on `__name__`
    cst.ListComp: lambda n: n.elt,  # `[t.to(d) for t in batch]` on `to`
    cst.IfExp: lambda n: n.test,
    cst.Decorator: lambda n: n.decorator,
    cst.Comparison: lambda n: n.left,
}


def node_names(node: cst.CSTNode) -> Iterator[str]:
    """Every identifier a pattern needs to find in a file's text (for the cheap pre-filter)."""
    if (
        isinstance(node, cst.Name)
        and not wildcard_name(node)
        and not node.value.startswith(REST_PREFIX)
    ):
        if node.value not in BUILTIN_NAMES and node.value not in ("True", "False", "None"):
            yield node.value
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        # (a string source code may spell with escapes or quotes asks for no word)
        if isinstance(value, str) and value.isprintable() and not set(value) & set("\\'\""):
            yield value
    for child in iter_children(node):
        yield from node_names(child)


def _normalised(node: cst.CSTNode) -> str | None:
    try:
        return ast.dump(ast.parse(cst.Module(body=[]).code_for_node(node).strip(), mode="eval"))
    except SyntaxError:
        return None


@dataclass
class Bindings:
    """What a successful match bound: wildcard -> node, rest wildcard -> args, plus paths."""

    nodes: dict[str, cst.CSTNode] = field(default_factory=dict)
    rests: dict[str, list[cst.Arg]] = field(default_factory=dict)
    # Nodes of the target that the pattern itself covers (not wildcards): no other rule may
    # claim them, so an outer match wins over an inner one.
    covered: list[cst.CSTNode] = field(default_factory=list)


class NameLookup(Protocol):
    """What matching needs to know about a file: qualified names and module references."""

    def qualified_names(self, node: cst.CSTNode) -> set[str]: ...

    def is_module(self, node: cst.CSTNode) -> bool: ...


def match(
    pattern: cst.CSTNode, target: cst.CSTNode, resolver: NameLookup, bindings: Bindings
) -> bool:
    """Structural match of `pattern` against `target`, resolving dotted names by qualified name."""
    name = wildcard_name(pattern)
    if name is not None:
        if name in bindings.nodes:
            return _normalised(bindings.nodes[name]) == _normalised(target)
        bindings.nodes[name] = target
        return True
    if type(pattern) is cst.Name and pattern.value in _CONSTANTS:
        # (`True`, `False`, `None` are literals, `__name__` the module's own: not names to resolve)
        if type(target) is cst.Name and target.value == pattern.value:
            bindings.covered.append(target)
            return True
        return False
    if is_qualified_pattern(pattern):
        return _match_qualified(pattern, target, resolver, bindings)
    if isinstance(pattern, cst.Attribute):
        if not isinstance(target, cst.Attribute) or target.attr.value != pattern.attr.value:
            return False
        if wildcard_name(pattern.value) is not None and resolver.is_module(target.value):
            return False
        bindings.covered.append(target)
        return match(pattern.value, target.value, resolver, bindings)
    if isinstance(pattern, cst.Call):
        if isinstance(target, cst.Call) and _match_call(pattern, target, resolver, bindings):
            bindings.covered.append(target)
            return True
        return False
    if is_literal(pattern):
        if is_literal(target) and literal_value(pattern) == literal_value(target):
            bindings.covered.append(target)
            return True
        return False
    matcher = _STRUCTURAL.get(type(pattern))
    if matcher is not None:
        if type(target) is not type(pattern):
            return False
        bindings.covered.append(target)
        return matcher(pattern, target, resolver, bindings)
    if type(target) is type(pattern):
        normalised = _normalised(pattern)
        if normalised is not None and normalised == _normalised(target):
            bindings.covered.append(target)
            return True
    return False


def _match_qualified(
    pattern: cst.CSTNode, target: cst.CSTNode, resolver: NameLookup, bindings: Bindings
) -> bool:
    if not isinstance(target, (cst.Name, cst.Attribute)):
        return False
    wanted = dotted_name(pattern)
    assert wanted is not None
    names = resolver.qualified_names(target)
    if wanted in BUILTIN_NAMES:
        ok = f"builtins.{wanted}" in names
    else:
        ok = wanted in names
    if ok:
        # The whole dotted chain is the match: `torch.cuda` inside it is not a separate site.
        node = target
        while isinstance(node, cst.Attribute):
            bindings.covered.append(node)
            node = node.value
        bindings.covered.append(node)
    return ok


def _match_call(
    pattern: cst.Call, target: cst.Call, resolver: NameLookup, bindings: Bindings
) -> bool:
    if not match(pattern.func, target.func, resolver, bindings):
        return False
    positional = [a for a in pattern.args if a.keyword is None and not a.star]
    keywords = {a.keyword.value: a for a in pattern.args if a.keyword is not None}
    rest = next((rest_name(a) for a in pattern.args if rest_name(a)), None)
    if any(a.star and not rest_name(a) for a in pattern.args):
        raise PatternError("only `$*name` may be starred in a pattern call")

    t_positional = [a for a in target.args if a.keyword is None and not a.star]
    if len(t_positional) < len(positional):
        return False
    if any(a.star for a in target.args[: len(positional)]):
        return False
    used: set[int] = set()
    for p_arg, t_arg in zip(positional, t_positional, strict=False):
        if not match(p_arg.value, t_arg.value, resolver, bindings):
            return False
        used.add(id(t_arg))
    for key, p_arg in keywords.items():
        t_arg = next(
            (a for a in target.args if a.keyword is not None and a.keyword.value == key), None
        )
        if t_arg is None or not match(p_arg.value, t_arg.value, resolver, bindings):
            return False
        used.add(id(t_arg))
    leftover = [a for a in target.args if id(a) not in used]
    if rest is None:
        return not leftover
    bindings.rests[rest] = leftover
    return True


def _match_fields(*fields: str):
    def matcher(
        pattern: cst.CSTNode, target: cst.CSTNode, resolver: NameLookup, bindings: Bindings
    ) -> bool:
        for name in fields:
            p_value, t_value = getattr(pattern, name), getattr(target, name)
            if isinstance(p_value, (list, tuple)):
                if len(p_value) != len(t_value):
                    return False
                if not all(
                    match(p, t, resolver, bindings) for p, t in zip(p_value, t_value, strict=True)
                ):
                    return False
            elif _is_operator(p_value):
                if type(p_value) is not type(t_value):
                    return False
            elif not match(p_value, t_value, resolver, bindings):
                return False
        return True

    return matcher


def _is_operator(node: object) -> bool:
    return isinstance(
        node,
        (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp),
    )


def _match_with(
    pattern: cst.With, target: cst.With, resolver: NameLookup, bindings: Bindings
) -> bool:
    if len(pattern.items) != len(target.items):
        return False
    for p_item, t_item in zip(pattern.items, target.items, strict=True):
        if not match(p_item.item, t_item.item, resolver, bindings):
            return False
        if p_item.asname is not None:
            if t_item.asname is None or not match(
                p_item.asname.name, t_item.asname.name, resolver, bindings
            ):
                return False
    return True


def _is_ellipsis_block(block: cst.BaseSuite) -> bool:
    """A pattern's `...` body: any body matches."""
    statements = getattr(block, "body", ())
    if isinstance(block, cst.IndentedBlock):
        lines = list(statements)
        if len(lines) != 1 or not isinstance(lines[0], cst.SimpleStatementLine):
            return False
        statements = lines[0].body
    return (
        len(statements) == 1
        and isinstance(statements[0], cst.Expr)
        and isinstance(statements[0].value, cst.Ellipsis)
    )


def _match_if(pattern: cst.If, target: cst.If, resolver: NameLookup, bindings: Bindings) -> bool:
    """`if test:` and its block; a pattern's `...` block takes any block (and `else`)."""
    if not match(pattern.test, target.test, resolver, bindings):
        return False
    if _is_ellipsis_block(pattern.body):
        return True
    if pattern.orelse is not None or target.orelse is not None:
        return False  # (an `else` in a pattern is not needed yet)
    return match(pattern.body, target.body, resolver, bindings)


def _match_comp_for(
    pattern: cst.CompFor, target: cst.CompFor, resolver: NameLookup, bindings: Bindings
) -> bool:
    """`for t in batch` of a comprehension: one `for`, no `if`s (as the pattern has none)."""
    if pattern.ifs or target.ifs or pattern.inner_for_in or target.inner_for_in:
        return False
    if pattern.asynchronous is not None or target.asynchronous is not None:
        return False
    return match(pattern.target, target.target, resolver, bindings) and match(
        pattern.iter, target.iter, resolver, bindings
    )


_STRUCTURAL: dict[type, Callable[..., bool]] = {
    cst.IfExp: _match_fields("test", "body", "orelse"),
    cst.BinaryOperation: _match_fields("operator", "left", "right"),
    cst.BooleanOperation: _match_fields("operator", "left", "right"),
    cst.UnaryOperation: _match_fields("operator", "expression"),
    cst.Comparison: _match_fields("left", "comparisons"),
    cst.ComparisonTarget: _match_fields("operator", "comparator"),
    cst.Subscript: _match_fields("value", "slice"),
    cst.SubscriptElement: _match_fields("slice"),
    cst.Index: _match_fields("value"),
    cst.Tuple: _match_fields("elements"),
    cst.List: _match_fields("elements"),
    cst.Element: _match_fields("value"),
    cst.Assign: _match_fields("targets", "value"),
    cst.AssignTarget: _match_fields("target"),
    cst.Expr: _match_fields("value"),
    cst.Decorator: _match_fields("decorator"),
    cst.With: _match_with,
    cst.If: _match_if,
    cst.ListComp: _match_fields("elt", "for_in"),
    cst.CompFor: _match_comp_for,
    cst.IndentedBlock: _match_fields("body"),
    cst.SimpleStatementLine: _match_fields("body"),
}


DottedRenderer = Callable[[str], cst.BaseExpression]


class _TemplateRenderer(cst.CSTTransformer):
    def __init__(
        self,
        nodes: dict[str, cst.CSTNode],
        rests: dict[str, list[cst.Arg]],
        dotted: DottedRenderer,
        quote: str,
        local_names: set[str],
    ):
        self.nodes = nodes
        self.rests = rests
        self.dotted = dotted
        self.quote = quote
        self.local_names = local_names  # names the template binds itself (`for part in ...`)

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.SimpleString:
        # Template strings follow the file's quoting (bound nodes are never visited here).
        body = updated.value[1:-1]
        if updated.prefix or len(updated.quote) != 1 or "'" in body or '"' in body:
            return updated
        return updated.with_changes(value=f"{self.quote}{body}{self.quote}")

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return not is_qualified_pattern(node) or self._local(node)

    def _local(self, node: cst.Attribute) -> bool:
        root = chain_root(node)
        return isinstance(root, cst.Name) and root.value in self.local_names

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        if is_qualified_pattern(original) and not self._local(original):
            return self.dotted(dotted_name(original))
        return _bound_tightly(original, updated, "value")

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.Subscript:
        return _bound_tightly(original, updated, "value")

    def leave_BinaryOperation(
        self, original: cst.BinaryOperation, updated: cst.BinaryOperation
    ) -> cst.BinaryOperation:
        return _bound_tightly(original, updated, "left", "right")

    def leave_UnaryOperation(
        self, original: cst.UnaryOperation, updated: cst.UnaryOperation
    ) -> cst.UnaryOperation:
        return _bound_tightly(original, updated, "expression")

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        name = wildcard_name(original)
        if name is not None:
            if name not in self.nodes:
                raise PatternError(f"template uses ${name}, which the pattern does not bind")
            return self.nodes[name]
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        updated = _bound_tightly(original, updated, "func")
        if not any(rest_name(arg) or _unpacks_a_tuple(arg) for arg in updated.args):
            return updated
        args: list[cst.Arg] = []
        for arg in updated.args:
            name = rest_name(arg)
            if name:
                args.extend(self.rests.get(name, []))
            elif _unpacks_a_tuple(arg):
                # `*$args` bound to `(a, b)` reads `a, b` (`mp.spawn(main, args=(a, b))`)
                args.extend(cst.Arg(element.value) for element in arg.value.elements)
            else:
                args.append(arg)
        return updated.with_changes(args=normalise_commas(args))

    def visit_Arg(self, node: cst.Arg) -> bool:
        # Keep `*__pytpu_r_x` intact for leave_Call (its Name must not be rendered as a wildcard).
        return rest_name(node) is None


def _unpacks_a_tuple(arg: cst.Arg) -> bool:
    """`*(a, b)`: a literal tuple unpacked, with no starred element of its own."""
    value = arg.value
    return (
        arg.star == "*"
        and type(value) is cst.Tuple
        and all(type(e) is cst.Element for e in value.elements)
    )


# Expressions that bind more loosely than an attribute, a subscript, a call or an operator's
# operand: bound into such a place they need their parentheses (`$t.cpu()` with `$t` = `a / b`).
LOOSE = (
    cst.BinaryOperation,
    cst.BooleanOperation,
    cst.UnaryOperation,
    cst.Comparison,
    cst.IfExp,
    cst.Lambda,
    cst.NamedExpr,
    cst.Await,
)


Node = TypeVar("Node", bound=cst.CSTNode)


def _bound_tightly(original: Node, updated: Node, *fields: str) -> Node:
    """`updated` with each of its `fields` that a wildcard filled with a loose expression put in
    parentheses (a template's own code is written as meant)."""
    changes = {}
    for name in fields:
        child = getattr(updated, name)
        if wildcard_name(getattr(original, name)) is not None and isinstance(child, LOOSE):
            if not child.lpar:
                changes[name] = child.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return updated.with_changes(**changes) if changes else updated


def _bound_names(template: cst.CSTNode) -> set[str]:
    """The plain names a template binds itself (loop, comprehension and assignment targets):
    its own variables, not modules to import (`part.dim()` in `for part in (...)`)."""
    found: set[str] = set()
    for node in walk(template):
        targets: list[cst.CSTNode] = []
        if isinstance(node, (cst.For, cst.CompFor)):
            targets = [node.target]
        elif isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)):
            targets = [node.target]
        for target in targets:
            found.update(n.value for n in walk(target) if isinstance(n, cst.Name))
    return {name for name in found if wildcard_name(cst.Name(name)) is None}


def render(
    template: cst.CSTNode, bindings: Bindings, dotted: DottedRenderer, quote: str = "'"
) -> cst.CSTNode:
    """Fill a template's wildcards with bound nodes and render its dotted names."""
    renderer = _TemplateRenderer(
        bindings.nodes, bindings.rests, dotted, quote, _bound_names(template)
    )
    return template.visit(renderer)
