"""Strings that name an Intel GPU (`'xpu'`) or Apple GPU (`'mps'`) device where a device goes.

The same device positions as the CUDA strings of `device_string` (`.to('xpu')`, `device='mps'`,
`torch.device('xpu:0')`, a variable named like a device), offered after it; the rewrite is its
own (the string becomes 'xla' and torch_xla is imported).
"""

from __future__ import annotations

import re

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.findings import NOTED
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk
from pytpu.engine.rewriter.vocabulary.matches.devices import rewrite_device_string

KINDS = ("xpu", "mps")
NAME = "accelerator_string"


def device_kind(node: cst.CSTNode, kind: str) -> str | None:
    """'const' for 'xpu' / 'xpu:1', 'dynamic' for f'xpu:{rank}', else None (for `kind`)."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return "const" if isinstance(value, str) and _constant(kind).match(value) else None
    if isinstance(node, cst.FormattedString) and node.parts:
        first = node.parts[0]
        if isinstance(first, cst.FormattedStringText):
            if len(node.parts) == 1:
                return "const" if _constant(kind).match(first.value) else None
            if first.value == f"{kind}:":
                return "dynamic"
    return None


def _constant(kind: str) -> re.Pattern[str]:
    return re.compile(rf"^{kind}(:\d+)?$")


def _match(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    for case in cases:
        if device_kind(node, case.names[0]) is not None:
            walk.plan(node, case, patterns.Bindings(covered=[node]))
            return True
    return False


def _dynamic_is_noted(case: Case, node: cst.CSTNode) -> str | None:
    """`f'xpu:{rank}'` becomes the one XLA device of the process: a note says so."""
    return NOTED if device_kind(node, case.names[0]) == "dynamic" else None


MATCH_KINDS.register(
    MatchKind(
        name=NAME,
        doc="a string naming an Intel GPU (`'xpu'`, `'xpu:0'`, `f'xpu:{rank}'`) or Apple GPU "
        "(`'mps'`) device in a device position (see `device_positions`)",
        properties={NAME: {"enum": list(KINDS)}},
        describe=lambda match: (
            f"A string naming the `{match[NAME]}` device (`'{match[NAME]}'`, "
            f"`'{match[NAME]}:0'`, ...) in a device position (see `device_positions` in the "
            "device family's introduction)."
        ),
        words=lambda case: frozenset(case.names),
        match=_match,
        marks=("device",),
        rewrite=rewrite_device_string,
        finding_kind=_dynamic_is_noted,
        order=11,  # after the CUDA strings of `device_string`
    )
)
