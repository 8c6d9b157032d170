"""The programs PyTPU proposes when the repository names none: the commands its READMEs show,
its console scripts (`[project.scripts]`), and its scripts with `if __name__ == '__main__':` or
argparse. Each command gets the script's own short-run flags it does not set already
(`--dry-run`, `--epochs 1`), so that a README's full training run becomes a short one.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pytpu.engine.source_roots import source_roots
from pytpu.engine.testgen import invocation, short_command
from pytpu.runtime import command as shell

README = re.compile(r"readme(\.\w+)?", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_PROMPT = re.compile(r"^\s*(\$|>>>|%|!)?\s*")
_STARTERS = ("torchrun", "accelerate")  # besides Python: what a README's command line starts with


@dataclass(frozen=True)
class Proposal:
    command: str  # a shell line run from the root
    origin: str  # where it was found: `README.md:12`, `pyproject.toml [project.scripts] x`, a file
    name: str | None = None  # a console script's name; else the script's


def find(root: Path, suite_dir: Path) -> list[Proposal]:
    """Every program found, the likeliest first, one per script."""
    found: list[Proposal] = []
    seen: set[str] = set()
    for proposal in [*_readme_commands(root), *_console_scripts(root), *_scripts(root, suite_dir)]:
        entry = invocation.entry_script(root, proposal.command) or proposal.command
        if entry not in seen:
            seen.add(entry)
            found.append(proposal)
    return found


def _readme_commands(root: Path) -> list[Proposal]:
    """Lines of a README's code blocks that run a script of the repository with Python."""
    found = []
    for readme in sorted(_readmes(root), key=lambda p: (len(p.parts), p.as_posix())):
        folder = readme.parent.relative_to(root).as_posix()
        lines = readme.read_text(encoding="utf-8", errors="replace").splitlines()
        fenced = False
        for number, line in enumerate(lines, 1):
            if _FENCE.match(line):
                fenced = not fenced
                continue
            text = _PROMPT.sub("", line, count=1).strip()
            if not fenced or not _starts_a_program(text) or text.endswith("\\"):
                continue
            command = text if folder == "." else f"cd {shlex.quote(folder)} && {text}"
            call = invocation.program_call(root, command)
            if call is not None:
                where = readme.relative_to(root).as_posix()
                found.append(Proposal(_shortened(root, command, call), f"{where}:{number}"))
    return found


def _readmes(root: Path) -> list[Path]:
    """READMEs at the top and up to two folders down, outside hidden folders."""
    found = []
    for pattern in ("*", "*/*", "*/*/*"):
        for path in root.glob(pattern):
            hidden = any(part.startswith(".") for part in path.relative_to(root).parts)
            if README.fullmatch(path.name) and path.is_file() and not hidden:
                found.append(path)
    return found


def _starts_a_program(text: str) -> bool:
    """A line of a README that starts by running Python, torchrun or accelerate, after
    variables and `env`: `python train.py`, `A=1 python3 -m pkg.train`."""
    segments = shell.parse(text).segments
    word = segments[0].executable if segments and segments[0].start == 0 else None
    return word is not None and (
        word.value in _STARTERS or bool(shell.PYTHON.fullmatch(word.value))
    )


def _shortened(root: Path, command: str, call: invocation.ProgramCall) -> str:
    """The command with the script's short-run flags it does not set, after its arguments."""
    given = [w.value for w in call.arguments]
    added = short_command.short_run_flags(root / call.entry, given)
    extra = [w for w in added if w not in {g.split("=", 1)[0] for g in given}]
    if not extra:
        return command
    return command[: call.end] + " " + shlex.join(extra) + command[call.end :]


def _console_scripts(root: Path) -> list[Proposal]:
    """`[project.scripts] train = "pkg.cli:main"`: the function called as the console script
    would call it, the package importable as installed."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    found = []
    folders = ":".join(f.relative_to(root).as_posix() for f in source_roots(root))
    for name, target in project.get("project", {}).get("scripts", {}).items():
        module, _, function = str(target).partition(":")
        if not re.fullmatch(r"[\w.]+", module) or not re.fullmatch(r"[\w.]*", function):
            continue
        call = f"import sys; from {module} import {function}; sys.exit({function}())"
        if not function:
            call = f"import runpy; runpy.run_module({module!r}, run_name='__main__')"
        path = f"PYTHONPATH={folders} " if folders else ""
        origin = f"pyproject.toml [project.scripts] {name}"
        found.append(Proposal(f"{path}python -c {shlex.quote(call)}", origin, name))
    return found


def _scripts(root: Path, suite_dir: Path) -> list[Proposal]:
    return [
        Proposal(short_command.short_command(root, script), script.relative_to(root).as_posix())
        for script in short_command.entry_scripts(root, suite_dir)
    ]
