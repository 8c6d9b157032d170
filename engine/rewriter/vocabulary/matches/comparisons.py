"""`device.type == 'cuda'`, `'cuda' in device`: device checks (flagged, not flipped)."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import devices, patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk


def _device_comparison(walk: Walk, node: cst.Comparison, cases: list[Case]) -> bool:
    """False on XLA, and often the guard of a CUDA-only feature (fused optimizers, pinned
    memory), so they are flagged, not flipped."""
    operands = [node.left] + [c.comparator for c in node.comparisons]
    if not any(walk.positions.is_device_valued(o, compared=True) for o in operands):
        return False
    if not any(devices.cuda_device_kind(o) is not None for o in operands):
        return False
    walk.plan(node, cases[0], patterns.Bindings(covered=operands))
    return True


MATCH_KINDS.register(
    MatchKind(
        name="device_comparison",
        doc="a comparison of a device value with a CUDA device (`device.type == 'cuda'`, "
        "`'cuda' in str(device)`; see `compared_names`)",
        properties={"device_comparison": {"enum": ["cuda"]}},
        describe=lambda match: (
            "A comparison of a device value with a CUDA device (`device.type == 'cuda'`, "
            "`'cuda' in str(device)`)."
        ),
        words=lambda case: frozenset({"cuda"}),
        match=_device_comparison,
        node_types=(cst.Comparison,),
        order=20,
    )
)
