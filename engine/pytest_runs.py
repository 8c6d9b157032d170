"""pytest in a child process, the one way PyTPU runs a suite: test generation (keeping what holds)
and parity (both sides) alike. The child gets no secrets; its results come from a JUnit report.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from pytpu.engine.testgen.record import pytpu_support

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
QUICK_CPU_COMPILE = "--xla_backend_optimization_level=0"


@dataclass(frozen=True)
class Case:
    id: str  # pytest node id: tests/pytpu/test_x.py::test_y
    module: str  # the test module's name: test_x
    name: str
    outcome: str
    message: str | None  # the first line of a failure, error or skip


@dataclass
class Outcome:
    cases: list[Case]
    returncode: int | None  # None: stopped at the time limit
    reported: bool  # pytest wrote its report (it ran)
    output: str  # the last lines pytest printed
    command: str  # as a person would type it, the device variables first


def environment(device: str) -> dict[str, str]:
    """The child's environment: this one without secrets, PYTPU_DEVICE naming the device."""
    env = pytpu_support.safe_environment()
    env["PYTPU_DEVICE"] = device
    env.pop(pytpu_support.BASELINE_ENV, None)
    if device == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")  # no TPU here: XLA on the CPU, named so in reports
        if env["PJRT_DEVICE"].upper() == "CPU" and "XLA_FLAGS" not in env:
            # Tests judge behaviour, not speed: XLA:CPU compiles an LSTM's gradients 10x faster
            # without LLVM's optimisations (72 s -> 6 s), and computes the same values.
            env["XLA_FLAGS"] = QUICK_CPU_COMPILE
    return env


def run(
    root: Path, arguments: list[str], device: str, timeout: float, baseline: bool = False
) -> Outcome:
    """`python -m pytest ARGUMENTS` in `root`; under `baseline` the suite records its values."""
    env = environment(device)
    if baseline:
        env[pytpu_support.BASELINE_ENV] = "1"
    shown = [f"PYTPU_DEVICE={device}"]
    shown += [f"{k}={env[k]}" for k in ("PJRT_DEVICE", "XLA_FLAGS") if device == "xla" and k in env]
    with tempfile.TemporaryDirectory(prefix="pytpu-pytest-") as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *arguments, "-q", "-p", "no:cacheprovider"]
        printed = " ".join([*shown, "python", *command[1:]])
        command += [f"--junitxml={report}", "-o", "junit_family=xunit1"]
        try:
            done = subprocess.run(
                command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Outcome([], None, False, "", printed)
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        reported = report.exists()
        cases = read_junit(report) if reported else []
        return Outcome(cases, done.returncode, reported, tail, printed)


def read_junit(report: Path) -> list[Case]:
    cases = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        file = case.get("file") or classname.replace(".", "/") + ".py"
        outcome, message = PASSED, None
        for tag, kind in (("failure", FAILED), ("error", ERROR), ("skipped", SKIPPED)):
            found = case.find(tag)
            if found is not None:
                outcome = kind
                text = (found.get("message") or found.text or "").strip().splitlines()
                message = text[0][:300] if text else None
                break
        name = case.get("name", "")
        module = classname.rpartition(".")[2] or classname
        cases.append(Case(f"{Path(file).as_posix()}::{name}", module, name, outcome, message))
    return cases
