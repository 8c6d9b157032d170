"""A dict keyed by device type: `{'cuda': 'nccl', 'cpu': 'gloo'}[device.type]` needs an 'xla'
entry once the device is XLA."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices, patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk


def _entries(node: cst.Dict) -> dict[str, cst.DictElement]:
    out = {}
    for element in node.elements:
        if type(element) is cst.DictElement:
            key = cst_nodes.literal_value(element.key)
            if isinstance(key, str):
                out[key] = element
    return out


def _device_map(walk: Walk, node: cst.Dict, cases: list[Case]) -> bool:
    entries = _entries(node)
    cuda = entries.get("cuda")
    if cuda is None or walk.is_claimed(cuda.value):
        return False
    if "xla" in entries:
        walk.claim_subtree(node)  # migrated already: its CUDA entry stays, as a first run left it
        return False
    for case in cases:
        bindings = patterns.Bindings(nodes={"value": cuda.value}, covered=[node])
        if walk.satisfies(case, bindings):
            walk.plan(node, case, bindings)
            return True
    return False


def _with_xla_entry(edit: Edit) -> cst.Dict:
    """The dict with `'xla': <the case's replacement>` after its last entry, laid out as the
    entries before it (one per line, or on one line)."""
    updated: cst.Dict = edit.updated
    elements = list(updated.elements)
    last = elements[-1]
    key = _entries(edit.original)["cuda"].key
    value = edit.render(edit.case.template, edit.plan.bindings)
    between = next(
        (e.comma for e in reversed(elements[:-1]) if isinstance(e.comma, cst.Comma)),
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
    )
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the new entry keeps it
        added = cst.DictElement(key=devices.quote_like(key, "xla"), value=value, comma=last.comma)
    else:
        added = cst.DictElement(key=devices.quote_like(key, "xla"), value=value)
    elements[-1] = last.with_changes(comma=between)
    return updated.with_changes(elements=[*elements, added])


MATCH_KINDS.register(
    MatchKind(
        name="device_map",
        doc="a dict literal keyed by device type with a 'cuda' entry and no 'xla' one "
        "(`{'cuda': 'nccl', 'cpu': 'gloo'}`): it gets an 'xla' entry whose value is the rule's "
        "replacement; `$value` is bound to the 'cuda' entry's value",
        properties={"device_map": {"enum": ["cuda"]}},
        describe=lambda match: (
            "A dict literal with a `'cuda'` key and no `'xla'` key: an `'xla'` entry is added, "
            "with the replacement as its value (`$value`: the value of the `'cuda'` entry)."
        ),
        words=lambda case: frozenset({"cuda"}),
        match=_device_map,
        node_types=(cst.Dict,),
        rewrite=_with_xla_entry,
        order=50,
    )
)
