"""Conditions on what names a device: `'cuda'`, `f'cuda:{rank}'`, `torch.device('cuda')`."""

from pytpu.engine.rewriter import devices
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition

CUDA = {frozenset({"cuda"})}  # a CUDA device string is spelled out in the file

CONDITIONS.register(
    Condition(
        name="cuda_device",
        doc="names a CUDA device: `'cuda'`, `'cuda:0'`, or one built at run time "
        "(`f'cuda:{rank}'`)",
        check=lambda node, _, walk: devices.cuda_device_kind(node) is not None,
        words=lambda _: CUDA,
    )
)
CONDITIONS.register(
    Condition(
        name="cuda_device_const",
        doc="names a CUDA device with a constant string (`'cuda'`, `'cuda:1'`)",
        check=lambda node, _, walk: devices.cuda_device_kind(node) == "const",
        words=lambda _: CUDA,
    )
)
CONDITIONS.register(
    Condition(
        name="cuda_device_dynamic",
        doc="names a CUDA device built at run time (`f'cuda:{rank}'`, `'cuda:' + str(i)`)",
        check=lambda node, _, walk: devices.cuda_device_kind(node) == "dynamic",
        words=lambda _: CUDA,
    )
)
