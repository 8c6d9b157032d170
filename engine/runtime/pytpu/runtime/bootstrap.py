"""How PyTPU starts inside a program it runs, for the harness and the step timer alike.

The parent side: `program_environment` is the child's environment (this one without secrets, the
settings as JSON in PYTPU_HARNESS or PYTPU_BENCHMARK, the `startup/` folder first on PYTHONPATH).
The child side: Python imports `startup/sitecustomize.py` at start-up, which calls `start`: it
hands over to the environment's own sitecustomize, if any, then maps CUDA to the CPU when the
program runs there (the original code takes its CUDA path, the work done on the CPU) and installs
the harness (test generation) or the step timer (the benchmark). Without those settings it does
nothing, and imports nothing heavy: every Python the program starts runs it too.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HARNESS_ENV = "PYTPU_HARNESS"  # JSON settings of the harness inside the user's program
TIMER_ENV = "PYTPU_BENCHMARK"  # JSON settings of the step timer inside the user's program
BASELINE_ENV = "PYTPU_TESTGEN_BASELINE"  # set by `pytpu testgen`: the suite records its values
# Where the code runs (PYTPU_DEVICE); cuda: a baseline on a GPU machine, if there is one.
DEVICES = ("cpu", "xla", "cuda")
STARTUP = Path(__file__).resolve().parent / "startup"  # first on the child's PYTHONPATH

_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|PRIVATE|^AWS_|^GH_|^GITHUB_")


# --- the parent side -------------------------------------------------------------------------


def safe_environment() -> dict[str, str]:
    """This environment without tokens, keys and other secrets: the user's code never sees them."""
    return {k: v for k, v in os.environ.items() if not _SECRET.search(k.upper())}


def program_environment(name: str, settings: dict[str, Any]) -> dict[str, str]:
    """The environment of a program run with PyTPU inside it: `settings` in the variable `name`
    (HARNESS_ENV or TIMER_ENV), no secrets, this Python first on PATH (the command's `python`
    is the one with torch and this package), string hashes as in every other run."""
    env = safe_environment()
    env[name] = json.dumps(settings)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STARTUP), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONHASHSEED"] = "0"
    return env


# --- the child side --------------------------------------------------------------------------


class RepositoryFiles:
    """Which source files are the repository's own code (not its tests, environments or
    libraries), and their paths relative to its root."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.repo_files: dict[str, bool] = {}

    def in_repo(self, filename: str) -> bool:
        known = self.repo_files.get(filename)
        if known is None:
            try:
                path = Path(filename).resolve()
                parts = path.relative_to(self.root).parts if self.root in path.parents else ()
                known = path.suffix == ".py" and bool(parts)
                # The repository's tests, this suite and environments inside it are not its code.
                known = known and not any(
                    part in ("tests", "site-packages") or part.startswith(".") for part in parts
                )
            except (OSError, ValueError):
                known = False
            self.repo_files[filename] = known
        return known

    def relative(self, filename: str) -> str:
        return Path(filename).resolve().relative_to(self.root).as_posix()


def start(folder: str) -> None:
    """Called by `startup/sitecustomize.py` (in `folder`) when the program starts."""
    _chain_to_the_next_sitecustomize(folder)
    if os.environ.get("COVERAGE_PROCESS_START"):
        import coverage

        coverage.process_startup()
    for name, module in ((HARNESS_ENV, "harness"), (TIMER_ENV, "timer")):
        if os.environ.get(name):
            install(module, json.loads(os.environ[name]))
            return


def install(module: str, settings: dict[str, Any]) -> None:
    """Install the harness or the timer (`module`) in this process; on the CPU, the program's
    explicit CUDA calls land there first."""
    if settings.get("device", "cpu") == "cpu":
        from pytpu.runtime import cuda

        cuda.map_to_cpu(RepositoryFiles(settings["root"]).in_repo)
    if module == "harness":
        from pytpu.runtime import harness

        harness.install(settings)
    else:
        from pytpu.runtime import timer

        timer.install(settings)


def _chain_to_the_next_sitecustomize(folder: str) -> None:
    """Import the sitecustomize that `folder`'s own hides, so that nothing of it is lost."""
    here = os.path.abspath(folder)
    saved_path, saved_module = sys.path[:], sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401 - the environment's own, if it has one
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module
