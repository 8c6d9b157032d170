"""`column_batchers`: the module's functions that lay a corpus out in columns, one per sequence
of the batch, and return it on the device (pytorch/examples' word_language_model `batchify`:
`data.view(bsz, -1).t().contiguous()` then `data.to(device)`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk

_RESHAPES = frozenset({"view", "reshape"})
_TRANSPOSES = frozenset({"t", "T"})
_MOVES = frozenset({"to", "cuda"})
# what a file that transposes a tensor contains (`.t()`, `.T`; not `.to(`)
TRANSPOSE_WORDS = frozenset({".t()", ".T"})


def _columns(node: cst.CSTNode) -> bool:
    """`x.view(n, -1).t()` or `.T`: rows of the whole corpus turned into columns."""
    receiver = None
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        if node.func.attr.value in _TRANSPOSES and not node.args:
            receiver = node.func.value
    elif type(node) is cst.Attribute and node.attr.value in _TRANSPOSES:
        receiver = node.value
    if type(receiver) is not cst.Call or type(receiver.func) is not cst.Attribute:
        return False
    args = receiver.args
    return (
        receiver.func.attr.value in _RESHAPES
        and len(args) == 2
        and cst_nodes.literal_value(args[1].value) == -1
    )


def _moved(node: cst.CSTNode) -> bool:
    return (
        type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and node.func.attr.value in _MOVES
    )


def _returns_moved(function: cst.FunctionDef) -> bool:
    """`return data.to(device)`, or `data = data.cuda()` (under a condition too: `if
    args.cuda:`, salesforce's awd-lstm-lm) then `return data`."""
    moved_names = {
        name
        for node in cst_nodes.walk(function.body)
        if type(node) is cst.Assign
        and len(node.targets) == 1
        and _moved(node.value)
        and (name := cst_nodes.dotted_name(node.targets[0].target)) is not None
    }
    for node in cst_nodes.walk(function.body):
        if type(node) is cst.Return and node.value is not None:
            if _moved(node.value) or cst_nodes.dotted_name(node.value) in moved_names:
                return True
    return False


@fact(
    "column_batchers",
    "the names of the module's functions that lay a corpus out in columns, one per sequence "
    "of the batch (`data.view(bsz, -1).t()`), and return it moved to the device "
    "(`return data.to(device)`, or `data = data.cuda()` then `return data`), and the names it "
    "calls such a function of another file of the checkout by: the batch dimension of what "
    "they return is 1",
    names=True,
)
def column_batchers(walk: Walk) -> frozenset[str]:
    module, imported = walk.module, walk.checkout.batchers
    if module is None or (walk.text and not any(word in walk.text for word in TRANSPOSE_WORDS)):
        return imported
    return batchers_in(module) | imported


def batchers_in(module: cst.Module) -> frozenset[str]:
    """The names of `module`'s functions that lay a corpus out in columns on the device."""
    return frozenset(
        node.name.value
        for node in cst_nodes.walk(module)
        if type(node) is cst.FunctionDef
        and _returns_moved(node)
        and any(_columns(inner) for inner in cst_nodes.walk(node.body))
    )
