"""The short command that runs the program: the one given, or one built from the repository's
entry script (`if __name__ == "__main__":`, argparse) with the script's own short-run flags
(`--dry-run`, `--epochs 1`); with what each side of the migration runs (`accelerator.on_device`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from pytpu.engine import processes
from pytpu.engine.testgen import accelerator
from pytpu.engine.testgen.discover import python_files
from pytpu.engine.testgen.invocation import ADD, SideCommand, entry_script
from pytpu.engine.testgen.options import declared_options
from pytpu.runtime.command import runnable

# Flags that make a program's own run short, and the value each gets (None: a switch).
SHORT_RUN_FLAGS = {
    "--dry-run": None, "--dry_run": None,
    "--epochs": "1", "--n_epochs": "1", "--num_epochs": "1", "--max_epochs": "1", "--niter": "1",
    "--max_iters": "4", "--max-iters": "4", "--max_steps": "4", "--max-steps": "4",
    "--steps": "4", "--iterations": "4",
    "--workers": "0", "--num_workers": "0", "--num-workers": "0", "--n_cpu": "0",
}  # fmt: skip
ENTRY_NAMES = ("main.py", "train.py", "run.py", "app.py")


@dataclass(frozen=True)
class RunCommand:
    given: str  # as the user wrote it (or as PyTPU built it from the entry script)
    entry: str | None  # the script it runs, relative to the root
    on_cpu: SideCommand  # what the original side runs: the accelerator on, its work on the CPU
    on_xla: SideCommand  # what the migrated side runs, with the accelerator on
    guessed: bool

    @property
    def command(self) -> str:
        """The command recorded and run before the migration."""
        return self.on_cpu.command

    @property
    def accelerator_flag(self) -> str | None:
        """The switch that turns the accelerator on, added on both sides (`--cuda`), or None."""
        return next((c.option for c in self.on_xla.changes if c.action == ADD), None)


def short_run_flags(script: Path, given: list[str]) -> list[str]:
    """The words of the script's own short-run flags (`SHORT_RUN_FLAGS`: `--dry-run`,
    `--epochs 1`) that its parser declares and the arguments `given` do not set."""
    flags = _argparse_flags(script)
    set_already = {w.split("=", 1)[0] for w in ["python", script.name, *given]}
    words: list[str] = []
    for flag, value in SHORT_RUN_FLAGS.items():
        if flag in set_already or flag not in flags:
            continue
        if (value is None) == (flags[flag] == "store_true"):
            words += [flag] if value is None else [flag, value]
    return words


def _argparse_flags(script: Path) -> dict[str, str | None]:
    """The long options a script's argparse parser declares, each with its action (or None)."""
    try:
        module = cst.parse_module(script.read_bytes())
    except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
        return {}
    return {
        name: option.action
        for option in declared_options(module)
        for name in option.names
        if name.startswith("--")
    }


def run_command(root: Path, given: str | None, suite_dir: Path) -> RunCommand | None:
    """The given command, or one built from the entry script's own flags for a short run; with
    the commands the two sides run (`accelerator.on_device`)."""
    guessed = not given
    if given:
        command = runnable(given)
        entry = entry_script(root, command)
    else:
        candidates = entry_scripts(root, suite_dir)
        if not candidates:
            return None
        entry = candidates[0].relative_to(root).as_posix()
        command = short_command(root, candidates[0])
    # (the migrated side's device: the target's, kb/targets.yaml)
    target = processes.TARGET_DEVICE.get()
    sides = [accelerator.on_device(root, command, device) for device in ("cpu", target)]
    return RunCommand(command, entry, *sides, guessed=guessed)


def entry_scripts(root: Path, suite_dir: Path) -> list[Path]:
    """The scripts a person runs (`if __name__ == '__main__':`, or argparse), the likeliest
    first: the usual entry names, then the shallowest."""
    candidates = [
        p
        for p in python_files(root, suite_dir)
        if "__main__" in (text := p.read_text(encoding="utf-8", errors="replace"))
        or "parse_args(" in text
    ]
    candidates.sort(key=lambda p: (p.name not in ENTRY_NAMES, len(p.parts), p.as_posix()))
    return candidates


def short_command(root: Path, script: Path, given: list[str] | None = None) -> str:
    """A shell line, from the root, that runs `script` (with the arguments `given`, default
    none) and the script's own short-run flags the arguments do not set (`--dry-run`)."""
    words = ["python", script.name, *(given or []), *short_run_flags(script, given or [])]
    relative_dir = script.parent.relative_to(root).as_posix()
    command = shlex.join(words)
    if relative_dir != ".":
        command = f"cd {shlex.quote(relative_dir)} && {command}"
    return command
