"""`joins_process_group`: whether the module makes its process one of several
(`torch.distributed.init_process_group`), as torchrun's and a launcher's workers do."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


@fact(
    "joins_process_group",
    "whether the module calls one of the KB's `loops.process_groups` "
    "(`torch.distributed.init_process_group`), by what the call refers to",
)
def joins_process_group(walk: Walk) -> bool:
    module = walk.module
    if module is None:
        return False
    calls = walk.index.process_groups
    words = {name.rsplit(".", 1)[-1] for name in calls}
    if walk.text and not any(word in walk.text for word in words):
        return False
    return any(
        type(node) is cst.Call
        and cst_nodes.last_name(node.func) in words
        and bool(walk.resolver.qualified_names(node.func) & calls)
        for node in cst_nodes.walk(module)
    )
