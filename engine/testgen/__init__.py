"""Test generation: characterisation tests that pin down what a repository's code does today.

programs (which commands: the configured ones, else those `proposals` finds) -> for each:
discover (what the source offers; a notebook's cells through `notebook_code`) -> record (run the
program with the harness) -> suite (write the tests and their data) -> generate (record
expectations, keep only what holds). The tests import PyTPU's test runtime, the package
pytpu-runtime (engine/runtime); it needs only torch (and, for a notebook's run, nbclient).
"""

from pytpu.engine.testgen.generate import DEFAULT_OUT, GenerationResult, TestgenError, generate
from pytpu.engine.testgen.programs import ProgramsResult, ProgramTests, generate_programs

__all__ = [
    "DEFAULT_OUT",
    "GenerationResult",
    "ProgramTests",
    "ProgramsResult",
    "TestgenError",
    "generate",
    "generate_programs",
]
