"""Reading libcst trees fast: names of dotted chains, literal values, the statements of a body,
and a walk that reads the nodes' fields instead of rebuilding them (libcst's visitors do). The
KB's pattern language (`patterns.py`) is built on these; so is every analysis."""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import re
from collections.abc import Callable, Iterator, Sequence

import libcst as cst


class NameGlobs:
    """Names given as globs (`*_loader`, `model*`): `name in globs`, remembered per name (the
    same names are asked about all over a file)."""

    def __init__(self, globs: list[str] | tuple[str, ...], but: list[str] | tuple[str, ...] = ()):
        self.pattern, self.exceptions = _any_glob(globs), _any_glob(but)
        self.seen: dict[str, bool] = {}

    def __contains__(self, name: str) -> bool:
        found = self.seen.get(name)
        if found is None:
            found = self.pattern.fullmatch(name) is not None
            found = self.seen[name] = found and self.exceptions.fullmatch(name) is None
        return found


def _any_glob(globs: list[str] | tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs) or "(?!)")


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def statements(body: Sequence[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """Every statement in `body` and in the blocks inside it (a class's, a loop's, each arm of
    an `if` or a `try`), small statements included: statements only, not their expressions."""
    for statement in body:
        if type(statement) is cst.SimpleStatementLine:
            yield from statement.body
            continue
        yield statement
        if isinstance(statement, cst.BaseSmallStatement):
            continue  # (a one-line suite's statements)
        if hasattr(statement, "body"):  # (a `match` has only its cases)
            yield from statements(statement.body.body)
        for clause in _clauses(statement):
            if type(clause) is cst.If:
                yield from statements((clause,))  # elif
            else:
                yield from statements(clause.body.body)


def _clauses(statement: cst.CSTNode) -> list[cst.CSTNode]:
    """The else, except, finally and case clauses of a compound statement."""
    found = [*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())]
    found += [getattr(statement, name, None) for name in ("orelse", "finalbody")]
    return [clause for clause in found if clause is not None]


def last_name(node: cst.CSTNode) -> str | None:
    """`x` of `x` or `a.b.x`; None for any other node."""
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        return node.attr.value
    return None


def chain_root(node: cst.CSTNode) -> cst.CSTNode:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node


# Fields that hold only layout (whitespace, punctuation, comments): never worth walking into.
_LAYOUT_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "comma",
        "semicolon",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "trailing_whitespace",
        "newline",
        "equal",
        "colon",
        "dot",
        "operator",
        "star_tok",
        "first_line",
        "indent",
        "asynchronous",
        "walrus",
        "arrow",
        "default_indicator",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "first_colon",
        "second_colon",
        "trailing_comma",
        "leading_whitespace",
        "last_line",
    }
)
_FIELD_CACHE: dict[type, tuple[str, ...]] = {}


def fields_of(node_type: type) -> tuple[str, ...]:
    names = _FIELD_CACHE.get(node_type)
    if names is None:
        names = tuple(
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _LAYOUT_FIELDS and not f.name.startswith("whitespace")
        )
        _FIELD_CACHE[node_type] = names
    return names


_IS_NODE: dict[type, bool] = {}


def is_node(value: object) -> bool:
    """isinstance(value, CSTNode), cached by type (CSTNode is an ABC: isinstance is slow)."""
    kind = type(value)
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = isinstance(value, cst.CSTNode)
    return known


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The child nodes that carry code, read straight from the dataclass fields.

    libcst's own `children` and visitors rebuild every node they pass; this only reads, which
    is what analysis needs and several times faster.
    """
    for name in fields_of(type(node)):
        value = getattr(node, name)
        if type(value) is tuple or type(value) is list:
            for item in value:
                if is_node(item):
                    yield item
        elif is_node(value):
            yield value


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node below it (pre-order), by `iter_children`."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(iter_children(current))))


def literal_value(node: cst.CSTNode) -> object:
    """The Python value of a literal node, or a sentinel when it is not a simple literal."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if value is not None else _NOT_LITERAL
    if isinstance(node, (cst.Integer, cst.Float)):
        return ast.literal_eval(node.value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_value(node.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return _NOT_LITERAL


_NOT_LITERAL = object()


def is_literal(node: cst.CSTNode) -> bool:
    return literal_value(node) is not _NOT_LITERAL


def normalise_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Arguments joined by ', ' where their commas were lost or would now trail."""
    out: list[cst.Arg] = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        if last:
            if isinstance(arg.comma, cst.Comma) and not _comma_has_newline(arg.comma):
                arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        elif not isinstance(arg.comma, cst.Comma):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        out.append(arg)
    return out


def _comma_has_newline(comma: cst.Comma) -> bool:
    return isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


def names_assigned(
    module: cst.Module | None, holds: Callable[[cst.BaseExpression], bool]
) -> frozenset[str]:
    """The dotted names (`x`, `self.x`) the module's assignments (`a = b = value`, anywhere in
    it) give a value that `holds` says is one of those looked for."""
    return frozenset(
        name
        for node in (walk(module) if module is not None else ())
        if type(node) is cst.Assign and holds(node.value)
        for target in node.targets
        if (name := dotted_name(target.target)) is not None
    )


def row_slice(node: cst.CSTNode) -> cst.Slice | None:
    """`x[start:stop]`'s one slice, with both bounds and no step."""
    if type(node) is not cst.Subscript or len(node.slice) != 1:
        return None
    part = node.slice[0].slice
    if type(part) is not cst.Slice or part.lower is None or part.upper is None:
        return None
    return part if part.step is None else None
