"""`corpus_slice`: a slice of rows `source[start:stop]` of a corpus laid out in columns on the
device, in a function it is passed to (the fact `corpus_slicers`): the step's batch."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import MARKS, PositionMark
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.column_batchers import TRANSPOSE_WORDS
from pytpu.engine.rewriter.vocabulary.facts.corpus_slicers import corpus_slicers


def _corpus_slices(walk: Walk, node: cst.CSTNode) -> list[cst.CSTNode]:
    assert isinstance(node, cst.FunctionDef)
    sliced = walk.fact(corpus_slicers).get(id(node))
    if not sliced:
        return []
    return [
        inner
        for inner in cst_nodes.walk(node.body)
        if cst_nodes.row_slice(inner) is not None
        and type(inner.value) is cst.Name
        and inner.value.value in sliced
    ]


MARKS.register(
    PositionMark(
        name="corpus_slice",
        doc="a slice of rows `source[start:stop]` of a corpus laid out in columns on the "
        "device, in a function it is passed to (the fact `corpus_slicers`: `get_batch(source, "
        "i)` called with `train_data = batchify(corpus.train, bsz)`); it binds `$sliced`, "
        "`$start` and `$stop`",
        node_types=(cst.FunctionDef,),
        find=_corpus_slices,
        words=TRANSPOSE_WORDS,
    )
)
