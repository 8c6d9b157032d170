"""`match: {engine: name}`: a built-in analysis (see `analyses/`) finds the sites."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter.vocabulary import ANALYSES, MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Edit


def _rewrite(edit: Edit) -> cst.CSTNode | None:
    analysis = edit.case.analysis
    if analysis is None or analysis.rewrite is None:
        return edit.updated
    return analysis.rewrite(edit)


MATCH_KINDS.register(
    MatchKind(
        name="engine",
        doc="a site found by one of the built-in analyses below",
        properties=lambda: {"engine": {"enum": ANALYSES.names()}},
        describe=lambda m: (
            f"Built into the engine (`{m['engine']}`); the examples below show what it does."
        ),
        words=lambda case: frozenset(),  # each analysis gives its own words
        rewrite=_rewrite,
    )
)
