"""Contexts about process launches (`mp.spawn`, `torch_xla.launch`)."""

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.ddp_programs import (
    joins_a_group_of_one,
    spawns_ddp_workers,
)
from pytpu.engine.rewriter.vocabulary.facts.launches import launches
from pytpu.engine.rewriter.vocabulary.facts.process_groups import (
    joins_process_group,
    joins_process_group_if_asked,
)
from pytpu.engine.rewriter.vocabulary.facts.top_level_training import (
    is_main_guard,
    trains_at_top_level,
)


def _runs_at_import(walk: Walk) -> bool:
    """Not in a function's body nor in a lambda: a class body, a decorator and a parameter's
    default run when the module is imported, as module-level code does."""
    path = walk.path
    for i, node in enumerate(path):
        if type(node) is cst.Lambda:
            return False
        if type(node) is cst.FunctionDef and i + 1 < len(path) and path[i + 1] is node.body:
            return False
    return True


CONTEXTS.register(
    Context(
        name="pre_launch",
        doc="only in code that runs at import (module level, class bodies, decorators, "
        "defaults) of a file that launches processes (`mp.spawn`, `torch_xla.launch`): code "
        "that runs before the launch, in the parent",
        holds=lambda walk: walk.fact(launches) and _runs_at_import(walk),
    )
)
CONTEXTS.register(
    Context(
        name="single_program",
        doc="only in a file that neither launches processes (`mp.spawn`, `torch_xla.launch`) "
        "nor joins a process group (`init_process_group`, as torchrun's workers do): a program "
        "that is one process, not one of several",
        holds=lambda walk: not walk.fact(launches) and not walk.fact(joins_process_group),
    )
)
CONTEXTS.register(
    Context(
        name="single_script",
        doc="only in a single program (as `single_program`) with no `if __name__ == "
        "'__main__':` whose module-level code trains: a script or a notebook",
        holds=lambda walk: (
            walk.fact(trains_at_top_level)
            and not walk.fact(launches)
            and not walk.fact(joins_process_group)
        ),
    )
)


def _is_entry(walk: Walk) -> bool:
    """The file is a program's entry: it has `if __name__ == '__main__':` at module level, or
    its module-level code trains."""
    module = walk.module
    if module is not None and any(is_main_guard(s) for s in module.body):
        return True
    return walk.fact(trains_at_top_level)


CONTEXTS.register(
    Context(
        name="single_unless_launched",
        doc="only in a program's entry file (with `if __name__ == '__main__':`, or training at "
        "module level) that launches no processes and joins a process group only under an "
        "`if` (nanoGPT's `if ddp:`): one process unless torchrun starts several",
        holds=lambda walk: (
            not walk.fact(launches)
            and walk.fact(joins_process_group_if_asked)
            and not walk.fact(joins_a_group_of_one)  # (a DDP program SPMD runs already)
            and _is_entry(walk)
        ),
    )
)
CONTEXTS.register(
    Context(
        name="spawned_ddp_program",
        doc="only in a file that spawns its workers (`mp.spawn`), joins them in a process group "
        "and wraps its model in DDP: a DDP program whole in one file, which one SPMD process "
        "runs under `data_parallel: spmd`",
        holds=lambda walk: walk.fact(spawns_ddp_workers),
    )
)
CONTEXTS.register(
    Context(
        name="not_a_group_of_one",
        doc="only in a file that does not run as one process in a process group of one "
        "(`init_process_group(..., world_size=1)`, a DDP program converted to SPMD, where "
        "`DataParallel` is the intended pass-through)",
        holds=lambda walk: not walk.fact(joins_a_group_of_one),
    )
)
