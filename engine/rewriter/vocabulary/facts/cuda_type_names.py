"""`cuda_type_names`: the names the file assigns a CUDA tensor type's name to
(`dtype = 'torch.cuda.FloatTensor'`, `... if cuda else 'torch.FloatTensor'`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.devices import device_subexpressions
from pytpu.engine.rewriter.vocabulary import FACTS
from pytpu.engine.rewriter.vocabulary.contract import Fact, Walk


def _names_a_cuda_type(value: cst.CSTNode) -> bool:
    return any(
        isinstance(text := cst_nodes.literal_value(sub), str) and text.startswith("torch.cuda.")
        for sub in device_subexpressions(value)
    )


def _cuda_type_names(walk: Walk) -> frozenset[str]:
    if walk.module is None or "torch.cuda." not in walk.text:
        return frozenset()
    return frozenset(
        name
        for node in cst_nodes.walk(walk.module)
        if type(node) is cst.Assign and _names_a_cuda_type(node.value)
        for target in node.targets
        if (name := cst_nodes.dotted_name(target.target)) is not None
    )


CUDA_TYPE_NAMES: Fact[frozenset[str]] = FACTS.register(
    Fact(
        name="cuda_type_names",
        doc="the names (`dtype`, `self.Tensor`) the file assigns the name of a CUDA tensor type "
        "(`'torch.cuda.FloatTensor'`, in either branch of a conditional)",
        compute=_cuda_type_names,
    )
)
