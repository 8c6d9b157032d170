"""Test parity: the same tests run on the original code and on the migrated code.

Each side is a checkout: the generated suite runs with `PYTPU_DEVICE` naming the side's device,
the repository's own tests (if it has any) run beside it, both through pytest's JUnit report.
The user's code runs in child processes without tokens or other secrets in their environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from pytpu.engine import files
from pytpu.engine.testgen.record import pytpu_support

PASSED, FAILED, ERROR, SKIPPED, MISSING = "passed", "failed", "error", "skipped", "missing"
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED)
# pytest's exit code when it collected nothing: not a failure of the side.
NO_TESTS_COLLECTED = 5
QUICK_CPU_COMPILE = "--xla_backend_optimization_level=0"


@dataclass
class SideRun:
    """One side's results: test id -> (outcome, first line of the failure)."""

    device: str
    results: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)  # test id -> generated | repository
    commands: list[str] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def side_environment(device: str) -> dict[str, str]:
    env = pytpu_support.safe_environment()
    env["PYTPU_DEVICE"] = device
    env.pop(pytpu_support.BASELINE_ENV, None)
    if device == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")  # no TPU here: XLA on the CPU, named so in the report
        if env["PJRT_DEVICE"].upper() == "CPU" and "XLA_FLAGS" not in env:
            # Tests judge behaviour, not speed: XLA:CPU compiles an LSTM's gradients 10x faster
            # without LLVM's optimisations (72 s -> 6 s), and computes the same values.
            env["XLA_FLAGS"] = QUICK_CPU_COMPILE
    return env


def own_test_files(root: Path, suite: str) -> list[Path]:
    """The repository's own pytest files (not the generated suite)."""
    suite_dir = (root / suite).resolve()
    paths, _ = files.discover(root)
    return [
        p
        for p in paths
        if (p.name.startswith("test_") or p.name.endswith("_test.py"))
        and suite_dir not in p.resolve().parents
    ]


def run_side(root: Path, suite: str, device: str, timeout: float) -> SideRun:
    """Run the generated suite (and the repository's own tests) in the checkout `root`."""
    started = time.perf_counter()
    side = SideRun(device)
    runs = []
    if (root / suite).is_dir():
        runs.append(("generated", [suite]))
    else:
        side.problems.append(f"{suite}: no generated suite in {root}")
    if own_test_files(root, suite):
        runs.append(("repository", [".", f"--ignore={suite}"]))
    for kind, arguments in runs:
        _run_pytest(root, arguments, kind, side, timeout)
    side.seconds = time.perf_counter() - started
    return side


def _run_pytest(root: Path, arguments: list[str], kind: str, side: SideRun, timeout: float) -> None:
    env = side_environment(side.device)
    with tempfile.TemporaryDirectory(prefix="pytpu-parity-") as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *arguments, "-q", "-p", "no:cacheprovider"]
        command += [f"--junitxml={report}", "-o", "junit_family=xunit1"]
        variables = f"PYTPU_DEVICE={side.device}"
        if side.device == "xla":
            variables += f" PJRT_DEVICE={env['PJRT_DEVICE']}"
            if env.get("XLA_FLAGS") == QUICK_CPU_COMPILE:
                variables += f" XLA_FLAGS={QUICK_CPU_COMPILE}"
        shown = f"{variables} " + " ".join(["python", *command[1:-3]])
        side.commands.append(shown)
        try:
            done = subprocess.run(
                command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            side.problems.append(f"{kind} tests on {side.device}: over {timeout:.0f} s, stopped")
            return
        if not report.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            side.problems.append(f"{kind} tests on {side.device} did not run: {' / '.join(tail)}")
            return
        if done.returncode not in (0, 1, NO_TESTS_COLLECTED):
            side.problems.append(f"{kind} tests on {side.device}: pytest exited {done.returncode}")
        for test_id, outcome, message in read_junit(report, root):
            side.results[test_id] = (outcome, message)
            side.suites[test_id] = kind


def read_junit(report: Path, root: Path) -> list[tuple[str, str, str | None]]:
    """(pytest node id, outcome, first line of the message) for each test case of a report."""
    cases = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        test_id = f"{Path(file).as_posix()}::{case.get('name')}"
        outcome, message = PASSED, None
        for tag, kind in (("failure", FAILED), ("error", ERROR), ("skipped", SKIPPED)):
            found = case.find(tag)
            if found is not None:
                outcome = kind
                text = (found.get("message") or found.text or "").strip().splitlines()
                message = text[0][:300] if text else None
                break
        cases.append((test_id, outcome, message))
    return cases


def compare(baseline: SideRun, target: SideRun) -> dict:
    """The parity section of the report: every test on both sides, regressions first."""
    rows = []
    for test_id in sorted(set(baseline.results) | set(target.results)):
        before, before_message = baseline.results.get(test_id, (MISSING, None))
        after, after_message = target.results.get(test_id, (MISSING, None))
        regression = before == PASSED and after != PASSED
        rows.append(
            {
                "id": test_id,
                "suite": baseline.suites.get(test_id) or target.suites.get(test_id),
                "baseline": before,
                "target": after,
                "regression": regression,
                "message": after_message if after != PASSED else before_message,
            }
        )
    rows.sort(key=lambda row: (not row["regression"], row["suite"] != "generated", row["id"]))
    return {
        "tests": rows,
        "counts": {"baseline": _counts(baseline), "target": _counts(target)},
        "commands": {
            "baseline": " && ".join(baseline.commands),
            "target": " && ".join(target.commands),
        },
    }


def verdict(parity: dict) -> dict:
    """Parity N/N counts the tests that pass on the original code."""
    rows = parity["tests"]
    total = sum(1 for row in rows if row["baseline"] == PASSED)
    both = sum(1 for row in rows if row["baseline"] == PASSED and row["target"] == PASSED)
    regressions = sum(1 for row in rows if row["regression"])
    status = "no tests" if total == 0 else ("regressed" if regressions else "parity")
    return {"status": status, "passed_both": both, "total": total, "regressions": regressions}


def _counts(side: SideRun) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome, _ in side.results.values():
        counts[outcome] += 1
    return counts


def device_names(baseline_device: str = "cpu") -> dict[str, str]:
    """How the report names the two devices: here, XLA runs on the CPU, and it says so."""
    import torch

    target = os.environ.get("PJRT_DEVICE", "CPU")
    where = "on the CPU" if target.upper() == "CPU" else f"on {target}"
    try:
        from importlib.metadata import version

        xla_version = version("torch-xla")
    except Exception:  # noqa: BLE001 - the name only decorates the report
        xla_version = "?"
    return {
        "baseline": f"{baseline_device.upper()} (torch {torch.__version__.split('+')[0]})",
        "target": f"XLA {where} (torch_xla {xla_version}, PJRT_DEVICE={target})",
    }
