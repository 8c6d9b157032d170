"""Conditions on what names a device: `'cuda'`, `f'cuda:{rank}'`, `'cuda:' + str(i)`, and on
what holds one (`device`, `torch.device('cuda')`)."""

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices
from pytpu.engine.rewriter.vocabulary import CONDITIONS, DOTTED_LIST, Condition
from pytpu.engine.rewriter.vocabulary.contract import Walk

CUDA = {frozenset({"cuda"})}  # a CUDA device string is spelled out in the file

# name, what it asks, the kinds of CUDA device string it accepts (devices.cuda_device_kind)
for name, doc, kinds in (
    (
        "cuda_device",
        "names a CUDA device: `'cuda'`, `'cuda:0'`, or one built at run time (`f'cuda:{rank}'`)",
        ("const", "dynamic"),
    ),
    (
        "cuda_device_const",
        "names a CUDA device with a constant string (`'cuda'`, `'cuda:1'`)",
        ("const",),
    ),
    (
        "cuda_device_dynamic",
        "names a CUDA device built at run time (`f'cuda:{rank}'`, `'cuda:' + str(i)`)",
        ("dynamic",),
    ),
):
    CONDITIONS.register(
        Condition(
            name=name,
            doc=doc,
            check=lambda node, _, walk, kinds=kinds: devices.cuda_device_kind(node) in kinds,
            words=lambda _: CUDA,
        )
    )


def _holds_device(node: cst.CSTNode, calls: list[str], walk: Walk) -> bool:
    """A device: a CUDA device string, a value whose name is a device name (`device`,
    `self.device`, `args.device`: the `names` of `device_positions`), a device index
    (`self.gpu_id`, `rank`: its `index_names`, which the migration makes the XLA device), or a
    call of one of `calls` (`torch.device('cuda')`)."""
    if devices.cuda_device_kind(node) is not None or walk.positions.is_device_valued(node):
        return True
    name = cst_nodes.dotted_name(node)
    if name is not None and walk.positions.is_index_name(name.rsplit(".", 1)[-1]):
        return True
    return type(node) is cst.Call and bool(walk.resolver.qualified_names(node.func) & set(calls))


CONDITIONS.register(
    Condition(
        name="holds_device",
        doc="is a device: a CUDA device string, a name the KB's `device_positions.names` call a "
        "device (`device`, `self.device`, `args.device`), a device index of its `index_names` "
        "(`self.gpu_id`, `rank`), or a call of one of the listed functions (`torch.device`)",
        check=_holds_device,
        parameter=DOTTED_LIST,
    )
)
