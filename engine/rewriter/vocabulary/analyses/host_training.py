"""A training loop in a program that places nothing on a device and makes nothing it trains (no
model an optimizer or a hand-written update trains, no tensor it updates by hand: see
`implicit_device.py`, `hand_training.py`): it would stay on the CPU."""

from __future__ import annotations

from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis

ANALYSES.register(
    BuiltinAnalysis(
        name="host_training",
        doc="the first training loop (it steps an optimizer or calls backward) of a file with "
        "no device work at all (no `.to(`, `device=`, CUDA or XLA device) that makes none of "
        "what it trains (see `implicit_model`, `hand_trained_model`, `trained_factories`): "
        "the rule's diagnostic goes there, once per file",
        words=lambda kb: {frozenset({"backward"}), frozenset({".step("})},
        takes_loop=lambda loop: loop.kind == "host",
    )
)
