"""Strings that name a CUDA device or a GPU where no other rule looked: the KB's safety net."""

from __future__ import annotations

import re

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk

_GPU_RE = re.compile(r"^gpu(:\d+)?$")
# Calls whose string arguments are messages for people, or the name of an attribute.
_NOT_VALUES = frozenset(
    {"print", "debug", "info", "warning", "warn", "error", "critical", "exception", "write"}
    | {"getattr", "hasattr", "setattr", "delattr"}
)


def _names(word: str, node: cst.CSTNode) -> bool:
    """`node` names a device of `word`: `cuda` (`'cuda:0'`, `f'cuda:{rank}'`) or `gpu`."""
    if type(node) is cst.SimpleString and word not in node.value:
        return False  # (most strings: no literal to evaluate)
    if word == "cuda":
        return devices.cuda_device_kind(node) is not None
    value = node.evaluated_value if type(node) is cst.SimpleString else None
    return isinstance(value, str) and _GPU_RE.match(value) is not None


def written_for_people(walk: Walk) -> bool:
    """The string the walk is at is a docstring, a message (`print('cuda')`, `log.info(...)`)
    or an attribute's name (`getattr(args, 'cuda')`): words, not a value the program uses."""
    path = walk.path
    if path and type(path[-1]) is cst.Expr:
        return True
    if len(path) >= 2 and type(path[-1]) is cst.Arg and type(path[-2]) is cst.Call:
        return cst_nodes.last_name(path[-2].func) in _NOT_VALUES
    return False


def _used_as_a_value(walk: Walk, node: cst.CSTNode) -> bool:
    """Not a dict key or a subscript (`cfg['gpu']` names a setting), nor written for people."""
    parent = walk.path[-1] if walk.path else None
    if type(parent) is cst.DictElement:
        return parent.value is node
    return type(parent) is not cst.Index and not written_for_people(walk)


def _stray_device_word(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    case = next((c for c in cases if _names(c.values[0], node)), None)
    if case is not None and _used_as_a_value(walk, node):
        walk.defer(node, case)  # a device variable's string is decided after the walk
    return False


MATCH_KINDS.register(
    MatchKind(
        name="device_word",
        doc="a string naming a CUDA device or a GPU (`'cuda'`, `'cuda:1'`, `f'cuda:{rank}'`, "
        "`'gpu'`) used as a value, where no other rule matched it (not a dict key, a subscript, "
        "a docstring, a message or an attribute's name)",
        properties={"device_word": {"enum": ["cuda", "gpu"]}},
        describe=lambda match: (
            "A string naming a CUDA device or a GPU used as a value where no other rule "
            "matched it: a comparison with a variable of another name, an item of a list, an "
            "argument of the program's own function, an expected value in a test."
        ),
        words=lambda case: frozenset(case.values),
        values_of=lambda match: (match["device_word"],),
        match=_stray_device_word,
        node_types=(cst.SimpleString, cst.FormattedString),
        order=90,  # last: every rule that knows the position goes first
    )
)
