"""`joins_process_group`: whether the module makes its process one of several
(`torch.distributed.init_process_group`), as torchrun's and a launcher's workers do."""

from __future__ import annotations

from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.launches import calls_one_of


@fact(
    "joins_process_group",
    "whether the module calls one of the KB's `loops.process_groups` "
    "(`torch.distributed.init_process_group`), by what the call refers to",
)
def joins_process_group(walk: Walk) -> bool:
    return calls_one_of(walk, walk.index.process_groups)
