"""Test generation: characterisation tests that pin down what a repository's code does today.

discover (what the source offers) -> record (run the program with the harness) -> suite (write the
tests and their data) -> generate (record expectations, keep only what holds). The runtime/ folder
is vendored into each suite; it needs only torch.
"""

from pytpu.engine.testgen.generate import DEFAULT_OUT, Outcome, TestgenError, generate

__all__ = ["DEFAULT_OUT", "Outcome", "TestgenError", "generate"]
