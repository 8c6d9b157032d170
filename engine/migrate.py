"""The main job: behaviour tests, the migration, parity on both sides, the benchmark, the report.

On a git repository with a clean tree, from HEAD: the program's environment is prepared (its
declared requirements, `pytpu.engine.environment`), the tests are generated and committed ("Add
behaviour tests (PyTPU)"), the KB's rewrites are committed on top ("Migrate to PyTorch/XLA
(PyTPU)"), the suite runs on the original code (the tests commit) and on the migrated code, the
training step is timed on both, and the report is written to `.pytpu/`. All of it happens in
temporary worktrees; only the branch `pytpu/migrate` moves, and only over PyTPU's own commits.

`migrate()` is the sequence of the stages below. Each stage is a function that returns a typed
result (a dataclass of `pytpu.engine.stages`) and hands it to the next; `Stages` holds them
all, the report (`reporting.document.build`) is built from it, and `Result` is what the callers
(the CLI, the bot) read: typed attributes, never keys of the report's dictionary.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import git
import msgspec

from pytpu.engine import config as config_module
from pytpu.engine import environment, gitrepo, processes, testgen
from pytpu.engine.reporting import document as report_document
from pytpu.engine.reporting import markdown
from pytpu.engine.reporting import sections as report_sections
from pytpu.engine.rewriter import checkout
from pytpu.engine.stages import (
    BenchmarkRun,
    BenchmarkRuns,
    BranchUpdate,
    GeneratedTests,
    MigrationCommit,
    ParityRun,
    Result,
    Stages,
    Start,
)
from pytpu.engine.testgen import workspace
from pytpu.engine.verify import benchmark, parity

TESTS_MESSAGE = "Add behaviour tests (PyTPU)"
MIGRATION_MESSAGE = "Migrate to PyTorch/XLA (PyTPU)"
REPORT_DIR = ".pytpu"
OVERRIDES_DIR = ".github/pytpu"  # a report.md.j2 here replaces the package's template
# The benchmark's warm-up and timed steps (XLA compiles during the first steps).
WARMUP, STEPS = 3, 10


class MigrateError(Exception):
    """The main job could not run; nothing of the user's was changed. The message says why."""


class BranchTaken(MigrateError):
    """`pytpu/migrate` holds commits PyTPU did not make; they are never overwritten."""


StageCallback = Callable[[str, str, float | None], None]  # stage, "start" | "done", seconds
T = TypeVar("T")


# --- the stages, in order ----------------------------------------------------------------------


def migrate(path: Path, on_stage: StageCallback = lambda *_: None) -> Result:
    """The stages in order: checks, tests (generated and committed), rewrite (committed), parity,
    benchmark, then the branch and the report. A new stage is a function here that returns a
    dataclass, a field of `Stages`, and a line below. MigrateError (BranchTaken) when it cannot
    start; nothing of the user's has changed then."""
    start = _start(path)
    clock = _Clock(on_stage)
    with gitrepo.worktree(start.repo, start.base) as work:
        # (before any test: a requirement that cannot be installed ends the run here)
        program = clock.run("environment", _environment, start.settings, work)
        with environment.using(program):
            tests = clock.run("tests", _generate_tests, start.settings, work, program)
        migration = clock.run("rewrite", _rewrite, start.settings, work)
    # Both sides run from clean checkouts of the two commits: the tests judge what is pushed, not
    # what the work tree still holds (a recording left out of the commit, say).
    with (
        gitrepo.worktree(start.repo, tests.commit) as original,
        gitrepo.worktree(start.repo, migration.commit) as migrated,
        environment.using(program),
    ):
        # (the benchmark starts from these files again: the tests' runs write theirs)
        checkouts = {root: workspace.snapshot(root) for root in (original, migrated)}
        checked = clock.run("parity", _parity, start.settings, original, migrated)
        timed = clock.run(
            "benchmark", _benchmark, start.settings, tests, original, migrated, checkouts
        )
    branch = _branch_update(start, migration.commit)
    stages = Stages(start, program, tests, migration, checked, timed, branch, clock.finish())
    return _report(stages)


class _Clock:
    """Times each stage, and tells `on_stage` when one starts and when it is done."""

    def __init__(self, on_stage: StageCallback):
        self.on_stage = on_stage
        self.timings: dict[str, float] = {}
        self.started = time.perf_counter()

    def run(self, name: str, stage: Callable[..., T], *args: Any) -> T:
        self.on_stage(name, "start", None)
        began = time.perf_counter()
        result = stage(*args)
        self.timings[name] = time.perf_counter() - began
        self.on_stage(name, "done", self.timings[name])
        return result

    def finish(self) -> dict[str, float]:
        self.timings["total"] = time.perf_counter() - self.started
        return self.timings


def _start(path: Path) -> Start:
    """The checks before anything runs: a clean repository, PyTPU's branch, the settings."""
    root = path.resolve()
    try:
        repo = gitrepo.open_clean(root)
        base = repo.head.commit
        previous = gitrepo.own_commits(repo, base)
        settings = config_module.load(root)
    except gitrepo.BranchOwnedError as exc:
        raise BranchTaken(str(exc)) from None
    except (gitrepo.GitError, config_module.ConfigError) as exc:
        raise MigrateError(str(exc)) from None
    branch = None if repo.head.is_detached else repo.active_branch.name
    return Start(root, repo, base, branch, previous, settings)


def _environment(settings: config_module.Config, work: Path) -> environment.ProgramEnvironment:
    try:
        return environment.prepare(work, settings)
    except environment.EnvironmentSetupError as exc:
        raise MigrateError(f"environment: {exc}") from None


def _generate_tests(
    settings: config_module.Config, work: Path, program: environment.ProgramEnvironment
) -> GeneratedTests:
    try:
        generated = testgen.generate_programs(
            work,
            settings.run,
            out=settings.tests,
            timeout=settings.timeout,
            tolerance=settings.tolerance,
            precision=settings.precision,
        )
    except testgen.TestgenError as exc:
        first, _, rest = str(exc).partition("\n")  # (the hint after the failure's summary)
        hint = environment.environment_hint(first, program)
        raise MigrateError(f"test generation: {first}{hint}\n{rest}".rstrip()) from None
    body = _tests_body(generated)
    return GeneratedTests(
        generated,
        gitrepo.commit_paths(work, [settings.tests], TESTS_MESSAGE, body, generated=True),
    )


def migration_message(target: str) -> str:
    """The migration commit's subject: "Migrate to TorchTPU (PyTPU)" for `torch_tpu==0.2`."""
    title = environment.target(checkout.parse_target(target)[0]).title
    return MIGRATION_MESSAGE.replace("PyTorch/XLA", title)


def _rewrite(settings: config_module.Config, work: Path) -> MigrationCommit:
    run = checkout.run(
        work,
        target=settings.target,
        write=True,
        select=settings.selects,
        settings=settings.rule_settings,
    )
    paths = [f.path for f in run.changed]
    message = migration_message(settings.target)
    return MigrationCommit(run, gitrepo.commit_paths(work, paths, message, _migration_body(run)))


def _parity(settings: config_module.Config, original: Path, migrated: Path) -> ParityRun:
    limit = settings.timeout * 2
    before = parity.run_side(original, settings.tests, settings.baseline_device, limit)
    after = parity.run_side(migrated, settings.tests, processes.TARGET_DEVICE.get(), limit)
    return ParityRun.of(before, after, settings.baseline_device)


def _benchmark(
    settings: config_module.Config,
    tests: GeneratedTests,
    original: Path,
    migrated: Path,
    checkouts: dict[Path, set[str]] | None = None,
) -> BenchmarkRuns:
    """Each program that trains (or has a `benchmark` command), in turn: its configured
    benchmark command, else its recorded run, on each side. The recorded run is short: when it
    runs too few steps the benchmark lengthens it; a `benchmark` command is timed as written."""
    recorded = tests.generated.recorded
    chosen = [p for p in recorded if p.trains or p.benchmark]
    runs = []
    for program in chosen:
        given = program.benchmark or (settings.benchmark if len(recorded) == 1 else None)
        section = benchmark.run(
            ((original, settings.baseline_device), (migrated, processes.TARGET_DEVICE.get())),
            # (the run command as given: each side turns the accelerator on in it)
            given or program.command or program.generated.command,
            warmup=WARMUP,
            steps=STEPS,
            timeout=settings.timeout,
            lengthen=given is None,
            checkouts=checkouts,
            rounds=settings.benchmark_rounds,
            least_seconds=benchmark.LEAST_TIMED_SECONDS,
        )
        nothing = benchmark.nothing_on_xla(section)
        stand_in = processes.STAND_IN.get() is not None
        runs.append(BenchmarkRun(program.name, section, nothing, on_stand_in=stand_in))
    why = "it takes no training step (no optimizer step or backward pass was recorded)"
    not_run = [(p.name, why) for p in recorded if p not in chosen]
    if not runs:  # the report still has a benchmark section: it says why none ran
        first = recorded[0]
        reason = f"`{first.name}`: {why}"
        section = benchmark.skipped(first.generated.command, reason, WARMUP, STEPS)
        runs.append(BenchmarkRun(first.name, section, nothing_on_xla=False))
    return BenchmarkRuns(tuple(runs), tuple(not_run))


def _branch_update(start: Start, migration: git.Commit) -> BranchUpdate:
    """Created, or updated, or unchanged when the branch already holds this very result."""
    if not start.previous:
        return BranchUpdate("created", migration)
    existing = start.repo.heads[gitrepo.BRANCH].commit
    if gitrepo.same_change(existing, start.base, migration):
        return BranchUpdate("unchanged", existing)
    return BranchUpdate("updated", migration)


def _report(stages: Stages) -> Result:
    """The report, built and rendered; then the branch moves and the report is written."""
    root = stages.start.root
    document = report_document.build(stages)
    page = markdown.render(document, overrides=root / OVERRIDES_DIR)
    # The branch moves only once the report is made: a run that fails leaves it as it was.
    if stages.branch.status != "unchanged":
        gitrepo.move_branch(stages.start.repo, stages.branch.tip)
    report_dir = root / REPORT_DIR
    gitrepo.ignore_folder(report_dir)
    (report_dir / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    (report_dir / "report.md").write_text(page)
    return Result(
        document=document,
        markdown=page,
        headline=markdown.verdict_line(document),
        verdict=stages.verdict,
        regressed_tests=stages.parity.regressed_tests,
        status=stages.branch.status,
        report_dir=report_dir,
    )


# --- the commits' messages and the report's commands ---------------------------------------------


def _tests_body(generated: testgen.ProgramsResult) -> str:
    tests = sum(len(t) for _, _, t, _ in generated.tested)
    commands = "\n".join(f"`{p.command}`" for p in generated.recorded)
    return (
        f"Characterisation tests that pin down what the code does today, recorded from\n"
        f"{commands}\non the CPU: {len(generated.tested)} units, {tests} tests;\n"
        f"{len(generated.untested)} units without a test (see the report)."
    )


def _migration_body(run: checkout.RunResult) -> str:
    totals = run.totals()
    lines = [f"Rewrites of the PyTPU knowledge base ({run.target}):"]
    lines += [f"- {result.path}: {len(result.findings)} sites" for result in run.changed]
    lines.append(", ".join(f"{n} {kind}" for kind, n in totals.items() if n))
    return "\n".join(lines)


# --- `pytpu verify` ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """What `pytpu verify` found: the parity of `base` (original) and the checkout (migrated)."""

    base: str  # the original code's commit
    parity: ParityRun
    precision: str = "fp32"  # the setting: the tolerances the migrated side was compared with

    def as_dict(self) -> dict[str, Any]:
        """The `--json` output."""
        return {
            "base": self.base,
            "devices": asdict(self.parity.devices),
            "verdict": asdict(self.parity.counts),
            "parity": msgspec.to_builtins(
                report_sections.parity_table(self.parity.comparison, precision=self.precision)
            ),
            "problems": self.parity.problems,
        }


def verify(path: Path, base_rev: str, timeout: float | None = None) -> Verification:
    """`pytpu verify`: the generated suite (and the repository's own tests) on `base_rev` on the
    baseline device and on the checkout at `path` on XLA. The checkout may have changes."""
    root = path.resolve()
    try:
        repo = gitrepo.open_repository(root)
        base = repo.commit(base_rev)
        settings = config_module.load(root)
    except (gitrepo.GitError, config_module.ConfigError) as exc:
        raise MigrateError(str(exc)) from None
    except (ValueError, gitrepo.git.BadName) as exc:
        raise MigrateError(f"--base {base_rev}: not a revision of {root} ({exc})") from None
    limit = timeout or settings.timeout * 2
    program = _environment(settings, root)
    with gitrepo.worktree(repo, base) as original, environment.using(program):
        if not (original / settings.tests).is_dir() and (root / settings.tests).is_dir():
            # The suite is newer than the base: the same files judge both sides.
            shutil.copytree(root / settings.tests, original / settings.tests)
        before = parity.run_side(original, settings.tests, settings.baseline_device, limit)
        after = parity.run_side(root, settings.tests, processes.TARGET_DEVICE.get(), limit)
    return Verification(
        base.hexsha, ParityRun.of(before, after, settings.baseline_device), settings.precision
    )
