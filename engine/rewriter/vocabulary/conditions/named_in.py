"""`named_in: FACT`: a variable or attribute whose dotted name is in a per-file fact that is a
set of names (`facts/`): a new fact a rule can ask about is one file."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, FACTS, Condition
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _named_in(node: cst.CSTNode, fact: str, walk: Walk) -> bool:
    name = cst_nodes.dotted_name(node)
    return name is not None and name in walk.fact(FACTS[fact])


CONDITIONS.register(
    Condition(
        name="named_in",
        doc="is a variable or attribute whose dotted name is in the named per-file fact (one "
        "declared as a set of names, such as `cuda_type_names`)",
        check=_named_in,
        parameter=lambda: {"enum": [f.name for f in FACTS if f.names]},
        describe=lambda fact: f"a name in the file's fact `{fact}` ({FACTS[fact].doc})",
    )
)
