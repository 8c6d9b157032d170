"""`keyword_value`: the value one keyword argument gets in a call of a known callable, as
`precision='16-mixed'` in `lightning.Trainer(...)`. Each keyword is a site of its own, so rules
about different keywords of one call (accelerator, precision, strategy) all apply to it."""

from __future__ import annotations

import fnmatch
import re
from functools import cache

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk

VALUE = "value"  # the wildcard bound to the keyword's value
OTHERS = "args"  # (for `where:` only) the call's other arguments
_GLOB = re.compile(r"[*?\[]")


@cache
def _callables(names: tuple[str, ...]) -> tuple[re.Pattern[str], frozenset[str] | None]:
    """The globs as one regex, and the last names a call's function may have (None: any)."""
    regex = re.compile("|".join(fnmatch.translate(name) for name in names))
    last = frozenset(name.rsplit(".", 1)[-1] for name in names)
    return regex, None if any(_GLOB.search(name) for name in last) else last


def _calls_one_of(walk: Walk, call: cst.Call, names: tuple[str, ...]) -> bool:
    regex, last = _callables(names)
    if last is not None and type(call.func) is cst.Attribute and call.func.attr.value not in last:
        return False  # (a bare name may be an alias: `from lightning import Trainer as T`)
    return any(regex.fullmatch(name) for name in walk.resolver.qualified_names(call.func))


def _for_conditions(arg: cst.Arg, call: cst.Call) -> patterns.Bindings:
    """`$value`, `$args` (the other arguments) and each other keyword's value by its name."""
    others = [a for a in call.args if a is not arg]
    nodes = {
        a.keyword.value: a.value
        for a in others
        if a.keyword is not None and a.keyword.value not in (VALUE, OTHERS)
    }
    return patterns.Bindings(nodes={**nodes, VALUE: arg.value}, rests={OTHERS: others})


def _keyword_value(walk: Walk, node: cst.Arg, cases: list[Case]) -> bool:
    call = walk.path[-1] if walk.path else None
    if node.keyword is None or type(call) is not cst.Call:
        return False
    keyword = node.keyword.value
    for case in cases:
        if case.names[0] != keyword or not _calls_one_of(walk, call, case.values):
            continue
        if walk.satisfies(case, _for_conditions(node, call)):
            # Only the value is planned: the siblings stay free for the rules about them.
            bindings = patterns.Bindings(nodes={VALUE: node.value}, covered=[node.value])
            walk.plan(node.value, case, bindings, path=[*map(id, walk.path), id(node)])
            return True
    return False


def _describe(match: dict) -> str:
    callables = ", ".join(f"`{name}`" for name in match.get("of", ()))
    return (
        f"`$value`, the value of `{match['keyword_value']}=` in a call of {callables} (`$args`: "
        "the call's other arguments; `$<keyword>`: another keyword's value)."
    )


MATCH_KINDS.register(
    MatchKind(
        name="keyword_value",
        doc="the value of one keyword argument in a call of one of the callables listed under "
        "`of` (globs over what names refer to: `transformers.*.from_pretrained`), a site of its "
        "own; `$value` is bound to it and, for `where:` only, `$args` to the call's other "
        "arguments and `$<keyword>` to each other keyword's value",
        properties={
            "keyword_value": {"$ref": "#/$defs/identifier"},
            "of": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "pattern": r"^[A-Za-z_*][A-Za-z0-9_.*]*$"},
            },
        },
        describe=_describe,
        words=lambda case: frozenset(case.names),
        match=_keyword_value,
        node_types=(cst.Arg,),
        order=36,
        roots=lambda case: {name.split(".")[0] for name in case.values},
        values_of=lambda match: tuple(match.get("of", ())),
    )
)
