"""Conditions on what names a device: `'cuda'`, `f'cuda:{rank}'`, `'cuda:' + str(i)`."""

from pytpu.engine.rewriter import devices
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition

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
