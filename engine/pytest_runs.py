"""pytest in a child process, the one way PyTPU runs a suite: test generation (keeping what holds)
and parity (both sides) alike. The child gets no secrets (`processes`); its results come from a
JUnit report.
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from pytpu.engine import processes
from pytpu.engine.source_roots import import_roots

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
# The JUnit entry (classname, name) pytest writes when it crashes itself: an INTERNALERROR, such as
# a module that exits while it is collected; not a test.
INTERNAL = ("pytest", "internal")


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # pytest: not a test class

    id: str  # pytest node id: tests/pytpu/test_x.py::test_y
    module: str  # the test module's name: test_x
    name: str
    outcome: str
    message: str | None  # the first line of a failure, error or skip


@dataclass
class SuiteRun:
    results: list[TestResult]
    returncode: int | None  # None: stopped at the time limit
    reported: bool  # pytest wrote its report (it ran)
    output: str  # the last lines pytest printed
    command: str  # as a person would type it, the device variables first
    internal_error: str | None = None  # pytest's INTERNALERROR: its exception's line


def run(
    root: Path, arguments: list[str], device: str, timeout: float, baseline: bool = False
) -> SuiteRun:
    """`python -m pytest ARGUMENTS` in `root`; under `baseline` the suite records its values."""
    env = processes.pytest_environment(root, device, baseline)
    with tempfile.TemporaryDirectory(prefix="pytpu-pytest-") as scratch:
        report = Path(scratch) / "junit.xml"
        # (a test file that cannot be imported is that file's error; the other files still run)
        command = [
            *(processes.program_python(), "-m", "pytest", *arguments),
            *("-q", "-p", "no:cacheprovider"),
            "--continue-on-collection-errors",
        ]
        # (a src layout's folders, as the person reproducing it would type them)
        folders = [str(f.relative_to(root)) for f in import_roots(root)]
        path = [f"PYTHONPATH={os.pathsep.join(folders)}"] if folders else []
        printed = " ".join([*path, *processes.shown(env, device), "python", *command[1:]])
        command += [f"--junitxml={report}", "-o", "junit_family=xunit1"]
        done = processes.run(command, root, env, timeout)
        if done.timed_out:
            return SuiteRun([], None, False, "", printed)
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        reported = report.exists()
        results, internal = read_junit(report) if reported else ([], None)
        return SuiteRun(results, done.returncode, reported, tail, printed, internal)


def read_junit(report: Path) -> tuple[list[TestResult], str | None]:
    """The tests' results, and the exception of pytest's INTERNALERROR if it had one."""
    results, internal = [], None
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        if (classname, case.get("name")) == INTERNAL:
            # Its message is "internal error"; the traceback's last line names the exception.
            lines = (case.findtext("error") or "").strip().splitlines()
            internal = lines[-1] if lines else "internal error"
            continue
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
        test_id = f"{Path(file).as_posix()}::{name}"
        results.append(TestResult(test_id, module, name, outcome, message))
    return results, internal
