"""Test generation: characterisation tests that pin down what a repository's code does today.

discover (what the source offers) -> record (run the program with the harness) -> suite (write the
tests and their data) -> generate (record expectations, keep only what holds). The tests import
PyTPU's test runtime, the package pytpu-runtime (engine/runtime); it needs only torch.
"""

from pytpu.engine.testgen.generate import DEFAULT_OUT, GenerationResult, TestgenError, generate

__all__ = ["DEFAULT_OUT", "GenerationResult", "TestgenError", "generate"]
