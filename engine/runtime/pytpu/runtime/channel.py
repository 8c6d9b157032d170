"""What passes from PyTPU's side to the program it runs: the variables that carry the settings of
the harness or the step timer (their encoding included), the devices, and the start-up folder the
child's Python imports PyTPU from. `launch.py` is the parent's side, `bootstrap.py` the child's."""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from pathlib import Path

HARNESS_ENV = "PYTPU_HARNESS"  # JSON settings of the harness inside the user's program
TIMER_ENV = "PYTPU_BENCHMARK"  # JSON settings of the step timer inside the user's program
BASELINE_ENV = "PYTPU_TESTGEN_BASELINE"  # set by `pytpu testgen`: the suite records its values
# A folder whose entry point loads a CPU stand-in for the device on `import torch`
# (`write_autoload`): put on sys.path at start-up (a command that sets PYTHONPATH drops it there).
STAND_IN_ENV = "PYTPU_STAND_IN"
# Where the code runs (PYTPU_DEVICE); cuda: a baseline on a GPU machine, if there is one.
DEVICES = ("cpu", "xla", "tpu", "cuda")
MIGRATED_DEVICES = ("xla", "tpu")  # where a migrated program runs (kb/targets.yaml's devices)
STARTUP = Path(__file__).resolve().parent / "startup"  # first on the child's PYTHONPATH


# One environment variable holds at most 128 KiB on Linux (and all of them together share the
# limit of a command line): a large library's settings (the harness's probes of hundreds of module
# classes) go in a file, and the variable holds `@` and its path.
_INLINE_LIMIT = 16 * 1024


def settings_value(text: str) -> str:
    """What the variable holds: the settings, or `@` and the path of a file that holds them."""
    if len(text) <= _INLINE_LIMIT:
        return text
    handle, path = tempfile.mkstemp(prefix="pytpu-settings-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    atexit.register(_remove, path)  # the parent's: the program reads it while the parent runs
    return "@" + path


def settings_text(value: str) -> str:
    """The settings a variable holds (`settings_value`)."""
    if value.startswith("@"):
        return Path(value[1:]).read_text(encoding="utf-8")
    return value


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
