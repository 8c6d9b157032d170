"""The report document's typed model: one msgspec Struct per section, from which the document is
encoded (`msgspec.to_builtins`) and `report.schema.json` is generated (`schema.py`).

What the schema says of a value (at least one character, a count, a rule code) is said once, by
the value types of `engine/fields.py`; a section's docstring and its fields' descriptions become
the schema's descriptions. The benchmark's models are verification's own (`verify/measured.py`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from pytpu.engine.fields import (  # noqa: F401 (the report's value types, said once)
    Code,
    Count,
    Device,
    Milliseconds,
    Model,
    NonEmpty,
    Outcome,
    Seconds,
    Sha,
    Speedup,
    Text,
    described,
)
from pytpu.engine.verify.measured import CommandChange, OnDevice, StepBenchmark  # noqa: F401

# --- the run and its repository -----------------------------------------------------------------


class Tool(Model):
    name: Text
    version: Text


class Repository(Model):
    name: Text
    path: Text


class Base(Model):
    rev: Annotated[str, Meta(pattern="^([0-9a-f]{40}|[0-9a-f]{64})$")]
    short: Sha
    branch: Annotated[str, Meta(min_length=1)] | None


class CommitRef(Model):
    sha: Sha
    message: Text


class Devices(Model):
    """Honest names of what ran, e.g. 'XLA on the CPU (torch_xla 2.9.0, PJRT_DEVICE=CPU)'."""

    baseline: Text
    target: Text


# --- where the programs ran ---------------------------------------------------------------------


class Installed(Model):
    name: Text
    version: Text


class StandIn(Model):
    module: Text
    environment: Text
    why: Text


class PinChange(Model):
    declared: described(
        str,
        "as the repository wrote it; empty: a torch companion its code imports and nothing"
        " declares",
    )
    used: Text
    where: Text
    why: Text


class Declared(Model):
    files: list[Text]
    requirements: list[Text]
    origins: dict[str, Text]
    changes: list[PinChange]
    problems: list[Text]
    setup: list[Text]
    optional: list[Text]


class Environment(Model):
    """Where the programs ran: PyTPU's environment, or one built for the repository from what
    it declares (pytpu.engine.environment)."""

    own: described(bool, "PyTPU's own environment (the repository declares nothing)")
    python: Text
    python_version: Text
    torch: Text
    backend: Text
    installed: list[Installed]
    cached: bool
    base: described(
        str | None,
        "the environment built for the target's torch pair, when PyTPU's own lacks it",
    )
    left_out: described(list[Text], "conda packages pip could not install")
    device: described(Literal["xla", "tpu"], "the device the migrated side ran on")
    stand_in: described(
        StandIn | None,
        "the CPU stand-in the migrated side ran on where the target's backend cannot run"
        " (kb/targets.yaml); null: the backend itself",
    )
    seconds: Seconds
    declared: Declared


# --- the verdict and the tests ------------------------------------------------------------------


class Verdict(Model):
    status: Literal["parity", "regressed", "no tests"]
    passed_both: Count
    total: Count
    regressions: Count
    speedup: Speedup | None


class ParityTest(Model):
    id: Text
    suite: Literal["generated", "repository"]
    baseline: Outcome
    target: Outcome
    regression: bool
    message: str | None
    program: described(
        str | None,
        "The program whose suite holds the test; null for the repository's own tests.",
    )


class OutcomeCounts(Model):
    passed: Count
    failed: Count
    error: Count
    skipped: Count


class SideCounts(Model):
    baseline: OutcomeCounts
    target: OutcomeCounts


class SideCommands(Model):
    baseline: Text
    target: Text


class Parity(Model):
    tests: described(list[ParityTest], "Regressions first.")
    counts: SideCounts
    commands: SideCommands
    precision: described(
        Literal["fp32", "bf16"],
        "The setting `precision`: with bf16 the migrated side's training steps and printed "
        "metrics were compared with bfloat16's tolerances.",
    )


class ProgramRow(Model, kw_only=True):
    """A program: its command, where it was found, whether it was recorded (or why not) and
    timed (or why not)."""

    name: Text
    command: Text
    origin: described(
        Text,
        "`configured`, or where PyTPU found it: a README's line, a console script, a script.",
    )
    status: Literal["recorded", "failed", "not tried"]
    error: str | None
    tests: Count
    benchmarked: bool
    not_benchmarked: described(str | None, "Why a recorded program was not timed.")
    on_xla: described(
        OnDevice | None | UnsetType,
        "The commands the program's tests ran when they differ from the run command (null: the"
        " run command as given).",
    ) = UNSET


# --- the benchmark ------------------------------------------------------------------------------


class Benchmark(StepBenchmark, kw_only=True):
    """A program's training step timed on both sides."""

    program: described(Text | UnsetType, "The program whose training step it times.") = UNSET
    nothing_on_xla: described(
        bool | UnsetType,
        "Written by the report: the XLA side ran its steps but compiled no graph (the program"
        " placed nothing on the device), so no speedup is claimed.",
    ) = UNSET
    on_stand_in: described(
        bool | UnsetType,
        "Written by the report: the migrated side ran on a CPU stand-in for its device"
        " (TorchTPU without a TPU), so no speedup is claimed.",
    ) = UNSET


# --- the changes and what to review -------------------------------------------------------------


class Counted(Model):
    converted: Count
    noted: Count
    flagged: Count


class RuleCount(Counted):
    id: Text
    code: Code


class FileChanges(Counted):
    path: Text
    rules: list[RuleCount]


class Changes(Model):
    files: list[FileChanges]
    totals: Counted


class ReviewItem(Model, kw_only=True):
    code: Code
    rule: Text
    file: Text
    cell: described(
        Annotated[int, Meta(ge=1)] | UnsetType,
        "In a notebook: the cell (from 1) that 'line' counts in.",
    ) = UNSET
    line: Annotated[int, Meta(ge=1)]
    message: Text
    link: Annotated[str, Meta(pattern="^https?://", extra_json_schema={"format": "uri"})]
    effort: Text


class TestedUnit(Model):
    kind: Text
    name: Text
    tests: list[Text]
    program: Text


class UntestedUnit(Model):
    kind: Text
    name: Text
    reason: Text
    program: Text


class TestsGenerated(Model):
    tested: list[TestedUnit]
    untested: list[UntestedUnit]


class Timings(Model):
    """Seconds per stage of the run."""

    environment: Seconds
    tests: Seconds
    rewrite: Seconds
    parity: Seconds
    benchmark: Seconds
    total: Seconds


class OtherWork(Model):
    """What other processes used of the CPU, measured by the benchmark's probes (a second of
    PyTPU doing nothing before each round)."""

    probes: described(Annotated[int, Meta(ge=1)], "the probes, one before each round")
    mean_cores: described(Annotated[float, Meta(ge=0)], "CPU cores used, on average")
    most_cores: described(Annotated[float, Meta(ge=0)], "CPU cores used, in the busiest probe")
    busy: described(bool, "the average was above the share of the cores a trusted speedup allows")


class Machine(Model):
    """The machine the two sides ran on: a benchmark on a busy one is uncertain."""

    cores: described(Count, "the CPU cores the run could use")
    other_work: described(
        OtherWork | None, "what other processes used while the benchmark ran (null: not probed)"
    )
