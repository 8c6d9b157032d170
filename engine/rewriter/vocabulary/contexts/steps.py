"""Contexts about training and evaluation steps: where a host sync costs a step's time."""

from pytpu.engine.rewriter.loops import step_words
from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context

CONTEXTS.register(
    Context(
        name="in_step",
        doc="only inside a training or evaluation loop",
        holds=lambda walk: walk.in_step(),
        words=step_words,
    )
)
CONTEXTS.register(
    Context(
        name="step_unthrottled",
        doc="only inside a training or evaluation loop, and not under an `if` that runs every "
        "n-th step (`if step % 10 == 0:`)",
        holds=lambda walk: walk.in_step() and not walk.step_throttled(),
        words=step_words,
    )
)
