"""`corpus_slicers`: the module's functions that take a corpus laid out in columns on the device
(the fact `column_batchers`) as a parameter, and that parameter's name (pytorch/examples'
word_language_model: `get_batch(source, i)` called as `get_batch(train_data, i)`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.column_batchers import column_batchers


def _positional_names(function: cst.FunctionDef) -> list[str]:
    parameters = function.params
    return [p.name.value for p in (*parameters.posonly_params, *parameters.params)]


@fact(
    "corpus_slicers",
    "`function.parameter` for each module function that is passed a corpus laid out in "
    "columns on the device (what a `column_batchers` function returned, directly or through "
    "another such parameter) as that positional parameter",
)
def corpus_slicers(walk: Walk) -> frozenset[str]:
    batchers = walk.fact(column_batchers)
    module = walk.module
    if not batchers or module is None:
        return frozenset()
    nodes = list(cst_nodes.walk(module))
    functions = {n.name.value: n for n in nodes if type(n) is cst.FunctionDef}
    corpora = {
        name
        for n in nodes
        if type(n) is cst.Assign
        and len(n.targets) == 1
        and type(n.value) is cst.Call
        and cst_nodes.dotted_name(n.value.func) in batchers
        and (name := cst_nodes.dotted_name(n.targets[0].target)) is not None
    }
    calls = [n for n in nodes if type(n) is cst.Call and type(n.func) is cst.Name]
    found: set[str] = set()
    while True:  # a parameter that receives a corpus passes it on (`evaluate(val_data)`)
        before = len(found)
        for call in calls:
            function = functions.get(call.func.value)
            if function is None:
                continue
            parameters = _positional_names(function)
            for position, argument in enumerate(call.args):
                if argument.keyword is not None or argument.star or position >= len(parameters):
                    break
                if cst_nodes.dotted_name(argument.value) in corpora:
                    found.add(f"{function.name.value}.{parameters[position]}")
                    corpora.add(parameters[position])
        if len(found) == before:
            return frozenset(found)
