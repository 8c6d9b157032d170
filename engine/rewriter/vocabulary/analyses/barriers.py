"""Step barriers: `torch_xla.sync()` ends each training or evaluation step (see `loops.py`)."""

from __future__ import annotations

from pytpu.engine.rewriter.loops import step_words
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis
from pytpu.engine.rewriter.vocabulary.contract import Edit


def _barrier_after(edit: Edit) -> None:
    """The barrier goes after a statement of the loop's body, which the rewrite pass leaves
    before it leaves the loop: ask for it on the way in."""
    if edit.plan.loop is not None and edit.plan.loop.after is not None:
        edit.add_statement_after(edit.plan.loop.after)


ANALYSES.register(
    BuiltinAnalysis(
        name="train_barrier",
        doc="a training loop (it steps an optimizer or calls backward) gets the rule's "
        "replacement, the barrier, after its last step statement; loops inside a training loop "
        "and loops that already have one get none, nor loops over MpDeviceLoader whose body "
        "ends at the step",
        words=step_words,
        takes_loop=lambda loop: loop.after is not None and loop.kind == "train",
        on_enter=_barrier_after,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="eval_barrier",
        doc="an evaluation or inference loop (it calls a model, see `model_names`) gets the "
        "barrier at the end of each iteration",
        words=step_words,
        takes_loop=lambda loop: loop.after is not None and loop.kind == "eval",
        on_enter=_barrier_after,
    )
)
