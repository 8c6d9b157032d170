"""String literals by their whole value: a name written as data (`'CUDA_VISIBLE_DEVICES'`)."""

from __future__ import annotations

from functools import cache

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk
from pytpu.engine.rewriter.vocabulary.matches.cuda_words import written_for_people


@cache
def _globs(values: tuple[str, ...]) -> cst_nodes.NameGlobs:
    return cst_nodes.NameGlobs(values)


def _string(walk: Walk, node: cst.SimpleString, cases: list[Case]) -> bool:
    if not any(all(word in node.value for word in _words(case)) for case in cases):
        return False  # (most strings: no literal to evaluate)
    value = node.evaluated_value
    if not isinstance(value, str) or written_for_people(walk):
        return False  # (bytes; a message, a docstring)
    for case in cases:
        if value in _globs(case.values):
            # after the walk, if no rule that knows the position took it (a safety net)
            walk.defer(node, case)
            return False
    return False


@cache
def _words(case: Case) -> frozenset[str]:
    """For the pre-filter, the text every glob of the case holds (`CUDA_` of `CUDA_*` and
    `*_CUDA_*`); none when they share none (then every file is read)."""
    parts = [max(value.split("*"), key=len) for value in case.values]
    common = min(parts, key=len)
    return frozenset({common}) if all(common in part for part in parts) else frozenset()


MATCH_KINDS.register(
    MatchKind(
        name="string",
        doc="a string literal whose whole value matches one of the listed globs (`CUDA_*`): a "
        "name written as data, such as an environment variable's; only where no other rule "
        "matched it or the code around it, and not in a message or a docstring",
        properties={
            "string": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 2}}
        },
        describe=lambda match: (
            "A string literal whose whole value is "
            + " or ".join(f"`{v}`" for v in match["string"])
            + " (`*` stands for any text)."
        ),
        words=_words,
        match=_string,
        node_types=(cst.SimpleString,),
        order=60,
        values_of=lambda match: tuple(match["string"]),
    )
)
