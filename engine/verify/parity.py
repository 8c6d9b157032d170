"""Test parity: the same tests run on the original code and on the migrated code.

Each side is a checkout: the generated suite runs with `PYTPU_DEVICE` naming the side's device,
the repository's own tests (if it has any) run beside it, both through pytest's JUnit report.
The user's code runs in child processes without tokens or other secrets in their environment.
"""

from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytpu.engine import processes, pytest_runs
from pytpu.engine.pytest_runs import ERROR, FAILED, PASSED, SKIPPED
from pytpu.engine.rewriter import sources

MISSING = "missing"
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED)
# pytest's exit code when it collected nothing: not a failure of the side.
NO_TESTS_COLLECTED = 5


@dataclass
class SideRun:
    """One side's results: test id -> (outcome, first line of the failure)."""

    device: str
    results: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)  # test id -> generated | repository
    commands: list[str] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def own_test_files(root: Path, suite: str) -> list[Path]:
    """The repository's own pytest files (not the generated suite): named as pytest collects
    them and defining a test, so that a training script named `add_test.py` is not run."""
    suite_dir = (root / suite).resolve()
    paths, _ = sources.discover(root)
    return [
        p
        for p in paths
        if (p.name.startswith("test_") or p.name.endswith("_test.py"))
        and suite_dir not in p.resolve().parents
        and defines_tests(p)
    ]


def defines_tests(path: Path) -> bool:
    """A `test_*` function or a `Test*` class, at the top level or in a class (a script's
    `def test():` is its evaluation loop, not a test)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return False
    methods = [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]
    return any(
        (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"))
        or (isinstance(node, ast.ClassDef) and node.name.startswith("Test"))
        for node in [*tree.body, *methods]
    )


def run_side(root: Path, suite: str, device: str, timeout: float) -> SideRun:
    """Run the generated suite (and the repository's own tests) in the checkout `root`."""
    started = time.perf_counter()
    side = SideRun(device)
    runs = []
    if (root / suite).is_dir():
        runs.append(("generated", [suite]))
    else:
        side.problems.append(f"{suite}: no generated suite in {root}")
    own = [p.relative_to(root.resolve()).as_posix() for p in own_test_files(root, suite)]
    if own:  # named, not `.`: pytest would import every `*_test.py` script it finds
        runs.append(("repository", own))
    for kind, arguments in runs:
        _run_pytest(root, arguments, kind, side, timeout)
    side.seconds = time.perf_counter() - started
    return side


def _run_pytest(root: Path, arguments: list[str], kind: str, side: SideRun, timeout: float) -> None:
    done = pytest_runs.run(root, arguments, side.device, timeout)
    side.commands.append(done.command)
    if done.returncode is None:
        side.problems.append(f"{kind} tests on {side.device}: over {timeout:.0f} s, stopped")
        return
    if not done.reported:
        side.problems.append(f"{kind} tests on {side.device} did not run: {done.output}")
        return
    if done.internal_error:
        side.problems.append(
            f"{kind} tests on {side.device}: pytest stopped (INTERNALERROR): {done.internal_error}"
        )
    elif done.returncode not in (0, 1, NO_TESTS_COLLECTED):
        side.problems.append(f"{kind} tests on {side.device}: pytest exited {done.returncode}")
    for result in done.results:
        side.results[result.id] = (result.outcome, result.message)
        side.suites[result.id] = kind


@dataclass(frozen=True)
class ParityRow:
    """One test on both sides: its outcome on the original code and on the migrated code."""

    id: str
    suite: str  # generated | repository
    baseline: str  # passed | failed | error | skipped | missing
    target: str
    regression: bool  # passed on the original code, not on the migrated code
    message: str | None  # the first line of its failure


@dataclass(frozen=True)
class ParityCounts:
    """Parity N/N counts the tests that pass on the original code."""

    status: str  # parity | regressed | no tests
    passed_both: int
    total: int
    regressions: int

    @property
    def fraction(self) -> str:
        """`18/18`: the tests that pass on both sides, of those that pass on the original."""
        return f"{self.passed_both}/{self.total}"


@dataclass(frozen=True)
class Comparison:
    """Every test on both sides, regressions first; each side's outcome counts and commands."""

    rows: tuple[ParityRow, ...]
    counts: dict[str, dict[str, int]]  # baseline | target -> outcome -> tests
    commands: dict[str, str]  # baseline | target -> its pytest commands, joined by `&&`

    @property
    def verdict(self) -> ParityCounts:
        rows = self.rows
        total = sum(1 for row in rows if row.baseline == PASSED)
        both = sum(1 for row in rows if row.baseline == PASSED and row.target == PASSED)
        regressions = sum(1 for row in rows if row.regression)
        status = "no tests" if total == 0 else ("regressed" if regressions else "parity")
        return ParityCounts(status, both, total, regressions)


def compare(baseline: SideRun, target: SideRun) -> Comparison:
    """Every test on both sides, regressions first."""
    rows = []
    for test_id in sorted(set(baseline.results) | set(target.results)):
        before, before_message = baseline.results.get(test_id, (MISSING, None))
        after, after_message = target.results.get(test_id, (MISSING, None))
        rows.append(
            ParityRow(
                id=test_id,
                suite=baseline.suites.get(test_id) or target.suites.get(test_id) or "",
                baseline=before,
                target=after,
                regression=before == PASSED and after != PASSED,
                message=after_message if after != PASSED else before_message,
            )
        )
    rows.sort(key=lambda row: (not row.regression, row.suite != "generated", row.id))
    return Comparison(
        rows=tuple(rows),
        counts={"baseline": _counts(baseline), "target": _counts(target)},
        commands={
            "baseline": " && ".join(baseline.commands),
            "target": " && ".join(target.commands),
        },
    )


def _counts(side: SideRun) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome, _ in side.results.values():
        counts[outcome] += 1
    return counts


@dataclass(frozen=True)
class Devices:
    """How the report names the two sides' devices."""

    baseline: str  # `CPU (torch 2.9.0)`
    target: str  # `XLA on the CPU (torch_xla 2.9.0, PJRT_DEVICE=CPU)`


def device_names(baseline_device: str = "cpu", target_device: str = "xla") -> Devices:
    """How the report names the two devices: here, XLA runs on the CPU, and it says so; the
    TorchTPU side names its stand-in when it ran on one."""
    import torch

    torch_version = torch.__version__.split("+")[0]
    baseline = f"{baseline_device.upper()} (torch {torch_version})"
    if target_device == "tpu":
        if processes.STAND_IN.get() is not None:
            where = f"TorchTPU's CPU stand-in (pytpu.runtime.tpu_standin, torch {torch_version})"
        else:
            where = f"TorchTPU (torch-tpu {_version('torch-tpu')})"
        return Devices(baseline, where)
    target = os.environ.get("PJRT_DEVICE", "CPU")
    where = "on the CPU" if target.upper() == "CPU" else f"on {target}"
    count = processes.VIRTUAL_DEVICES.get() if target.upper() == "CPU" else 1
    several = f", CPU_NUM_DEVICES={count}" if count > 1 else ""
    return Devices(
        baseline,
        f"XLA {where} (torch_xla {_version('torch-xla')}, PJRT_DEVICE={target}{several})",
    )


def _version(distribution: str) -> str:
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:  # noqa: BLE001 - the name only decorates the report
        return "?"
