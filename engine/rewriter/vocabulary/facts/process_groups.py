"""`joins_process_group`: whether the module makes its process one of several
(`torch.distributed.init_process_group`), as torchrun's and a launcher's workers do; and
`joins_process_group_if_asked`: whether it does so only under an `if` (nanoGPT's `if ddp:`),
so that it also runs as one process."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.launches import calls_of, calls_one_of
from pytpu.engine.rewriter.vocabulary.facts.top_level_training import is_main_guard


@fact(
    "joins_process_group",
    "whether the module calls one of the KB's `loops.process_groups` "
    "(`torch.distributed.init_process_group`), by what the call refers to",
)
def joins_process_group(walk: Walk) -> bool:
    return calls_one_of(walk, walk.index.process_groups)


@fact(
    "joins_process_group_if_asked",
    "whether every call of the KB's `loops.process_groups` in the module is under an `if` "
    "other than `if __name__ == '__main__':` (nanoGPT's `if ddp: init_process_group(...)`): "
    "a program that runs as one process unless a launcher such as torchrun asks otherwise",
)
def joins_process_group_if_asked(walk: Walk) -> bool:
    calls = calls_of(walk, walk.index.process_groups)
    if not calls or walk.module is None:
        return False
    guarded = set(_under_an_if(walk.module, False))
    return all(id(call) in guarded for call in calls)


def _under_an_if(node: cst.CSTNode, guarded: bool) -> list[int]:
    """The ids of the calls under an `if` (not the main guard) below `node`."""
    found = [id(node)] if guarded and type(node) is cst.Call else []
    branch = type(node) is cst.If and not is_main_guard(node)
    for child in cst_nodes.iter_children(node):
        inside = guarded or (branch and child in (node.body, node.orelse))
        found += _under_an_if(child, inside)
    return found
