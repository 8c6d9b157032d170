"""How PyTPU starts inside a program it runs, for the harness and the step timer alike.

The parent side: `program_environment` is the child's environment (this one without secrets, the
settings as JSON in PYTPU_HARNESS or PYTPU_BENCHMARK, the `startup/` folder first on PYTHONPATH,
and first on PATH the shims that put it back there when the command sets PYTHONPATH itself).
The child side: Python imports `startup/sitecustomize.py` at start-up, which calls `start`: it
hands over to the environment's own sitecustomize, if any, then maps CUDA to the CPU when the
program runs there (the original code takes its CUDA path, the work done on the CPU) and installs
the harness (test generation) or the step timer (the benchmark). Without those settings it does
nothing, and imports nothing heavy: every Python the program starts runs it too. A notebook's
run is the exception: the process that runs the notebook (`jupyter execute nb.ipynb`) takes
nothing, and its kernel, which inherits the environment, takes PyTPU (`pytpu.runtime.kernel`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

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

_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|PRIVATE|^AWS_|^GH_|^GITHUB_")


# --- the parent side -------------------------------------------------------------------------


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
}
_SIGNALS = {-11: "a segmentation fault", 139: "a segmentation fault", -9: "SIGKILL", 137: "SIGKILL"}


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
    env[name] = _settings_value(json.dumps(settings))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STARTUP), env.get("PYTHONPATH")]))
    own = str(Path(sys.executable).parent)
    path = [str(_shims(scripts)), *([str(scripts)] if scripts else []), own, env.get("PATH", "")]
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONHASHSEED"] = "0"
    return env


# One environment variable holds at most 128 KiB on Linux (and all of them together share the
# limit of a command line): a large library's settings (the harness's probes of hundreds of module
# classes) go in a file, and the variable holds `@` and its path.
_INLINE_LIMIT = 16 * 1024


def _settings_value(text: str) -> str:
    if len(text) <= _INLINE_LIMIT:
        return text
    handle, path = tempfile.mkstemp(prefix="pytpu-settings-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    atexit.register(_remove, path)  # the parent's: the program reads it while the parent runs
    return "@" + path


def _settings_text(value: str) -> str:
    if value.startswith("@"):
        return Path(value[1:]).read_text(encoding="utf-8")
    return value


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# A run command is a shell line and may set PYTHONPATH itself (`PYTHONPATH=. python x.py`, a
# script's `export PYTHONPATH=src`), which drops STARTUP. So the names a command starts Python by
# are found first in a folder of shims: each puts STARTUP back at the front of PYTHONPATH (after
# the command's own assignments, keeping their entries) and execs the program of its name that
# PATH finds next, the same `python` as without it (so the same sys.executable). A console script
# (torchrun) names its interpreter in its shebang, out of PATH's reach, so it has a shim too; the
# processes it starts inherit the PYTHONPATH that shim set.
_SHIM = """\
#!/bin/sh
# PyTPU's shim (pytpu.runtime.bootstrap): its start-up folder first on PYTHONPATH, then the
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


# --- the child side --------------------------------------------------------------------------


class RepositoryFiles:
    """Which source files are the repository's own code (not its tests, environments or
    libraries), by their names relative to its root; in an IPython kernel, the code of its
    notebook's cells too, named `nb.ipynb#cell5` (`pytpu.runtime.cells`)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.names: dict[str, str | None] = {}  # file name -> its name in the repository, or None
        self.offsets: dict[str, int] = {}  # a cell's code -> the lines IPython dropped before it
        self.folder = os.getcwd()  # where a kernel starts: its notebook's folder
        self._cells: Any = None  # the kernel's cells.CellIndex, made when first needed

    def in_repo(self, filename: str) -> bool:
        return self.name(filename) is not None

    def name(self, filename: str) -> str | None:
        if filename not in self.names:
            self.names[filename] = self._file_name(filename) or self._cell_name(filename)
        return self.names[filename]

    def relative(self, filename: str) -> str:
        name = self.name(filename)
        if name is None:
            return Path(filename).resolve().relative_to(self.root).as_posix()
        return name

    def line(self, filename: str, line: int) -> int:
        """A line of `filename`'s code as its file (or cell) numbers it."""
        return line + self.offsets.get(filename, 0)

    def _file_name(self, filename: str) -> str | None:
        try:
            path = Path(filename).resolve()
            parts = path.relative_to(self.root).parts if self.root in path.parents else ()
        except (OSError, ValueError):
            return None
        # The repository's tests, this suite and environments inside it are not its code.
        outside = any(part in ("tests", "site-packages") or part.startswith(".") for part in parts)
        if path.suffix != ".py" or not parts or outside:
            return None
        return "/".join(parts)

    def _cell_name(self, filename: str) -> str | None:
        if self._cells is None:
            from pytpu.runtime.cells import CellIndex

            self._cells = CellIndex(self.root, self.folder)
        found = self._cells.locate(filename)
        if found is None:
            return None
        name, self.offsets[filename] = found
        self.cell_ran()
        return name

    def cell_ran(self) -> None:
        """Called when the code of a notebook's cell is first seen."""

    def notebooks(self) -> list[str]:
        """The notebooks whose cells ran in this process (a kernel), relative to the root."""
        return self._cells.notebooks if self._cells is not None and self.offsets else []


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
                install(module, json.loads(_settings_text(os.environ[name])))
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
