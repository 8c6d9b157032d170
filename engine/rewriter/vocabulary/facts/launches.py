"""`launches`: whether the module calls a process launcher (`mp.spawn`, `torch_xla.launch`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.imports import bound_paths
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


def calls_one_of(walk: Walk, names: frozenset[str]) -> bool:
    """Whether the module calls one of `names` (qualified), by what the call refers to."""
    return bool(calls_of(walk, names))


def calls_of(walk: Walk, names: frozenset[str]) -> list[cst.Call]:
    """The module's calls of one of `names` (qualified), by what each call refers to."""
    module = walk.module
    if module is None:
        return []
    words = {q.rsplit(".", 1)[-1] for q in names}
    if walk.text and not any(w in walk.text for w in words):
        return []
    # The whole file's imports: a context may ask before the walk reached an import below
    # (`import torch.multiprocessing as mp` after the module's code, or in `main()`).
    imported = {
        local: path
        for node in cst_nodes.walk(module)
        if type(node) is cst.Import or type(node) is cst.ImportFrom
        for local, path in bound_paths(node)
    }
    # a name imported as another (`DistributedDataParallel as DDP`) is called by that name
    words |= {local for local, path in imported.items() if path in names}
    calls = []
    for node in cst_nodes.walk(module):
        if type(node) is cst.Call and cst_nodes.last_name(node.func) in words:
            # (by what it refers to: Lightning's `fabric.launch()` launches nothing here)
            if walk.resolver.qualified_names(node.func) & names:
                calls.append(node)
                continue
            root, _, rest = (cst_nodes.dotted_name(node.func) or "").partition(".")
            path = imported.get(root)
            if path is not None and ".".join(filter(None, (path, rest))) in names:
                calls.append(node)
    return calls


@fact(
    "launches",
    "whether the module calls a process launcher of the KB's `loops.launchers` "
    "(`mp.spawn`, `torch_xla.launch`), by what the call refers to",
)
def launches(walk: Walk) -> bool:
    return calls_one_of(walk, walk.index.launchers)
