"""Contexts about process launches (`mp.spawn`, `torch_xla.launch`)."""

from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context

CONTEXTS.register(
    Context(
        name="pre_launch",
        doc="only at module level of a file that launches processes (`mp.spawn`, "
        "`torch_xla.launch`): code that runs before the launch, in the parent",
        holds=lambda walk: not walk.scope and walk.launches,
    )
)
