"""`calls_none_of`: the bound expression calls none of some qualified names (a batch size not
yet scaled by `xr.global_runtime_device_count()`)."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, DOTTED_LIST, Condition


def _calls_none_of(node: cst.CSTNode, names: list[str], walk: Any) -> bool:
    wanted = set(names)
    last = {name.rsplit(".", 1)[-1] for name in names}
    return not any(
        type(call) is cst.Call
        and cst_nodes.last_name(call.func) in last
        and walk.resolver.qualified_names(call.func) & wanted
        for call in cst_nodes.walk(node)
    )


CONDITIONS.register(
    Condition(
        name="calls_none_of",
        doc="is an expression that calls none of the listed qualified names, however the file "
        "imports them (a value the migration has not rewritten yet)",
        check=_calls_none_of,
        parameter=DOTTED_LIST,
        describe=lambda names: "calls none of " + ", ".join(f"`{n}`" for n in names),
    )
)
