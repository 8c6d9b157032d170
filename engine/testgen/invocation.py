"""The repository's program in a run command, and the command changed for one side.

The shell line itself is read by the runtime's `pytpu.runtime.command` (its simple commands, their
`cd`s, variables, programs and arguments with their places in the line); this module finds which
of its programs is a script, module or notebook of the repository (`program_call`) and makes the
changes a side's command needs (`changed`: an option left out, given another value or added, a
variable left out), each an edit of the words it changes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytpu.runtime import command as shell
from pytpu.runtime.command import MODULE, RUNNABLE, Program, Word


@dataclass(frozen=True)
class ProgramCall:
    """Where a shell line runs the program: the script (or module) Python runs, directly or
    through a launcher, and the program's own arguments after it."""

    entry: str  # the script, relative to the root, with /
    program: Program  # its invocation in the line

    @property
    def arguments(self) -> tuple[Word, ...]:
        """The words after the script, up to an operator or redirection."""
        return self.program.arguments

    @property
    def end(self) -> int:
        """Where the invocation's last word ends: an argument added there reaches the program."""
        return self.program.end

    @property
    def values(self) -> list[str]:
        """The program's arguments as it receives them."""
        return self.program.values


def program_call(root: Path, command: str) -> ProgramCall | None:
    """The first invocation in `command` of a Python script or module of the repository:
    `PYTHONPATH=. python train.py`, `env A=1 python3 -u -m pkg.train`, `cd src && python x.py`,
    `torchrun --nproc_per_node=1 train.py`, `accelerate launch x.py`."""
    return _call(root, shell.parse(command))


def entry_script(root: Path, command: str) -> str | None:
    """The script a shell line runs (`program_call`), relative to the root."""
    call = program_call(root, command)
    return call.entry if call else None


def _call(root: Path, line: shell.Command) -> ProgramCall | None:
    for folder, program in line.programs():
        script = _script_path(root / folder, program.target.value, program.kind == MODULE)
        try:
            entry = script.resolve().relative_to(root.resolve()).as_posix() if script else None
        except ValueError:  # a script outside the repository
            entry = None
        if entry is not None:
            return ProgramCall(entry, program)
    return None


def _script_path(directory: Path, name: str, module: bool) -> Path | None:
    if module:
        dotted = directory / name.replace(".", "/")
        candidates = [dotted.with_name(f"{dotted.name}.py"), dotted / "__main__.py"]
    else:
        candidates = [directory / name] if name.endswith(RUNNABLE) else []
    return next((c for c in candidates if c.is_file()), None)


def assignments(command: str) -> list[Word]:
    """The variables each command of a shell line sets for the program it runs: `A=1 python`,
    `env A=1 python`."""
    return shell.parse(command).assignments


# --- a command changed for one side --------------------------------------------------------------

DROP, SET, ADD = "drop", "set", "add"


@dataclass(frozen=True)
class Change:
    """One change of a command: an argument of the program's invocation left out (with its
    value when it takes one), given another value (in place, else added as `option=value`), or
    a switch added; or a variable the line sets for the program left out."""

    action: str  # drop | set | add
    option: str  # as the command writes it: --no-cuda, --device, SOLVER.MAX_ITER, a variable
    value: str | None = None  # the value `set` gives it
    was: str | None = None  # the value the command gave it; None: a switch, or not given
    takes_value: bool = False  # `drop`: the word after the option is its value (`--gpu -1`)
    variable: bool = False  # an environment variable set before the program

    @property
    def written(self) -> str:
        """The option as the command gave it: `--no-cuda`, `--gpu -1`, `CUDA_VISIBLE_DEVICES=`."""
        if self.variable:
            return f"{self.option}={shlex.quote(self.was) if self.was else ''}"
        return shlex.join([self.option, self.was]) if self.was is not None else self.option

    @property
    def said(self) -> str:
        """The change in words, for the report and the tests' comments: without `--no-cuda`."""
        if self.action == DROP:
            return f"without `{self.written}`"
        if self.action == ADD:
            return f"with `{self.option}`"
        return f"with `{shlex.join([self.option, self.value or ''])}` rather than `{self.was}`"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "option": self.option, "written": self.written,
                "value": self.value, "said": self.said}  # fmt: skip


@dataclass(frozen=True)
class SideCommand:
    """The command one side runs: the given one with `changes` made."""

    command: str
    changes: tuple[Change, ...] = ()


def changed(root: Path, command: str, changes: list[Change] | tuple[Change, ...]) -> str:
    """`command` with `changes` made to the program's invocation (`program_call`) and to the
    variables its line sets; the rest of the line is left as written. An option given twice is
    changed twice; one the command does not give is added after its last argument."""
    line = shell.parse(command)
    call = _call(root, line)
    edits: list[shell.Edit] = []
    added = []
    for change in changes:
        if change.variable:
            edits += line.unset(change.option)
            continue
        if call is None:
            continue
        program = call.program
        if change.action == DROP:
            edits += program.drop(change.option, change.takes_value)
        elif change.action == SET:
            edits += program.set_value(change.option, change.value or "")
        if change.action != DROP and not program.gives(change.option):
            value = f"={shlex.quote(change.value or '')}" if change.action == SET else ""
            added.append(f"{change.option}{value}")
    if added:
        assert call is not None
        edits.append(call.program.append(added))
    return line.edited(edits)
