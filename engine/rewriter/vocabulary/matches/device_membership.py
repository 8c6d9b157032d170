"""`device_type in ('cuda', 'xpu')`: a device checked against device types, CUDA among them."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import devices, patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk

_MEMBERSHIP = (cst.In, cst.NotIn)
_COLLECTIONS = (cst.Tuple, cst.List, cst.Set)


def _names_cuda(collection: cst.CSTNode) -> bool:
    return type(collection) in _COLLECTIONS and any(
        devices.cuda_device_kind(element.value) is not None for element in collection.elements
    )


def _device_valued(walk: Walk, node: cst.CSTNode) -> bool:
    """`device_type`, `x.device.type`, `str(device)` (see `compared_names`), or
    `torch.device(d).type`."""
    if walk.positions.is_device_valued(node, compared=True):
        return True
    if type(node) is cst.Attribute and node.attr.value == "type" and type(node.value) is cst.Call:
        return "torch.device" in walk.resolver.qualified_names(node.value.func)
    return False


def _device_membership(walk: Walk, node: cst.Comparison, cases: list[Case]) -> bool:
    """Like a comparison with 'cuda' (`device_comparison`): False on XLA, and often the guard
    of a feature only some accelerators have, so it is flagged, not flipped."""
    left = node.left
    for target in node.comparisons:
        right = target.comparator
        if (
            type(target.operator) in _MEMBERSHIP
            and _device_valued(walk, left)
            and _names_cuda(right)
        ):
            walk.plan(node, cases[0], patterns.Bindings(covered=[left, right]))
            return True
        left = right
    return False


MATCH_KINDS.register(
    MatchKind(
        name="device_membership",
        doc="a device value tested for membership in device types that include CUDA "
        "(`device_type in ('cuda', 'xpu')`, `torch.device(d).type not in ['cuda', 'mps']`; see "
        "`compared_names`)",
        properties={"device_membership": {"enum": ["cuda"]}},
        describe=lambda match: (
            "A device value tested for membership in a tuple, list or set of device types that "
            "names CUDA (`device_type in ('cuda', 'xpu')`)."
        ),
        words=lambda case: frozenset({"cuda"}),
        match=_device_membership,
        node_types=(cst.Comparison,),
        order=21,
    )
)
