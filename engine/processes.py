"""Child processes that run the user's code: the one place PyTPU starts them.

Test generation's recording, the suite's pytest runs (test generation and parity alike) and the
benchmark all run the user's code here, with a clean environment: this one without tokens, keys or
other secrets (`safe_environment`), `PYTPU_DEVICE` naming the device, `PJRT_DEVICE` defaulting to
the CPU on XLA, and, for a program with PyTPU inside it (the harness or the step timer), the
bootstrap's folder first on PYTHONPATH, kept there by shims first on PATH for `python`, `python3`,
`python3.X` and the environment's scripts (`torchrun`) when the command sets PYTHONPATH itself
(`pytpu.runtime.bootstrap`). Each runs in a session of its own, with a time limit; processes it
leaves behind (data-loader workers) end with it.
"""

from __future__ import annotations

import os
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pytpu.engine.source_roots import import_roots
from pytpu.runtime import channel, launch
from pytpu.runtime.channel import BASELINE_ENV
from pytpu.runtime.launch import Finished, run  # noqa: F401 (the one runner of child processes)

# Tests judge behaviour, not speed: XLA:CPU compiles an LSTM's gradients 10x faster without
# LLVM's optimisations (72 s -> 6 s), and computes the same values.
QUICK_CPU_COMPILE = "--xla_backend_optimization_level=0"
DEVICE_VARIABLES = ("PYTPU_DEVICE", "PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_FLAGS")

safe_environment = launch.safe_environment
HARNESS_ENV = channel.HARNESS_ENV  # the settings of test generation's harness
TIMER_ENV = channel.TIMER_ENV  # the settings of the benchmark's step timer


# The scripts folder of the environment built for the program (pytpu.engine.environment), whose
# `python` runs its commands and its tests; None: PyTPU's own Python. Set for a migration's run.
PROGRAM_SCRIPTS: ContextVar[Path | None] = ContextVar("PROGRAM_SCRIPTS", default=None)


# The device the migrated side runs on (kb/targets.yaml: 'xla', 'tpu'), and the folder whose entry
# point loads the CPU stand-in for it on `import torch` (None: the target's own backend).
TARGET_DEVICE: ContextVar[str] = ContextVar("TARGET_DEVICE", default="xla")
STAND_IN: ContextVar[Path | None] = ContextVar("STAND_IN", default=None)
# The XLA devices the migrated side has on the CPU (`virtual_devices`): CPU_NUM_DEVICES when more
# than one; a program the user's environment already gives a count keeps it.
VIRTUAL_DEVICES: ContextVar[int] = ContextVar("VIRTUAL_DEVICES", default=1)
ACCELERATORS = channel.MIGRATED_DEVICES  # the devices a migrated side runs on


def program_python() -> str:
    """The Python that runs the program's code and its tests."""
    scripts = PROGRAM_SCRIPTS.get()
    return str(scripts / "python") if scripts else sys.executable


def pytest_environment(root: Path, device: str, baseline: bool = False) -> dict[str, str]:
    """pytest on `device` in the repository at `root`, its packages importable as if installed;
    under `baseline` the generated suite records its expected values."""
    env = _on_device(safe_environment(), device, quick_compile=True)
    scripts = PROGRAM_SCRIPTS.get()
    if scripts:  # (pytest's plugins, and the tests' `python`, from the program's environment)
        env["PATH"] = os.pathsep.join(filter(None, [str(scripts), env.get("PATH")]))
    folders = [str(folder) for folder in import_roots(root)]
    if folders:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*folders, env.get("PYTHONPATH")]))
    if baseline:
        env[BASELINE_ENV] = "1"
    return env


def program_environment(
    device: str, variable: str, settings: dict[str, Any], hide_gpus: bool = False
) -> dict[str, str]:
    """The user's program on `device` with PyTPU inside it: the harness (`variable` HARNESS_ENV)
    or the step timer (TIMER_ENV), given `settings`; `hide_gpus`: a GPU stays unused."""
    scripts = PROGRAM_SCRIPTS.get()
    env = _on_device(launch.program_environment(variable, settings, scripts), device)
    # the repository's packages as if installed, after PyTPU's start-up folder (first)
    folders = [str(f) for f in import_roots(Path(settings["root"]))] if "root" in settings else []
    if folders:
        startup, *rest = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join([startup, *folders, *rest])
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def ran_without_pytpu(command: str, what: str, output: str) -> str:
    """The error for `command`, run with `output`, in which no Python process took PyTPU's `what`
    (the harness, the step timer): what ran, and what to check."""
    lines = output.splitlines()
    # Python goes on without a sitecustomize that fails (another Python, without PyTPU).
    failed = [lines[i + 1] for i, line in enumerate(lines[:-1]) if "Error in sitecustomize" in line]
    why = f": PyTPU's start-up file failed in a Python it started ({failed[0]})" if failed else ""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return (
        f"`{command}` ran without {what}{why}. PyTPU starts in a Python through PYTHONPATH, which"
        " shims first on PATH restore when the command sets it. Check that the command runs"
        f" {sys.executable} by a name PATH finds (`python`, `python3`, `{version}`, or a script"
        " of that environment such as `torchrun`): not another interpreter, not a path that"
        " passes the shims by, not after changing PATH (activating another environment); and"
        f" without -I, -E or -S: isolated mode cannot take {what} (it ignores PYTHONPATH; -S"
        " skips the start-up file)"
    )


def _on_device(env: dict[str, str], device: str, quick_compile: bool = False) -> dict[str, str]:
    env["PYTPU_DEVICE"] = device
    env.pop(BASELINE_ENV, None)
    stand_in = STAND_IN.get()
    env.pop(channel.STAND_IN_ENV, None)
    if device == "tpu" and stand_in is not None:  # torch's backend autoload finds it there
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(stand_in)]))
        env[channel.STAND_IN_ENV] = str(stand_in)
    if device == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")  # no TPU here: XLA on the CPU, named so in reports
        on_cpu = env["PJRT_DEVICE"].upper() == "CPU"
        if quick_compile and on_cpu and "XLA_FLAGS" not in env:
            env["XLA_FLAGS"] = QUICK_CPU_COMPILE
        if on_cpu and VIRTUAL_DEVICES.get() > 1:
            env.setdefault("CPU_NUM_DEVICES", str(VIRTUAL_DEVICES.get()))
    return env


def shown(env: dict[str, str], device: str) -> list[str]:
    """The device variables of `env` as a person would type them before the command."""
    names = DEVICE_VARIABLES if device == "xla" else DEVICE_VARIABLES[:1]
    return [f"{name}={env[name]}" for name in names if name in env]
