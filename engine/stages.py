"""What each stage of the main job hands to the next (`pytpu.engine.migrate`), and what the
report is built from (`reporting.document.build` reads `Stages`): typed results, in a module of
their own so that the report builder depends on them, not on the pipeline that makes them."""

from __future__ import annotations

import math
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import git

from pytpu.engine import config as config_module
from pytpu.engine import environment, gitrepo, processes, testgen
from pytpu.engine.rewriter import checkout
from pytpu.engine.verify import measured, parity
from pytpu.engine.verify.parity import ParityCounts, ParityRow

# --- what each stage hands to the next ---------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """What the run starts from: the repository at its last commit, and its settings."""

    root: Path
    repo: git.Repo
    base: git.Commit
    branch: str | None  # the branch checked out; None on a detached HEAD
    previous: list[git.Commit]  # PyTPU's commits already on pytpu/migrate
    settings: config_module.Config


@dataclass(frozen=True)
class GeneratedTests:
    """The generated behaviour tests, committed on the base: "Add behaviour tests (PyTPU)"."""

    generated: testgen.ProgramsResult
    commit: git.Commit


@dataclass(frozen=True)
class MigrationCommit:
    """The KB's rewrites, committed on the tests: "Migrate to PyTorch/XLA (PyTPU)"."""

    run: checkout.RunResult
    commit: git.Commit


@dataclass(frozen=True)
class Verdict(ParityCounts):
    """The run's verdict: the parity counts and the speedup (None when no benchmark ran)."""

    speedup: float | None = None


@dataclass(frozen=True)
class ParityRun:
    """The parity stage: every test on the original code and on the migrated code."""

    comparison: parity.Comparison
    devices: parity.Devices
    problems: list[str]

    @classmethod
    def of(cls, before: parity.SideRun, after: parity.SideRun, baseline_device: str) -> ParityRun:
        return cls(
            comparison=parity.compare(before, after),
            devices=parity.device_names(baseline_device, after.device),
            problems=before.problems + after.problems,
        )

    @property
    def rows(self) -> tuple[ParityRow, ...]:
        """Every test, regressions first."""
        return self.comparison.rows

    @property
    def counts(self) -> ParityCounts:
        return self.comparison.verdict

    @property
    def regressed_tests(self) -> list[str]:
        """The ids of the tests that passed before the migration and fail after it."""
        return [row.id for row in self.rows if row.regression]


@dataclass(frozen=True)
class BenchmarkRun:
    """One program's training step timed on both sides."""

    program: str
    section: measured.StepBenchmark  # as `benchmark.run` measured it
    nothing_on_xla: bool  # the XLA side compiled no graph: its steps ran on the host
    on_stand_in: bool = False  # the migrated side ran on a CPU stand-in for its device

    @property
    def measured_speedup(self) -> float | None:
        """The median of the rounds' ratios, the original's median step over the migrated
        one's; None if either failed, if nothing ran on the XLA device, or if the migrated side
        ran on a CPU stand-in (the host would be timed against itself)."""
        return None if self.nothing_on_xla or self.on_stand_in else self.section.speedup

    @property
    def speedup(self) -> float | None:
        """The figure the verdict states: the measured speedup, unless the benchmark refused it
        (a busy machine, too few rounds, an interval too wide)."""
        return None if self.section.refused else self.measured_speedup


@dataclass(frozen=True)
class BenchmarkRuns:
    """The benchmark stage: each program that trains, timed; the programs that were not, why."""

    runs: tuple[BenchmarkRun, ...]
    not_run: tuple[tuple[str, str], ...] = ()  # program, why

    @property
    def speedup(self) -> float | None:
        """One program's speedup; for several, the geometric mean of those measured (a ratio's
        mean: x2 and x0.5 make x1)."""
        measured = [run.speedup for run in self.runs if run.speedup is not None]
        if not measured:
            return None
        return math.prod(measured) ** (1 / len(measured))


@dataclass(frozen=True)
class BranchUpdate:
    """What becomes of `pytpu/migrate`: created, updated or unchanged, and its tip."""

    status: str  # created | updated | unchanged
    tip: git.Commit  # the migration commit the branch points at once the report is made
    name: str = gitrepo.BRANCH

    @property
    def commits(self) -> list[git.Commit]:
        """The branch's two commits: the tests, then the migration."""
        return [self.tip.parents[0], self.tip]


@dataclass(frozen=True)
class Stages:
    """Every stage's result: what the report is built from."""

    start: Start
    environment: environment.ProgramEnvironment
    tests: GeneratedTests
    migration: MigrationCommit
    parity: ParityRun
    benchmark: BenchmarkRuns
    branch: BranchUpdate
    timings: dict[str, float]  # stage -> seconds, and the total

    @property
    def verdict(self) -> Verdict:
        return Verdict(**asdict(self.parity.counts), speedup=self.benchmark.speedup)

    @property
    def problems(self) -> list[str]:
        rewrite_errors = [f.error for f in self.migration.run.errors if f.error]
        left_out = [*self.environment.declared.problems, *self.environment.left_out]
        return left_out + self.tests.generated.errors + rewrite_errors + self.parity.problems

    @property
    def reproduce(self) -> list[str]:
        return reproduce_steps(self.start.settings, self.environment)


@dataclass(frozen=True)
class Result:
    """What `migrate` did, for the CLI and the bot: the report as written to `.pytpu/`, and the
    facts they act on as typed attributes."""

    document: dict[str, Any]  # report.json
    markdown: str  # report.md: the pull request's body
    headline: str  # the verdict line: `PyTPU: parity 5/5, speedup x1.52 (CPU → XLA on the CPU)`
    verdict: Verdict
    regressed_tests: list[str]  # the ids of the tests that passed before and fail after
    status: str  # created | updated | unchanged: what became of the branch
    report_dir: Path

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict.status == "regressed" else 0


def reproduce_steps(
    settings: config_module.Config, program: environment.ProgramEnvironment
) -> list[str]:
    suite = shlex.quote(settings.tests)
    device = program.device
    # (on 'tpu' without TorchTPU, PyTPU's pytest plugin loads the CPU stand-in)
    variables = "PYTPU_DEVICE=xla PJRT_DEVICE=CPU" if device == "xla" else f"PYTPU_DEVICE={device}"
    if device == "xla" and program.virtual_devices > 1:
        variables += f" CPU_NUM_DEVICES={program.virtual_devices}"
    if device == "xla":  # as the parity run compiles: the same values, several times sooner
        variables += f" XLA_FLAGS={processes.QUICK_CPU_COMPILE}"
    # `python` is one with the programs' requirements and the target's torch: PyTPU's own
    # install need not have torch
    where = [] if program.scripts is None else [
        f"# with python from an environment of the repository's requirements, torch"
        f" {program.torch} and {program.backend} (the run's: {program.python})"
    ]  # fmt: skip
    return [
        *where,
        f"git switch --detach {gitrepo.BRANCH}~1  # the original code with the tests",
        f"python -m pytest {suite}",
        f"git switch --detach {gitrepo.BRANCH}  # the migrated code",
        f"{variables} python -m pytest {suite}",
    ]
