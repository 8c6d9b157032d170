"""The parent's side of running a program with PyTPU inside it: the child's environment (no
secrets, the settings, the start-up folder first on PYTHONPATH, the shims that put it back when a
command sets PYTHONPATH itself), and what a failed run's output says. `channel.py` holds what
both sides agree on; `bootstrap.py` is the child's side."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pytpu.runtime.channel import STARTUP, settings_value

_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|PRIVATE|^AWS_|^GH_|^GITHUB_")


def safe_environment() -> dict[str, str]:
    """This environment without tokens, keys and other secrets: the user's code never sees them."""
    return {k: v for k, v in os.environ.items() if not _SECRET.search(k.upper())}


def write_autoload(folder: Path, module: str) -> Path:
    """A dist-info in `folder` whose entry point makes `import torch` call `module`'s `load`, the
    way an out-of-tree backend (TorchTPU) loads itself: with `folder` on a process's sys.path,
    torch's backend autoload (the `torch.backends` entry-point group) finds it."""
    name = module.replace(".", "_")
    info = folder / f"{name}-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[torch.backends]\n{name} = {module}:load\n", encoding="utf-8"
    )
    return folder


# Crashes with no Python traceback, by what the output says before them: their cause.
CRASH_CAUSES = {
    "LLVM compilation error: Cannot allocate memory": (
        "XLA's CPU compiler ran out of memory mappings (vm.max_map_count) after compiling many"
        " large graphs: device values read on the host with no barrier before the reads each"
        " compile the pending work again"
    ),
    "Unable to allocate section memory": (
        "XLA's CPU compiler could map no more memory for compiled code (allocateMappedMemory)"
        " after compiling a graph after graph: the graphs grew with every step, a training loop"
        " whose steps end at no barrier (see where PYTPU701 put one, and the benchmark's graphs)"
    ),
}
_SIGNALS = {
    -11: "a segmentation fault",
    139: "a segmentation fault",
    -9: "SIGKILL",
    137: "SIGKILL",
    -6: "an abort",
    134: "an abort",
}


def failure_summary(output: str, limit: int = 300) -> str:
    """Why a program failed, in one line: the exception its last traceback ends with (its
    message's first line; torch's dispatcher errors list dozens of backends after it), else a
    crash's known cause, else the last line of its output."""
    lines = output.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    found = next(
        (line for line in lines[starts[-1] + 1 :] if line and not line[0].isspace()), None
    ) if starts else None  # fmt: skip
    if found is None:
        found = next((cause for said, cause in CRASH_CAUSES.items() if said in output), None)
    line = (found or (lines[-1] if lines else "no output")).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def exit_message(what: str, code: int, output: str, tail: int = 15) -> str:
    """`what` exited with `code`: the failure's summary line, then the output's last lines."""
    last = "\n".join(output.strip().splitlines()[-tail:])
    crash = f" ({_SIGNALS[code]})" if code in _SIGNALS else ""
    return f"{what} exited with {code}{crash}: {failure_summary(output)}\n{last}"


def program_environment(
    name: str, settings: dict[str, Any], scripts: Path | None = None
) -> dict[str, str]:
    """The environment of a program run with PyTPU inside it: `settings` in the variable `name`
    (HARNESS_ENV or TIMER_ENV), no secrets, the program's Python first on PATH behind the shims
    (`scripts`, the folder of the environment built for the program; by default this Python's:
    the command's `python` is one with torch and this package), string hashes as in every other
    run."""
    env = safe_environment()
    env[name] = settings_value(json.dumps(settings))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STARTUP), env.get("PYTHONPATH")]))
    own = str(Path(sys.executable).parent)
    path = [str(_shims(scripts)), *([str(scripts)] if scripts else []), own, env.get("PATH", "")]
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONHASHSEED"] = "0"
    return env


# A run command is a shell line and may set PYTHONPATH itself (`PYTHONPATH=. python x.py`, a
# script's `export PYTHONPATH=src`), which drops STARTUP. So the names a command starts Python by
# are found first in a folder of shims: each puts STARTUP back at the front of PYTHONPATH (after
# the command's own assignments, keeping their entries) and execs the program of its name that
# PATH finds next, the same `python` as without it (so the same sys.executable). A console script
# (torchrun) names its interpreter in its shebang, out of PATH's reach, so it has a shim too; the
# processes it starts inherit the PYTHONPATH that shim set.
_SHIM = """\
#!/bin/sh
# PyTPU's shim (pytpu.runtime.launch): its start-up folder first on PYTHONPATH, then the
# next program of this name on PATH.
case "$PYTHONPATH" in
    {startup} | {startup}:*) ;;
    *) PYTHONPATH={startup}${{PYTHONPATH:+:$PYTHONPATH}}; export PYTHONPATH ;;
esac
name=${{0##*/}}
IFS=:
set -f
for dir in $PATH; do
    next=${{dir:-.}}/$name
    if [ "$dir" != {folder} ] && [ -f "$next" ] && [ -x "$next" ]; then
        exec "$next" "$@"
    fi
done
echo "$name: command not found" >&2
exit 127
"""
_shim_folder: Path | None = None  # this process's, removed when it exits


def _shims(scripts: Path | None = None) -> Path:
    """The folder of shims: a link to one script for each name a command may start this Python
    by, `python`, `python3`, `python3.X` and the Python scripts of its environment (and of the
    folder `scripts`, the program's environment's)."""
    global _shim_folder
    if _shim_folder is None or not _shim_folder.is_dir():  # a long-lived process's /tmp is cleaned
        _shim_folder = Path(tempfile.mkdtemp(prefix="pytpu-shims-"))
        atexit.register(shutil.rmtree, _shim_folder, ignore_errors=True)
        (_shim_folder / "bin").mkdir()
        script = _shim_folder / "shim.sh"
        folder = shlex.quote(str(_shim_folder / "bin"))
        script.write_text(_SHIM.format(startup=shlex.quote(str(STARTUP)), folder=folder))
        script.chmod(0o755)
    for name in _python_names(scripts):  # each time: a script installed since gets its shim
        with contextlib.suppress(FileExistsError):
            (_shim_folder / "bin" / name).symlink_to(_shim_folder / "shim.sh")
    return _shim_folder / "bin"


def _python_names(scripts: Path | None = None) -> set[str]:
    version = sys.version_info
    names = {"python", f"python{version.major}", f"python{version.major}.{version.minor}"}
    folders = {Path(sys.executable).parent, Path(sysconfig.get_path("scripts")), scripts}
    for folder in filter(None, folders):
        with contextlib.suppress(OSError):
            names.update(path.name for path in folder.iterdir() if _is_python_script(path))
    return names


def _is_python_script(path: Path) -> bool:
    """Does the shebang of `path` name a Python? pip writes `#!/.../python`, or for a long path
    `#!/bin/sh` and then `'''exec' /.../python`."""
    try:
        if not (path.is_file() and os.access(path, os.X_OK)):
            return False
        with path.open("rb") as file:
            head = file.read(512)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in b"\n".join(head.splitlines()[:2])


# --- the one runner of child processes (the engine's stages and the generated tests alike) ---


@dataclass(frozen=True)
class Finished:
    """A child process that ended, by itself or at its time limit."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


class Running:
    """A child process started in a session of its own, its output going to files (so that
    processes it leaves behind do not hold its pipes open). `wait` ends it: whatever is left of
    its session is killed then.

    `command` is a shell line or an argument list, run in `cwd` (None: this process's folder);
    started directly, it is a process its caller may have to stop (the bot's jobs, at a
    shutdown). With `inherit_stderr` its standard error is this process's."""

    def __init__(
        self,
        command: str | list[str],
        cwd: Path | None,
        env: dict[str, str],
        inherit_stderr: bool = False,
    ):
        self.started = time.perf_counter()
        self._out = tempfile.TemporaryFile("w+")
        # (a long-lived job's log lines go where its caller's go, as they come)
        self._err = None if inherit_stderr else tempfile.TemporaryFile("w+")
        try:
            self.process = subprocess.Popen(
                command, shell=isinstance(command, str), cwd=cwd, env=env, stdout=self._out,
                stderr=self._err, text=True, start_new_session=True,
            )  # fmt: skip
        except BaseException:
            self._out.close()
            if self._err is not None:
                self._err.close()
            raise

    def signal(self, signum: int) -> None:
        """Send `signum` to the process and everything it started in its session."""
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float | None = None) -> Finished:
        """Wait for the process (at most `timeout` seconds), then kill what is left of its
        session, and hand back its exit and output."""
        timed_out = False
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            self.signal(signal.SIGKILL)
            self.process.wait()
        stdout, stderr = _read(self._out), "" if self._err is None else _read(self._err)
        seconds = time.perf_counter() - self.started
        return Finished(self.process.returncode, stdout, stderr, seconds, timed_out)


def _read(file: IO[str]) -> str:
    with file:
        file.seek(0)
        return file.read()


def run(command: str | list[str], cwd: Path, env: dict[str, str], timeout: float) -> Finished:
    """Run `command` (a shell line, or an argument list) in `cwd` in a session of its own.

    At the end, by itself or at `timeout`, whatever is left of its session is killed."""
    return Running(command, cwd, env).wait(timeout)
