"""Recording: run the program's short command with the harness inside it, in a child process.

The child gets a time limit and an environment without tokens or other secrets (`processes`). The
program is recorded twice, one run after the other, and only what both runs agree on is kept: a
number that differs between them is not deterministic.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytpu.engine import processes
from pytpu.engine.testgen import program_settings, workspace
from pytpu.runtime import launch
from pytpu.runtime.records import HarnessRecord, StepRecord, UnitRecord, steps_of


class RecordingFailed(Exception):
    pass


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    harness: list[HarnessRecord] = field(default_factory=list)

    @property
    def steps(self) -> list[StepRecord]:
        return steps_of(self.harness)

    @property
    def units(self) -> dict[str, UnitRecord]:
        merged: dict[str, UnitRecord] = {}
        for record in self.harness:
            for name, unit in record["units"].items():
                merged.setdefault(name, unit)
        return merged

    @property
    def files(self) -> set[str]:
        """The repository's files the program loaded."""
        return {name for record in self.harness for name in record.get("files", ())}

    @property
    def skipped(self) -> dict[str, str]:
        return {k: v for record in self.harness for k, v in record["skipped"].items()}


@dataclass
class VariantRuns:
    """The runs of the program with one setting changed (a `program_settings.Variant`), or why
    it failed."""

    variant: program_settings.Variant
    runs: list[Run] = field(default_factory=list)
    failure: str | None = None


def _support():
    """The tests' runtime, which compares recorded tensors: it imports torch, which PyTPU's
    environment holds beside it for the main job (not for the rewriter or the CLI)."""
    from pytpu.runtime import support

    return support


def run_once(
    root: Path,
    command: str,
    timeout: float,
    max_unit_bytes: int,
    probes: list[dict],
    capture: bool = True,
    nudge: bool = False,
) -> Run:
    with tempfile.TemporaryDirectory(prefix="pytpu-record-") as out:
        settings = {
            "root": str(root),
            "out": out,
            "device": "cpu",
            "capture": capture,
            "recording": True,
            "max_unit_bytes": max_unit_bytes,
            "probes": probes,
            "nudge": nudge,
        }
        env = processes.program_environment("cpu", processes.HARNESS_ENV, settings)
        done = processes.run(command, root, env, timeout)
        if done.timed_out:
            raise RecordingFailed(
                f"`{command}` did not finish in {timeout:.0f} s; give a shorter command (`run` in"
                " PyTPU's settings, `--run` of `pytpu testgen`: fewer epochs or steps, a dry-run"
                " flag), or more time (`timeout` in the settings, `--timeout`) for a program whose"
                " length has no setting"
            )
        harness = _support().harness_records(Path(out))
        return Run(done.returncode, done.stdout, done.stderr, done.seconds, harness)


def record_twice(
    root: Path,
    command: str,
    timeout: float,
    max_unit_bytes: int,
    probes: list[dict],
    variants: tuple = (),
    before: set[str] | None = None,
) -> tuple[Run, Run, list[VariantRuns]]:
    """The command twice, each time followed by its variants (the command with one setting
    changed), in the order the suite runs them: a variant may read what the command wrote (a
    checkpoint to resume from). A variant that fails the first time is not run again. The
    second run starts from the files of `before` (`workspace.snapshot`), as the first did."""
    # One after the other: programs write files and listen on fixed ports.
    first = run_once(root, command, timeout, max_unit_bytes, probes)
    _check(first, command)
    # A variant takes another branch of the same short run: a few times the run's time at most,
    # and all of them together not much more.
    limit = min(timeout, max(60.0, 3 * first.seconds))
    budget = max(limit, 4 * first.seconds)
    tried = [VariantRuns(v) for v in variants]
    _run_variants(root, command, tried, limit, budget)
    if before is not None:
        workspace.remove_created(root, before)
    # The second run nudges the parameters by a rounding error after each backward pass: what
    # it prints differently, the migrated program may print differently too (stable_metrics).
    second = run_once(root, command, timeout, max_unit_bytes, probes, nudge=True)
    _check(second, command)
    _run_variants(root, command, tried, limit, budget)
    return first, second, tried


def _run_variants(
    root: Path, command: str, tried: list[VariantRuns], limit: float, budget: float
) -> None:
    started = time.perf_counter()
    for each in tried:
        if each.failure:
            continue
        left = budget - (time.perf_counter() - started)
        if left <= 0:
            each.failure = f"not run: the variants' time ({budget:.0f} s) was spent"
            continue
        line = f"{command} {each.variant.argument}"  # the python invocation ends the command
        try:
            run = run_once(root, line, min(limit, left), 0, [], capture=False)
        except RecordingFailed:
            each.failure = f"did not finish in {min(limit, left):.0f} s"
            continue
        if run.returncode != 0:
            last = launch.failure_summary(run.stderr, limit=160)
            each.failure = f"exits with {run.returncode} on the original code: {last}"
        else:
            each.runs.append(run)


def _check(run: Run, command: str) -> None:
    if run.returncode != 0:
        raise RecordingFailed(launch.exit_message(f"`{command}`", run.returncode, run.stderr))
    if not run.harness:
        raise RecordingFailed(processes.ran_without_pytpu(command, "the harness", run.stderr))


def _close(a: Any, b: Any) -> bool:
    """Two recorded step values agree within the tolerance the step's test applies."""
    if a is None or b is None:
        return a is b
    try:
        support = _support()
        support.assert_close(a, b, support.GRADIENT_FACTOR)
    except AssertionError:
        return False
    return True


def stable_steps(first: Run, second: Run) -> tuple[list[dict], set[str]]:
    """The first run's step events, and the call sites whose numbers differ in the second run."""
    unstable: set[str] = set()

    def numbered(run: Run) -> dict[tuple[str, int], dict]:
        counts: dict[str, int] = {}
        events = {}
        for event in run.steps:
            counts[event["key"]] = counts.get(event["key"], 0) + 1
            events[(event["key"], counts[event["key"]])] = event
        return events

    theirs = numbered(second)
    for index, event in numbered(first).items():
        other = theirs.get(index)
        if other is None or not (
            _close(event.get("loss"), other.get("loss"))
            and _close(event.get("parameter_norms"), other.get("parameter_norms"))
        ):
            unstable.add(event["key"])
    return first.steps, unstable


# A number followed by a time unit, or after a word that times something (or a utilisation,
# MFU), is a duration or a rate: two runs may agree on it by chance (0.10 s twice), but it is
# never behaviour to pin.
_UNIT_AFTER = re.compile(r"\s*(?:ms|s|sec|secs|seconds|min|mins|minutes|h)\b", re.IGNORECASE)
_TIMING_BEFORE = re.compile(
    r"(?:time|elapsed|took|ms/\w+|\w+/s|per sec\w*|speed|throughput|mfu|flops|utili[sz]ation)\W*$",
    re.IGNORECASE,
)


def _timings(shape: str) -> list[bool]:
    """For each masked number (#) of a metric line's shape: is it a duration or a rate?"""
    flags = []
    for match in re.finditer("#", shape):
        after, before = shape[match.end() :], shape[: match.start()][-20:]
        flags.append(bool(_UNIT_AFTER.match(after) or _TIMING_BEFORE.search(before)))
    return flags


def stable_metrics(first: Run, second: Run, limit: int = 20) -> list[list[Any]]:
    """Metric lines printed by both runs; numbers that differ between them beyond the metric
    test's tolerance become None (the second run of `record_twice` is nudged: a number that
    rounding moves is not pinned)."""
    support = _support()
    theirs = support.metric_lines(second.stdout)
    stable = []
    position = 0
    for shape, numbers in support.metric_lines(first.stdout):
        match = next((i for i in range(position, len(theirs)) if theirs[i][0] == shape), None)
        if match is None:
            continue
        position = match + 1
        other = theirs[match][1]
        kept = [
            a if support.metric_close(b, a) else None for a, b in zip(numbers, other, strict=True)
        ]
        kept = [None if timing else n for n, timing in zip(kept, _timings(shape), strict=True)]
        if any(n is not None for n in kept):
            stable.append([shape, kept])
        if len(stable) == limit:
            break
    return stable
