"""A training or evaluation loop over a DataLoader iterates it through MpDeviceLoader."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import node_edits, patterns
from pytpu.engine.rewriter.loops import step_words
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis
from pytpu.engine.rewriter.vocabulary.contract import Edit


def _wrap_loader(edit: Edit) -> cst.CSTNode:
    """`for x, y in loader:` -> `for x, y in MpDeviceLoader(loader, device):` (the rule's
    replacement with `$loader` bound), inside `enumerate(...)` / `tqdm(...)` too."""
    loop = edit.plan.loop
    updated = edit.updated
    if loop is None or loop.loader is None or type(updated) is not cst.For:
        return updated
    bindings = node_edits.rebind(
        patterns.Bindings(nodes={"loader": loop.loader}), edit.original, updated
    )
    wrapped = edit.render(edit.case.template, bindings)
    return updated.with_changes(
        iter=node_edits.replace_node(updated.iter, bindings.nodes["loader"], wrapped)
    )


ANALYSES.register(
    BuiltinAnalysis(
        name="device_loader",
        doc="a training or evaluation loop that iterates a DataLoader (see `loader_names`, "
        "`loader_classes`) iterates the rule's replacement instead, with `$loader` bound to it",
        words=step_words,
        takes_loop=lambda loop: loop.loader is not None,
        rewrite=_wrap_loader,
    )
)
