"""Contexts about the process's rank: code that some ranks skip (`if rank == 0:`)."""

from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context

CONTEXTS.register(
    Context(
        name="rank_guarded",
        doc="only inside code that some ranks skip (`if rank == 0:`)",
        holds=lambda walk: walk.rank_guarded(),
    )
)
CONTEXTS.register(
    Context(
        name="not_rank_guarded",
        doc="only outside code that some ranks skip (`if rank == 0:`)",
        holds=lambda walk: not walk.rank_guarded(),
    )
)
