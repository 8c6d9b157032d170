"""Strings and integers that name a CUDA device where a device (or a load location) goes."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices, patterns
from pytpu.engine.rewriter.findings import NOTED
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk

CUDA = frozenset({"cuda"})


def _device_string(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    if devices.cuda_device_kind(node) is None:
        return False
    walk.plan(node, cases[0], patterns.Bindings(covered=[node]))
    return True


def _host_string(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    """A CUDA device, a device variable or `torch.device('cuda')` as the load location: the CPU
    there (XLA storage cannot be restored directly; load_state_dict moves it)."""
    if type(node) is cst.Call:
        if not node.args or "torch.device" not in walk.resolver.qualified_names(node.func):
            return False
        if devices.cuda_device_kind(node.args[0].value) is None:
            return False
        walk.plan(node, cases[0], patterns.Bindings(covered=[node]))
        walk.claim_subtree(node)  # its 'cuda' is gone with it
        return True
    if devices.cuda_device_kind(node) is None and not walk.positions.is_device_valued(node):
        return False
    walk.plan(node, cases[0], patterns.Bindings(covered=[node]))
    return True


def _device_index(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    """`.to(rank)`, `.to(self.gpu_id)`: an integer that named a CUDA device."""
    walk.plan(node, cases[0], patterns.Bindings(covered=list(cst_nodes.walk(node))))
    return True


def _rewrite_string(edit: Edit) -> cst.CSTNode:
    """The replacement string, quoted as the site was."""
    return devices.quote_like(edit.updated, cst_nodes.literal_value(edit.case.template))


def rewrite_device_string(edit: Edit) -> cst.CSTNode:
    kind = cst_nodes.literal_value(edit.case.template)
    if kind == "xla":
        edit.imports.require("torch_xla")  # the 'xla' device exists once torch_xla is imported
    if edit.case.options.get("keep_index"):  # 'cuda:1' -> 'tpu:1': the same device's index
        renamed = devices.renamed_device(edit.updated, kind)
        if renamed is not None:
            return renamed
    return _rewrite_string(edit)


def _dynamic_is_noted(case: Case, node: cst.CSTNode) -> str | None:
    """`f'cuda:{rank}'` becomes the one XLA device of the process: a note says so (not when the
    replacement keeps the index)."""
    if case.options.get("keep_index"):
        return None
    return NOTED if devices.cuda_device_kind(node) == "dynamic" else None


def _cuda_property(key: str) -> dict:
    return {key: {"enum": ["cuda"]}}


MATCH_KINDS.register(
    MatchKind(
        name="device_string",
        doc="a string naming a CUDA device (`'cuda'`, `'cuda:0'`, `f'cuda:{rank}'`) in a device "
        "position (see `device_positions`), or a variable that holds one",
        properties={
            **_cuda_property("device_string"),
            "keep_index": {
                "type": "boolean",
                "description": "the replacement keeps the device's index ('cuda:1' -> 'tpu:1')",
            },
        },
        describe=lambda match: (
            f"A string naming the `{match['device_string']}` device (`'cuda'`, `'cuda:0'`, "
            "...) in a device position (see `device_positions` in the family's introduction)."
        ),
        words=lambda case: CUDA,
        match=_device_string,
        marks=("device",),
        rewrite=rewrite_device_string,
        finding_kind=_dynamic_is_noted,
        order=10,
    )
)
MATCH_KINDS.register(
    MatchKind(
        name="host_string",
        doc="a CUDA device (string, `torch.device('cuda')` or a device variable) given as the "
        "location a checkpoint loads to (`map_location=`)",
        properties=_cuda_property("host_string"),
        describe=lambda match: (
            "A CUDA device (a string, `torch.device('cuda')` or a device variable) as the "
            "location a checkpoint is loaded to (`map_location=`)."
        ),
        # a device variable there needs no 'cuda' in the file; the keyword is always there
        # (`host_keywords` of `device_positions`)
        words=lambda case: frozenset({"map_location"}),
        match=_host_string,
        marks=("host",),
        rewrite=_rewrite_string,
        order=-10,  # before the patterns: `torch.device('cuda')` there is the CPU, not XLA
    )
)
MATCH_KINDS.register(
    MatchKind(
        name="device_index",
        doc="an integer variable that names a CUDA device (`.to(rank)`, see `index_names`)",
        properties={"device_index": {"enum": ["rank"]}},
        describe=lambda match: (
            "An integer variable naming a CUDA device as the device argument (`.to(rank)`; see "
            "`index_names` in the family's introduction)."
        ),
        words=lambda case: frozenset({".to("}),
        match=_device_index,
        marks=("device_index",),
        order=-5,
    )
)
