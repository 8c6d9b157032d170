"""`cuda_type_names`: the names the file assigns a CUDA tensor type's name to
(`dtype = 'torch.cuda.FloatTensor'`, `... if cuda else 'torch.FloatTensor'`)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.devices import device_subexpressions
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _names_a_cuda_type(value: cst.CSTNode) -> bool:
    return any(
        isinstance(text := cst_nodes.literal_value(sub), str) and text.startswith("torch.cuda.")
        for sub in device_subexpressions(value)
    )


@fact(
    "cuda_type_names",
    "the names (`dtype`, `self.Tensor`) the file assigns the name of a CUDA tensor type "
    "(`'torch.cuda.FloatTensor'`, in either branch of a conditional)",
    names=True,
)
def cuda_type_names(walk: Walk) -> frozenset[str]:
    if walk.text and "torch.cuda." not in walk.text:
        return frozenset()  # (the text, when the caller gave it, says so without a walk)
    return cst_nodes.names_assigned(walk.module, _names_a_cuda_type)
