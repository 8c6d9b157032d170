"""Child processes of the benchmark: the suite under pytest or coverage, each in its own process
group with a time limit, and stopped all together on Ctrl-C."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytpu.engine.rewriter.sources import ENVIRONMENT_MARKERS

COPY_IGNORED = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"}


@dataclass
class Run:
    returncode: int | None  # None: timed out
    seconds: float
    output: str

    @property
    def summary(self) -> str:
        """pytest's final summary line (e.g. `3 passed in 1.20s`), else the last line."""
        lines = [line.strip(" =") for line in self.output.splitlines() if line.strip(" =")]
        for line in reversed(lines):
            if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b", line):
                return line
        return lines[-1] if lines else ""

    def tail(self, count: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-count:])


_ACTIVE: set[subprocess.Popen] = set()
_ACTIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set on Ctrl-C: no new process starts


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_command(
    cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
) -> Run:
    """Run `cmd` in its own process group, output to a file (no pipe for stray grandchildren to
    hold open); on timeout the whole group is killed, and so are leftovers after a normal exit."""
    start = time.perf_counter()
    if _STOPPING.is_set():
        raise KeyboardInterrupt
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with _ACTIVE_LOCK:
            _ACTIVE.add(process)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(process)
            process.wait()
            with _ACTIVE_LOCK:
                _ACTIVE.discard(process)
        log.seek(0)
        output = log.read().decode("utf-8", errors="replace")
    return Run(returncode, time.perf_counter() - start, output)


def interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_all() -> None:
    _STOPPING.set()
    with _ACTIVE_LOCK:
        for process in list(_ACTIVE):
            _kill_group(process)


def suite_env(repo: Path, coverage_rc: Path | None = None) -> dict[str, str]:
    """The environment of a suite run: PYTPU_DEVICE=cpu, no inherited coverage request, and no
    PYTHONPATH entry inside the original repository (copies must import their own code)."""
    env = dict(os.environ)
    env.pop("COVERAGE_PROCESS_START", None)
    env.pop("COVERAGE_PROCESS_CONFIG", None)
    env["PYTPU_DEVICE"] = "cpu"
    if coverage_rc is not None:
        env["COVERAGE_PROCESS_START"] = str(coverage_rc)
    if env.get("PYTHONPATH"):
        entries = [e for e in env["PYTHONPATH"].split(os.pathsep) if e]
        kept = [e for e in entries if not Path(e).resolve().is_relative_to(repo)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            env.pop("PYTHONPATH")
    return env


def pytest_command(suite: str, stop_first: bool) -> list[str]:
    cmd = ["-m", "pytest", suite, "-q", "-p", "no:cacheprovider"]
    return cmd + ["-x"] if stop_first else cmd


def _ignore_for_copy(folder: str, names: list[str]) -> set[str]:
    return {
        n
        for n in names
        if n in COPY_IGNORED or any(Path(folder, n, m).exists() for m in ENVIRONMENT_MARKERS)
    }


def copy_repo(repo: Path, parent: Path) -> Path:
    """A copy of the repository under `parent`, with the same folder name; .git, caches and
    virtualenvs left out."""
    destination = parent / repo.name
    shutil.copytree(repo, destination, symlinks=True, ignore=_ignore_for_copy)
    return destination
