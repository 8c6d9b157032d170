"""Line coverage of the repository's code by the suite: `coverage run -m pytest` (subprocesses
too), combined and read back from `coverage json`."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.testgen.runs import Run, pytest_command, run_command, suite_env


def coveragerc(repo: Path, suite: Path, data_file: Path) -> str:
    omit = [f"{suite}/*", f"{repo}/**/tests/*", f"{repo}/.*/*", "*/conftest.py"]
    omit_lines = "".join(f"\n    {pattern}" for pattern in omit)
    settings = ["[run]", "parallel = True", f"source = {repo}", f"data_file = {data_file}"]
    return "\n".join([*settings, f"omit ={omit_lines}", ""])


def _ranges(lines: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def measure_coverage(
    repo: Path, suite: Path, suite_arg: str, files: list[Path], timeout: float
) -> dict[str, Any]:
    run, data = _run_under_coverage(repo, suite, suite_arg, timeout)
    measured = {(repo / name).resolve(): info for name, info in data.get("files", {}).items()}
    executed, unexecuted, empty = [], [], []
    for path in files:
        info = measured.get(path.resolve())
        relative = path.relative_to(repo).as_posix()
        if info is not None and info["summary"]["num_statements"] == 0:
            empty.append(relative)  # e.g. an empty __init__.py: nothing to execute
        elif info is None or not info.get("executed_lines"):
            unexecuted.append(relative)
        else:
            executed.append(_file_row(relative, info))
    statements = sum(f["statements"] for f in executed)
    covered = sum(f["covered"] for f in executed)
    return {
        "suite": {
            "exit_code": run.returncode,
            "timed_out": run.returncode is None,
            "seconds": round(run.seconds, 2),
            "summary": run.summary,
        },
        "files": executed,
        "unexecuted": unexecuted,
        "no_statements": empty,
        "total": {
            "files": len(executed),
            "statements": statements,
            "covered": covered,
            "percent": round(100 * covered / statements, 1) if statements else None,
        },
    }


def _run_under_coverage(
    repo: Path, suite: Path, suite_arg: str, timeout: float
) -> tuple[Run, dict[str, Any]]:
    """The suite's run under coverage, and coverage's JSON report of it."""
    with tempfile.TemporaryDirectory(prefix="pytpu-coverage-") as tmp:
        rc = Path(tmp) / "coveragerc"
        rc.write_text(coveragerc(repo, suite, Path(tmp) / ".coverage"), encoding="utf-8")
        coverage = [sys.executable, "-m", "coverage"]
        run = run_command(
            [*coverage, "run", f"--rcfile={rc}", *pytest_command(suite_arg, stop_first=False)],
            cwd=repo,
            env=suite_env(repo, rc),
            timeout=timeout,
        )
        plain_env = suite_env(repo)
        run_command([*coverage, "combine", f"--rcfile={rc}", "-q"], cwd=repo, env=plain_env)
        report_path = Path(tmp) / "coverage.json"
        report = run_command(
            [*coverage, "json", f"--rcfile={rc}", "-i", "-q", "-o", str(report_path)],
            cwd=repo,
            env=plain_env,
        )
        data = json.loads(report_path.read_text()) if report_path.exists() else {"files": {}}
        if report.returncode != 0:
            print(f"warning: coverage json: {report.tail(3)}", file=sys.stderr)
    return run, data


def _file_row(relative: str, info: dict[str, Any]) -> dict[str, Any]:
    summary = info["summary"]
    return {
        "path": relative,
        "statements": summary["num_statements"],
        "covered": summary["covered_lines"],
        "percent": round(100 * summary["covered_lines"] / summary["num_statements"], 1),
        "missing": _ranges(info.get("missing_lines", [])),
    }
