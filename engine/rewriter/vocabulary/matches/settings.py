"""The CPU default of a device setting: a command-line option's or a configuration field's."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.matches.devices import rewrite_device_string


def _setting_default(walk, node: cst.CSTNode, cases) -> bool:
    value = patterns.literal_value(node)
    if not isinstance(value, str) or value.lower() not in cases[0].values:
        return False
    walk.plan(node, cases[0], patterns.Bindings(covered=[node]))
    return True


MATCH_KINDS.register(
    MatchKind(
        name="setting_default",
        doc="the default of a device setting, given as one of these strings (`cpu`): an "
        "`add_argument` option named like a device (`--device`, `--train-device`) or a field "
        "of a class body (`device: str = 'cpu'` in a dataclass or a config class)",
        properties={"setting_default": {"type": "array", "items": {"enum": ["cpu"]}}},
        describe=lambda match: (
            "The default of a device setting (an `add_argument` option or a class field named "
            f"like a device) given as {', '.join(repr(v) for v in match['setting_default'])}."
        ),
        # (the setting is named like a device: `device`, `dev`, `eval_device` all hold `dev`)
        words=lambda case: frozenset({*case.values, "dev"}),
        match=_setting_default,
        marks=("setting",),
        rewrite=rewrite_device_string,
        order=20,  # after device_string: a CUDA default is that rule's
        values_of=lambda match: tuple(match["setting_default"]),
    )
)
