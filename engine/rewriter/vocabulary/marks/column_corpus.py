"""`column_corpus`: an assignment of the result of a function that lays a corpus out in columns
on the device (`train_data = batchify(corpus.train, args.batch_size)`, the fact
`column_batchers`), whose batch dimension is 1."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.column_batchers import (
    TRANSPOSE_WORDS,
    column_batchers,
)


def _column_corpora(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    assert isinstance(node, cst.Assign)
    value = node.value
    if type(value) is not cst.Call or len(node.targets) != 1:
        return []
    if cst_nodes.dotted_name(node.targets[0].target) is None:
        return []
    name = cst_nodes.dotted_name(value.func)
    return [node] if name is not None and name in walk.fact(column_batchers) else []


MARKS.register(
    PositionMark(
        name="column_corpus",
        doc="an assignment to a variable or attribute of the result of a function that lays a "
        "corpus out in columns on the device (the fact `column_batchers`: `train_data = "
        "batchify(corpus.train, bsz)`), whose dimension 1 is the batch",
        node_types=(cst.Assign,),
        find=_column_corpora,
        order=60,
        words=TRANSPOSE_WORDS,
    )
)
