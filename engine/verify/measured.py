"""What the benchmark measured, typed (msgspec): each side's steps over its rounds, the rounds'
ratios, the speedup and its interval or why none is claimed. `verify/benchmark.py` builds these; the
report's benchmark section (`reporting/model.Benchmark`) is a `StepBenchmark` with what the report
adds.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from pytpu.engine.fields import (
    Count,
    Device,
    Milliseconds,
    Model,
    Seconds,
    Speedup,
    Text,
    described,
)


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
        "the later half of the timed steps compiled nothing, or all compilations after"
        " warm-up came at one point (graphs compiled once: an evaluation pass, a last partial"
        " batch and the evaluation after it)",
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
    step_ms: described(
        list[Milliseconds],
        "Every timed step, the rounds' in the order they ran (the median's data).",
    ) = msgspec.field(default_factory=list)
    devices: described(Count, "The devices each step ran on (all of the mesh under SPMD).") = 1
    devices_present: described(
        Count | None, "The XLA devices the runtime had (null: not an XLA side, or not known)."
    ) = None
    runs: described(Count, "The side's runs, one per round, whose timed steps are pooled.") = 1
    timed_all: described(
        bool,
        "The timer timed all the steps it wanted and ended the program (false: the program ended"
        " first).",
    ) = False
    samples_per_step: described(
        Count | None,
        "The batch size the program's DataLoader gave at each timed step (null: not seen).",
    ) = None
    throughput: Throughput | None = None


class Throughput(Model):
    """Samples per second at the median step."""

    samples_per_second: Annotated[float, Meta(ge=0)]
    per_device: Annotated[float, Meta(ge=0)]


class Round(Model):
    """One round: each side's median step, their ratio, and the CPU cores other processes used
    just before it (null: not known on this system)."""

    baseline_ms: Milliseconds
    target_ms: Milliseconds
    ratio: Speedup
    others_cores: Annotated[float, Meta(ge=0)] | None


class Interval(Model):
    """An order-statistic confidence interval for the median of the rounds' ratios."""

    low: Speedup
    high: Speedup
    confidence: described(Annotated[float, Meta(gt=0, le=1)], "Its coverage, 0.9375 for 5 rounds.")


class BenchmarkMachine(Model):
    cores: described(Count, "The CPU cores the sides could use.")
    threads: described(dict[str, Text], "The thread settings both sides ran with.")


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


class StepBenchmark(Model, kw_only=True):
    """A program's training step timed on both sides."""

    command: Annotated[str, Meta(min_length=1)] | None
    not_run: described(
        Text | UnsetType, "Why no benchmark ran (no program takes a training step)."
    ) = UNSET
    method: Text
    warmup: Count
    steps: Count
    least_seconds: described(
        Annotated[float, Meta(ge=0)],
        "The least time a run's timed steps last in all: quick steps are timed on until then"
        " (up to 200 of them); 0: `steps` steps.",
    ) = 0.0
    baseline: Side | None
    target: Side | None
    speedup: described(Speedup | None, "The median of the rounds' ratios.")
    interval: Interval | None
    refused: described(
        Text | None,
        "Why the speedup is no figure to trust (a busy machine, too few rounds, an interval too"
        " wide); null: it is one.",
    )
    rounds: list[Round]
    machine: BenchmarkMachine
    error: Annotated[str, Meta(min_length=1)] | None
    on_xla: described(
        OnDevice | None | UnsetType,
        "The commands the two sides ran when they differ from `command` (null: `command` as"
        " given).",
    ) = UNSET
    lengthened: Lengthened | None = None
