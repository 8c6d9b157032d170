"""An optimizer built from a module's parameters before the module moves to the device."""

from __future__ import annotations

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk


def _plan_first_hazard(walk: Walk, case: Case) -> None:
    for node in walk.optimizer_order.hazards():
        walk.plan(node, case, patterns.Bindings())
        break  # one statement fixes them all


ANALYSES.register(
    BuiltinAnalysis(
        name="optimizer_order",
        doc="a module moved to the device after an optimizer was built from its parameters "
        "(or in another function): the rule applies once per file",
        words=lambda kb: {frozenset({"optim", "parameters"})},
        after_walk=_plan_first_hazard,
    )
)
