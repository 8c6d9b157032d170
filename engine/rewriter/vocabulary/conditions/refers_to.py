"""`refers_to`: a bound name is one of some qualified names however the file imports it
(`torch.float64`, `from torch import double`): a dtype or a class given as a value."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONDITIONS, DOTTED_LIST, Condition


def _refers_to(node: cst.CSTNode, names: list[str], walk: Any) -> bool:
    if type(node) is not cst.Name and type(node) is not cst.Attribute:
        return False
    return bool(walk.resolver.qualified_names(node) & set(names))


CONDITIONS.register(
    Condition(
        name="refers_to",
        doc="is a name that refers to one of the listed qualified names, however the file "
        "imports it (`torch.double`, `from torch import float64`)",
        check=_refers_to,
        parameter=DOTTED_LIST,
        describe=lambda names: "one of " + ", ".join(f"`{n}`" for n in names),
        words=lambda names: {frozenset({n.rsplit(".", 1)[-1]}) for n in names},
    )
)
