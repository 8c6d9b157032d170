"""The engine's name handling, which every rule relies on: documented by its own rules."""

from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis

ANALYSES.register(
    BuiltinAnalysis(
        name="imports",
        doc="the imports a rewritten file needs are added with the aliases of the `modules` "
        "setting, and aliased imports a rewrite left unused are removed",
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="qualified_names",
        doc="dotted names match by what they refer to (libcst's qualified names), however the "
        "file imports them",
    )
)
