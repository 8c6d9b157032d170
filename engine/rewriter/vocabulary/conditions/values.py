"""Conditions on a bound value: a literal among some, `True` or `False`, not already on the host."""

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition


def _one_of(node: cst.CSTNode, values: list[Any], walk: Any) -> bool:
    return cst_nodes.is_literal(node) and cst_nodes.literal_value(node) in values


def _spelled_out(values: list[Any]) -> set[frozenset[str]]:
    """Pre-filter words: the file spells one of the values out. (A value that source code may
    write with escapes gives no word: the file is not skipped for it.)"""
    texts = [str(v) for v in values]
    if any(not isinstance(v, (str, int, float)) for v in values) or any(
        "\\" in text or "'" in text or '"' in text for text in texts
    ):
        return set()
    return {frozenset({text}) for text in texts}


def _on_host(node: cst.CSTNode, _: Any = None) -> bool:
    """`x.cpu()` or `x.to('cpu')`."""
    if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
        return False
    method = node.func.attr.value
    if method == "cpu":
        return True
    return method == "to" and any(cst_nodes.literal_value(a.value) == "cpu" for a in node.args)


CONDITIONS.register(
    Condition(
        name="one_of",
        doc="is a literal equal to one of the listed values",
        check=_one_of,
        parameter={"type": "array", "minItems": 1},
        describe=lambda values: "one of " + ", ".join(f"`{v}`" for v in values),
        words=_spelled_out,
    )
)
for literal in (True, False):
    CONDITIONS.register(
        Condition(
            name=str(literal).lower(),
            doc=f"is the literal `{literal}`",
            check=lambda node, _, walk, literal=literal: cst_nodes.literal_value(node) is literal,
            words=lambda _, literal=literal: {frozenset({str(literal)})},
        )
    )
CONDITIONS.register(
    Condition(
        name="not_host",
        doc="is not already moved to the host (`x.cpu()`, `x.to('cpu')`)",
        check=lambda node, _, walk: not _on_host(node),
    )
)
