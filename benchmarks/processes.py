"""Whole processes timed from the outside: wall time and the child's own CPU time, best of N."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Timing:
    """The runs of one command: wall seconds and CPU seconds (user + system) of each."""

    command: tuple[str, ...]
    wall: tuple[float, ...]
    cpu: tuple[float, ...]
    stderr: str = ""  # of the last run

    @property
    def best_wall(self) -> float:
        return min(self.wall)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu)

    def as_dict(self) -> dict[str, object]:
        return {
            "command": list(self.command),
            "best_wall_seconds": round(self.best_wall, 4),
            "best_cpu_seconds": round(self.best_cpu, 4),
            "wall_seconds": [round(s, 4) for s in self.wall],
            "cpu_seconds": [round(s, 4) for s in self.cpu],
        }


def run_once(command: Sequence[str], cwd: Path | None = None) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, exit code and stderr of one run (stdout is discarded)."""
    before = _children_cpu()
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, err = process.communicate()
    wall = time.perf_counter() - start
    return wall, _children_cpu() - before, process.returncode, err


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_commands(
    commands: dict[str, Sequence[str]], runs: int, cwd: Path | None = None, ok: Sequence[int] = (0,)
) -> dict[str, Timing]:
    """Each command `runs` times, interleaved (one round runs every command once) so that a
    change of load on the machine touches them all alike. A run that fails stops the benchmark."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    errs: dict[str, str] = {}
    for _ in range(runs):
        for name, command in commands.items():
            wall, cpu, code, err = run_once(command, cwd)
            if code not in ok:
                tail = "\n".join(err.strip().splitlines()[-10:])
                raise SystemExit(f"error: `{' '.join(command)}` exited with {code}:\n{tail}")
            walls[name].append(wall)
            cpus[name].append(cpu)
            errs[name] = err
    return {
        name: Timing(tuple(command), tuple(walls[name]), tuple(cpus[name]), errs[name])
        for name, command in commands.items()
    }


def venv_script(name: str) -> str:
    """A console script of the running interpreter's environment (pytpu, black)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f"error: {path} not found; install the project into this environment")
    return str(path)
