"""The report document's typed model: one msgspec Struct per section, from which the document is
encoded (`msgspec.to_builtins`) and `report.schema.json` is generated (`schema.py`).

What the schema says of a value (at least one character, a count, a rule code) is said once, by
the annotated types below; a section's docstring and its fields' descriptions become the
schema's descriptions. A key the document may leave out is typed `X | UnsetType` (written only
when set); every other key is always written, `null` included.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

Text = Annotated[str, Meta(min_length=1)]
Sha = Annotated[str, Meta(pattern="^[0-9a-f]{4,64}$")]
Code = Annotated[str, Meta(pattern="^PYTPU[0-9]{3}$")]
Count = Annotated[int, Meta(ge=0)]
Seconds = Annotated[float, Meta(ge=0)]
Milliseconds = Annotated[float, Meta(ge=0)]
Speedup = Annotated[float, Meta(gt=0)]
Outcome = Literal["passed", "failed", "error", "skipped", "missing"]
Device = Literal["cpu", "cuda", "xla", "tpu"]
T = TypeVar("T")
NonEmpty = Annotated[list[T], Meta(min_length=1)]


def described(kind: object, text: str) -> object:
    """`kind` with a description in the schema."""
    return Annotated[kind, Meta(description=text)]


class Model(Struct, kw_only=True, forbid_unknown_fields=True):
    """A part of the report document (no other keys)."""


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


class CommandChange(Model):
    action: Literal["drop", "set", "add"]
    option: Text
    written: described(Text, "The option as the command gave it: `--gpu -1`.")
    value: str | None
    said: described(Text, "The change in words: without `--no-cuda`.")


class OnDevice(Model):
    """The commands the two sides ran when they differ from the given one: what was changed to
    run it with the accelerator on."""

    command: described(Text, "What the XLA side ran.")
    before: described(
        Text, "What the CPU side ran: the same changes, its accelerator path on the CPU."
    )
    changes: Annotated[list[CommandChange], Meta(min_length=1)]


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


class Spread(Model):
    p25: Milliseconds
    p75: Milliseconds
    min: Milliseconds
    max: Milliseconds


class Compile(Model, kw_only=True):
    graphs: Count
    seconds: Seconds
    after_warmup: Count
    settled: described(
        bool | UnsetType,
        "the later half of the timed steps compiled nothing (compilations after warm-up, if"
        " any, were graphs compiled once)",
    ) = UNSET


class Side(Model, kw_only=True):
    """One side of the benchmark: the program before (baseline) or after (target)."""

    device: Device
    device_name: Text
    steps_ran: Count | UnsetType = UNSET
    steps_timed: Count
    median_ms: Milliseconds | None
    spread_ms: Spread | None
    warmup_ms: list[Milliseconds]
    boundary: Text
    compile: Compile | None
    transfers_per_step: Annotated[float, Meta(ge=0)] | None
    cpu_fallbacks: described(dict[str, Count] | None, "aten op -> calls that fell back to the CPU.")
    exit_code: int
    seconds: Seconds
    error: Annotated[str, Meta(min_length=1)] | None


class RaisedSetting(Model, kw_only=True):
    option: Text
    was: Count = msgspec.field(name="from")
    to: Count


class Lengthened(Model, kw_only=True):
    """When the command that ran is the given one made longer: the given command, the steps it
    ran, each switch that cut the run short left out, and each step or epoch setting raised."""

    given: Text = msgspec.field(name="from")
    steps_ran: Count
    settings: list[RaisedSetting]
    dropped: list[Text]


class Benchmark(Model, kw_only=True):
    """A program's training step timed on both sides."""

    command: Annotated[str, Meta(min_length=1)] | None
    program: described(Text | UnsetType, "The program whose training step it times.") = UNSET
    not_run: described(
        Text | UnsetType, "Why no benchmark ran (no program takes a training step)."
    ) = UNSET
    method: Text
    warmup: Count
    steps: Count
    baseline: Side | None
    target: Side | None
    speedup: Speedup | None
    error: Annotated[str, Meta(min_length=1)] | None
    on_xla: described(
        OnDevice | None | UnsetType,
        "The commands the two sides ran when they differ from `command` (null: `command` as"
        " given).",
    ) = UNSET
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
    lengthened: Lengthened | None | UnsetType = UNSET


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


class Machine(Model):
    """The machine the two sides ran on: a benchmark on a busy one is uncertain."""

    cores: described(Count, "the CPU cores the run could use")
    load_average: described(
        Annotated[float, Meta(ge=0)] | None,
        "runnable processes, the 1-minute average when the report was made (null: not known)",
    )
