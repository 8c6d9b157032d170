"""The value a program gives a named setting: `def setup(backend='nccl')`,
`dist_backend: str = 'nccl'`, `parser.add_argument('--dist-backend', default='nccl')`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices, patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk


@cache
def _globs(names: tuple[str, ...]) -> cst_nodes.NameGlobs:
    return cst_nodes.NameGlobs([n.lower() for n in names])


@cache
def _name_string(name: str) -> cst.SimpleString:
    # (one node per name: libcst validates each node it makes, and most values a setting of
    # any name is offered are not taken)
    return cst.SimpleString(repr(name))


def _setting_name(text: str) -> str:
    """`--dist-backend` and `DIST_BACKEND` are the setting `dist_backend`."""
    return text.lstrip("-").replace("-", "_").lower()


def _option_names(call: cst.Call) -> list[str]:
    """What `parser.add_argument('-b', '--dist-backend', dest=...)` stores its value under."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            value = cst_nodes.literal_value(arg.value)
            return [_setting_name(value)] if isinstance(value, str) else []
    flags = [cst_nodes.literal_value(a.value) for a in call.args if a.keyword is None]
    return [_setting_name(f) for f in flags if isinstance(f, str)]


# Where a setting gets its value (`setting_at` restricts a case to some of them).
POSITIONS = {
    "parameter": "a parameter's default",
    "assignment": "an assignment outside a class body",
    "field": "a field of a class body (a dataclass's or a configuration class's)",
    "entry": "a dict entry",
    "option": "an `add_argument` default",
}


def _in_class_body(walk: Walk) -> bool:
    # (the path ends at the statement line: ClassDef > IndentedBlock > SimpleStatementLine)
    return len(walk.path) >= 3 and type(walk.path[-3]) is cst.ClassDef


def _position(walk: Walk, node: cst.CSTNode) -> tuple[str, list[str], cst.CSTNode | None]:
    """Where a node gives a value to a setting, the setting's names, and the value."""
    kind = type(node)
    if kind is cst.Param:
        return "parameter", [node.name.value], node.default
    if kind is cst.AnnAssign or kind is cst.Assign:
        target = node.target if kind is cst.AnnAssign else None
        if kind is cst.Assign and len(node.targets) == 1:
            target = node.targets[0].target
        name = cst_nodes.last_name(target) if target is not None else None
        where = "field" if _in_class_body(walk) else "assignment"
        return where, ([name] if name else []), node.value
    if kind is cst.DictElement:
        key = cst_nodes.literal_value(node.key)
        return "entry", ([key] if isinstance(key, str) else []), node.value
    if kind is cst.Arg and node.keyword is not None and node.keyword.value == "default":
        call = walk.path[-1] if walk.path else None
        if type(call) is cst.Call and type(call.func) is cst.Attribute:
            if call.func.attr.value == "add_argument":
                return "option", _option_names(call), node.value
    return "", [], None


def _values(node: cst.CSTNode, chain: list[cst.CSTNode]) -> Iterator[tuple[cst.CSTNode, list]]:
    """The value and, through conditional expressions and `or`/`and`, the values it may take,
    each with the nodes between the setting and it."""
    yield node, chain
    if type(node) is cst.IfExp:
        yield from _values(node.body, [*chain, node])
        yield from _values(node.orelse, [*chain, node])
    elif type(node) is cst.BooleanOperation:
        yield from _values(node.left, [*chain, node])
        yield from _values(node.right, [*chain, node])


@cache
def _any_case(cases: tuple) -> cst_nodes.NameGlobs:
    """The names any of the cases takes: most settings are no case's, and are let go at once."""
    return _globs(tuple(name for case in cases for name in case.names))


def _setting_value(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    where, names, value = _position(walk, node)
    if value is None or not names:
        return False
    names = [_setting_name(n) for n in names]
    wanted = _any_case(cases)
    if not any(n in wanted for n in names):
        return False
    planned = False
    for sub, chain in _values(value, [node]):
        if walk.is_claimed(sub):
            continue
        for case in cases:
            if not _applies(case, where, sub is value):
                continue
            globs = _globs(case.names)
            name = next((n for n in names if n in globs), None)
            if name is None:
                continue
            bindings = patterns.Bindings(
                nodes={"value": sub, "name": _name_string(name)}, covered=[sub]
            )
            if walk.satisfies(case, bindings):
                path = [id(n) for n in (*walk.path, *chain)]
                walk.plan(sub, case, bindings, path=path)
                planned = True
                break
    return planned


def _applies(case: Case, where: str, whole: bool) -> bool:
    """Whether a case takes a value in this position (`setting_at`), and a branch of it
    (`setting_branches`)."""
    positions = case.options.get("setting_at")
    if positions and where not in positions:
        return False
    return whole or case.options.get("setting_branches", True)


def _rewrite(edit: Edit) -> cst.CSTNode | None:
    """A string replacement keeps the site's quotes."""
    value = cst_nodes.literal_value(edit.case.template) if edit.case.template else None
    if isinstance(value, str) and type(edit.updated) is cst.SimpleString:
        return devices.quote_like(edit.updated, value)
    return None  # the case's replacement, as rendered


def _words(case: Case) -> frozenset[str]:
    """A word every listed name spells out (`backend` for `backend`, `*_backend`), if any: the
    file must contain it (an option is spelled `--dist-backend`: words are cut at `_`)."""
    pieces = [{p for p in re.split(r"[*?_\[\]]+", name.lower()) if p} for name in case.names]
    common = [p for p in pieces[0] if all(any(p in q for q in other) for other in pieces[1:])]
    return frozenset({max(common, key=len)}) if common else frozenset()


MATCH_KINDS.register(
    MatchKind(
        name="setting_value",
        doc="a value given to a setting named like one of the globs (any case; `--dist-backend` "
        "is `dist_backend`): a parameter's default, an assignment or a class field, a dict "
        "entry, an `add_argument` default, or one branch of a conditional expression there; "
        "`$value` is bound to the value and `$name` to the setting's name (a string); "
        "`setting_at` keeps some of these positions, `setting_branches: false` whole values",
        properties={
            "setting_value": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "setting_at": {
                "type": "array",
                "minItems": 1,
                "items": {"enum": list(POSITIONS)},
                "description": "only these positions: "
                + "; ".join(f"`{k}`, {v}" for k, v in POSITIONS.items()),
            },
            "setting_branches": {
                "type": "boolean",
                "description": "false: only a whole value, not a branch of a conditional "
                "expression or of `or`/`and` (default true)",
            },
        },
        describe=lambda match: (
            "A value given to a setting "
            + (
                "of any name"
                if match["setting_value"] == ["*"]
                else "named " + ", ".join(f"`{n}`" for n in match["setting_value"])
            )
            + " ("
            + (
                ", ".join(POSITIONS[p] for p in match["setting_at"])
                if "setting_at" in match
                else "a parameter's default, an assignment or class field, a dict entry, an "
                "`add_argument` default"
            )
            + (
                ")."
                if match.get("setting_branches") is False
                else ", or a branch of a conditional expression there)."
            )
        ),
        words=_words,
        match=_setting_value,
        node_types=(cst.Param, cst.AnnAssign, cst.Assign, cst.DictElement, cst.Arg),
        rewrite=_rewrite,
        order=35,
    )
)
