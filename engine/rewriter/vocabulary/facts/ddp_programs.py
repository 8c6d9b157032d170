"""`spawns_ddp_workers`: whether the module is a whole DDP program, one process per GPU: it
spawns its workers (`mp.spawn`), joins them in a process group and wraps its model in DDP; and
`joins_a_group_of_one`: whether it runs as one process in a group of one, as such a program
does once converted to SPMD."""

from __future__ import annotations

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.launches import calls_of, calls_one_of


@fact(
    "spawns_ddp_workers",
    "whether the module calls one of the KB's `loops.worker_spawners` (`mp.spawn`), one of its "
    "`loops.process_groups` and one of its `loops.ddp_wrappers` (DistributedDataParallel), and "
    "none of its `loops.role_splitting_calls` (RPC's `init_rpc`): a DDP program whole in one "
    "file whose processes all do the same, which one SPMD process can run (a wrap or a process "
    "group in another file is not seen, and such a program keeps its processes)",
)
def spawns_ddp_workers(walk: Walk) -> bool:
    index = walk.index
    return (
        calls_one_of(walk, index.worker_spawners)
        and calls_one_of(walk, index.process_groups)
        and calls_one_of(walk, index.ddp_wrappers)
        and not calls_one_of(walk, index.role_splitting_calls)
    )


@fact(
    "joins_a_group_of_one",
    "whether the module joins a process group of one process (`init_process_group(..., "
    "world_size=1)`): a program that runs as one process, as a DDP program converted to SPMD "
    "does (R-SPMD-05)",
)
def joins_a_group_of_one(walk: Walk) -> bool:
    return any(
        arg.keyword is not None
        and arg.keyword.value == "world_size"
        and cst_nodes.literal_value(arg.value) == 1
        for call in calls_of(walk, walk.index.process_groups)
        for arg in call.args
    )
