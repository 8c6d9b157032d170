"""The main job: behaviour tests, the migration, parity on both sides, the benchmark, the report.

On a git repository with a clean tree, from HEAD: the tests are generated and committed ("Add
behaviour tests (PyTPU)"), the KB's rewrites are committed on top ("Migrate to PyTorch/XLA
(PyTPU)"), the suite runs on the original code (the tests commit) and on the migrated code, the
training step is timed on both, and the report is written to `.pytpu/`. All of it happens in
temporary worktrees; only the branch `pytpu/migrate` moves, and only over PyTPU's own commits.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytpu.engine import config as config_module
from pytpu.engine import gitrepo, testgen
from pytpu.engine.reporting import document as report_document
from pytpu.engine.reporting import markdown
from pytpu.engine.rewriter import checkout
from pytpu.engine.testgen.record import pytpu_support
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


@dataclass
class Result:
    document: dict[str, Any]
    markdown: str
    status: str  # created | updated | unchanged
    report_dir: Path

    @property
    def exit_code(self) -> int:
        return 1 if self.document["verdict"]["status"] == "regressed" else 0


StageCallback = Callable[[str, str, float | None], None]  # stage, "start" | "done", seconds


def migrate(path: Path, on_stage: StageCallback = lambda *_: None) -> Result:
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
    start_branch = None if repo.head.is_detached else repo.active_branch.name
    timings: dict[str, float] = {}
    problems: list[str] = []
    started = time.perf_counter()

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        on_stage(name, "start", None)
        began = time.perf_counter()
        yield
        timings[name] = time.perf_counter() - began
        on_stage(name, "done", timings[name])

    with gitrepo.worktree(repo, base) as work:
        with stage("tests"):
            try:
                generated = testgen.generate(
                    work,
                    run=settings.run,
                    out=settings.tests,
                    timeout=settings.timeout,
                    tolerance=settings.tolerance,
                )
            except testgen.TestgenError as exc:
                raise MigrateError(f"test generation: {exc}") from None
            problems += generated.errors
            tests_commit = gitrepo.commit_paths(
                work, [settings.tests], TESTS_MESSAGE, _tests_body(generated)
            )
        with stage("rewrite"):
            run = checkout.run(work, target=settings.target, write=True, select=settings.selects)
            problems += [f.error for f in run.errors if f.error]
            migration_commit = gitrepo.commit_paths(
                work, [f.path for f in run.changed], MIGRATION_MESSAGE, _migration_body(run)
            )
        with gitrepo.worktree(repo, tests_commit) as original:
            with stage("parity"):
                before = parity.run_side(
                    original, settings.tests, settings.baseline_device, settings.timeout * 2
                )
                after = parity.run_side(work, settings.tests, "xla", settings.timeout * 2)
                problems += before.problems + after.problems
                table = parity.compare(before, after)
            with stage("benchmark"):
                timed = _benchmark(original, work, settings, generated)
    timings["total"] = time.perf_counter() - started

    status = "created"
    tip = migration_commit
    if previous:
        existing = repo.heads[gitrepo.BRANCH].commit
        status = "unchanged" if gitrepo.same_change(existing, base, migration_commit) else "updated"
        tip = existing if status == "unchanged" else migration_commit
    commits = [tip.parents[0], tip]
    document = report_document.build(
        repository={"name": root.name, "path": str(root)},
        base={"rev": base.hexsha, "short": base.hexsha[:7], "branch": start_branch},
        branch=gitrepo.BRANCH,
        commits=[{"sha": c.hexsha, "message": c.summary} for c in commits],
        target=settings.target,
        devices=parity.device_names(settings.baseline_device),
        verdict=parity.verdict(table),
        parity=table,
        benchmark=timed,
        run=run,
        testgen=generated.as_dict(),
        reproduce=_reproduce(settings),
        timings=timings,
        problems=problems,
    )
    page = markdown.render(document, overrides=root / OVERRIDES_DIR)
    # The branch moves only once the report is made: a run that fails leaves it as it was.
    if status != "unchanged":
        gitrepo.move_branch(repo, migration_commit)
    report_dir = root / REPORT_DIR
    gitrepo.ignore_folder(report_dir)
    (report_dir / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    (report_dir / "report.md").write_text(page)
    return Result(document, page, status, report_dir)


def _benchmark(original: Path, work: Path, settings: Any, generated: Any) -> dict[str, Any]:
    """The configured benchmark command, else the recorded run, on each side."""
    command = settings.benchmark_command or generated.command
    flag = generated.accelerator_flag
    baseline = benchmark.measure(
        original,
        pytpu_support.command_for_device(command, flag, settings.baseline_device),
        settings.baseline_device,
        warmup=WARMUP,
        steps=STEPS,
        timeout=settings.timeout,
    )
    target = benchmark.measure(
        work,
        pytpu_support.command_for_device(command, flag, "xla"),
        "xla",
        warmup=WARMUP,
        steps=STEPS,
        timeout=settings.timeout,
    )
    return benchmark.compare(command, baseline, target, WARMUP, STEPS)


def _tests_body(generated: testgen.Outcome) -> str:
    tests = sum(len(t) for _, _, t in generated.tested)
    return (
        f"Characterisation tests that pin down what the code does today, recorded from\n"
        f"`{generated.command}` on the CPU: {len(generated.tested)} units, {tests} tests;\n"
        f"{len(generated.untested)} units without a test (see the report)."
    )


def _migration_body(run: checkout.RunResult) -> str:
    totals = run.totals()
    lines = [f"Rewrites of the PyTPU knowledge base ({run.target}):"]
    lines += [f"- {result.path}: {len(result.findings)} sites" for result in run.changed]
    lines.append(", ".join(f"{n} {kind}" for kind, n in totals.items() if n))
    return "\n".join(lines)


def _reproduce(settings: Any) -> list[str]:
    suite = shlex.quote(settings.tests)
    return [
        f"git switch --detach {gitrepo.BRANCH}~1  # the original code with the tests",
        f"python -m pytest {suite}",
        f"git switch --detach {gitrepo.BRANCH}  # the migrated code",
        f"PYTPU_DEVICE=xla PJRT_DEVICE=CPU python -m pytest {suite}",
    ]


def verify(path: Path, base_rev: str, timeout: float | None = None) -> dict[str, Any]:
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
    with gitrepo.worktree(repo, base) as original:
        if not (original / settings.tests).is_dir() and (root / settings.tests).is_dir():
            # The suite is newer than the base: the same files judge both sides.
            shutil.copytree(root / settings.tests, original / settings.tests)
        before = parity.run_side(original, settings.tests, settings.baseline_device, limit)
    after = parity.run_side(root, settings.tests, "xla", limit)
    table = parity.compare(before, after)
    return {
        "base": base.hexsha,
        "devices": parity.device_names(settings.baseline_device),
        "verdict": parity.verdict(table),
        "parity": table,
        "problems": before.problems + after.problems,
    }
