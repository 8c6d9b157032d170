"""`names_device`: a string that names a device setting, as in `os.environ.get('DEVICE', 'cuda')`
or `getattr(args, 'device', 'cuda')`."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _names_device(node: cst.CSTNode, _parameter: None, walk: Walk) -> bool:
    """A string literal whose value, in lower case, is one of the KB's device names
    (`device_positions.names`: `'device'`, `'DEVICE'`, `'train_device'`)."""
    value = cst_nodes.literal_value(node)
    return isinstance(value, str) and walk.positions.is_device_name(value.lower())


CONDITIONS.register(
    Condition(
        name="names_device",
        doc="is a string naming a device setting (`'device'`, `'DEVICE'`, `'eval_device'`: the "
        "`names` of `device_positions`, in any case)",
        check=_names_device,
        # (`device`, `eval_device`, `dev` hold `dev`; `DEVICE`, `EVAL_DEVICE` hold `DEV`)
        words=lambda _: {frozenset({"dev"}), frozenset({"DEV"})},
    )
)
