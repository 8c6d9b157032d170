"""Whole processes timed from the outside: wall time and the child's own CPU time, best of N."""

from __future__ import annotations

import os
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


def as_installed(bytecode: Path) -> dict[str, str]:
    """The environment of a child that runs as an installed package does: with its modules'
    bytecode. pip compiles a package's bytecode when it installs it; an editable install (this
    checkout) under PYTHONDONTWRITEBYTECODE would compile the project's modules again at every
    start. Both sides of a comparison get this environment: the bytecode of everything they
    import is written under `bytecode` by their first run and read by the others."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


def run_once(
    command: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, exit code and stderr of one run (stdout is discarded)."""
    before = _children_cpu()
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
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
    commands: dict[str, Sequence[str]],
    runs: int,
    cwd: Path | None = None,
    ok: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
) -> dict[str, Timing]:
    """Each command `runs` times, interleaved (one round runs every command once) so that a
    change of load on the machine touches them all alike, after a round that is not counted
    (it warms the file cache and writes the bytecode). A run that fails stops the benchmark."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    errs: dict[str, str] = {}
    for round_ in range(runs + 1):
        for name, command in commands.items():
            wall, cpu, code, err = run_once(command, cwd, env)
            if code not in ok:
                tail = "\n".join(err.strip().splitlines()[-10:])
                raise SystemExit(f"error: `{' '.join(command)}` exited with {code}:\n{tail}")
            if round_ == 0:
                continue  # the warm-up round
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
