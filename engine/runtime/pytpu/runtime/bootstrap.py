"""How PyTPU starts inside a program it runs, for the harness and the step timer alike (the
child's side; the parent's is `launch.py`, what both agree on `channel.py`).

Python imports `startup/sitecustomize.py` at start-up, which calls `start`: it
hands over to the environment's own sitecustomize, if any, then maps CUDA to the CPU when the
program runs there (the original code takes its CUDA path, the work done on the CPU) and installs
the harness (test generation) or the step timer (the benchmark). Without those settings it does
nothing, and imports nothing heavy: every Python the program starts runs it too. A notebook's
run is the exception: the process that runs the notebook (`jupyter execute nb.ipynb`) takes
nothing, and its kernel, which inherits the environment, takes PyTPU (`pytpu.runtime.kernel`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pytpu.runtime.channel import HARNESS_ENV, STAND_IN_ENV, TIMER_ENV, settings_text
from pytpu.runtime.repository_files import RepositoryFiles


def start(folder: str) -> None:
    """Called by `startup/sitecustomize.py` (in `folder`) when the program starts."""
    _chain_to_the_next_sitecustomize(folder)
    stand_in = os.environ.get(STAND_IN_ENV)
    if stand_in and stand_in not in sys.path:
        sys.path.append(stand_in)
    if os.environ.get("COVERAGE_PROCESS_START"):
        import coverage

        coverage.process_startup()
    for name, module in ((HARNESS_ENV, "harness"), (TIMER_ENV, "timer")):
        if os.environ.get(name):
            from pytpu.runtime import kernel

            # The process that runs a notebook is not the program; its kernel is.
            if not kernel.hand_over(sys.orig_argv, sys.argv):
                install(module, json.loads(settings_text(os.environ[name])))
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
