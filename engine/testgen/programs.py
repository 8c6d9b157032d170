"""Several programs in one repository: each command is recorded and gets its tests.

One program keeps the single suite (`tests/pytpu`). Several get a suite each, in a folder named
after the program (`tests/pytpu/train`, `tests/pytpu/sample`), whose test modules carry the name
too (pytest cannot collect two `test_program.py` of the same name), and whose `suite.json` gives
the program's place in the list: the runtime's pytest plugin runs the programs' tests in that
order, so `sample.py` finds the checkpoint `train.py` wrote, as in the recorded runs.

A program that cannot be recorded is reported with the reason; the others go on.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pytpu.engine.config import Program
from pytpu.engine.testgen import invocation, proposals
from pytpu.engine.testgen.generate import (
    DEFAULT_OUT,
    OTHER_PROGRAM,
    GenerationResult,
    TestgenError,
    generate,
)
from pytpu.engine.testgen.suite import snake


class ProgramTested(NamedTuple):
    """A tested unit (`generate.Tested`) and the program whose suite tests it."""

    kind: str
    name: str
    tests: list[str]
    program: str


class ProgramUntested(NamedTuple):
    """A unit without a test (`generate.Untested`), and the program that said why."""

    kind: str
    name: str
    reason: str
    program: str


@dataclass
class ProgramTests:
    """One program: what it was called, how it was found, and its generation or why none."""

    name: str
    command: str
    origin: str  # "configured", or where PyTPU found it ("README.md:12", "train.py")
    benchmark: str | None = None  # a configured benchmark command
    generated: GenerationResult | None = None
    error: str | None = None  # why it could not be recorded
    tried: bool = True  # False: found, but over the limit of programs tried unconfigured

    @property
    def trains(self) -> bool:
        return self.generated is not None and self.generated.trains


@dataclass
class ProgramsResult:
    """Every program's tests, and what they add up to."""

    out: Path
    suite: str  # `out` as given: relative to the root, with /
    programs: list[ProgramTests] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # problems of the repository's files

    def suite_of(self, name: str) -> str:
        """The folder of a program's suite, relative to the root."""
        return f"{self.suite}/{name}" if self.several else self.suite

    @property
    def recorded(self) -> list[ProgramTests]:
        return [p for p in self.programs if p.generated is not None]

    @property
    def several(self) -> bool:
        return len(self.programs) > 1

    @property
    def tested(self) -> list[ProgramTested]:
        """Every program's tested units."""
        return [ProgramTested(*t, p.name) for p in self.recorded for t in p.generated.tested]

    @property
    def untested(self) -> list[ProgramUntested]:
        """Units no program tests, each once (a unit another program loads is not "not
        loaded": that program's reason is kept)."""
        tested = {unit.name for unit in self.tested}
        chosen: dict[str, ProgramUntested] = {}
        for p in self.recorded:
            for unit in p.generated.untested:
                if unit.name in tested:
                    continue
                if unit.name not in chosen or chosen[unit.name].reason == OTHER_PROGRAM:
                    chosen[unit.name] = ProgramUntested(*unit, p.name)
        return list(chosen.values())

    @property
    def data_bytes(self) -> int:
        return sum(p.generated.data_bytes for p in self.recorded)

    def as_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "tested": [unit._asdict() for unit in self.tested],
            "untested": [unit._asdict() for unit in self.untested],
            "programs": [
                {
                    "name": p.name,
                    "command": p.command,
                    "origin": p.origin,
                    "error": p.error,
                    "tried": p.tried,
                    **(p.generated.as_dict() if p.generated else {}),
                }
                for p in self.programs
            ],
            "errors": self.errors,
        }


MAX_PROPOSED = 3  # programs PyTPU finds by itself and records, when none is configured


def generate_programs(
    root: Path,
    programs: tuple[Program, ...] = (),
    out: str = DEFAULT_OUT,
    stage: Callable[[str], None] = lambda _: None,
    **options: Any,
) -> ProgramsResult:
    """Record each program (the configured ones, else those PyTPU finds) and write its tests.
    `options` go to `generate` (timeout, tolerance, precision, max_unit_bytes). TestgenError when no
    program could be recorded."""
    root = root.resolve()
    planned = _planned(root, programs, root / out)
    result = ProgramsResult(out=(root / out).resolve(), suite=out.strip("/"))
    several = len(planned) > 1
    rerecord = _rerecord(planned, out) if several else None
    for order, each in enumerate(planned):
        result.programs.append(each)
        if not each.tried:
            continue
        where = f"{result.suite}/{each.name}" if several else result.suite
        try:
            each.generated = generate(
                root,
                run=each.command,
                out=where,
                stage=lambda text, name=each.name: stage(f"{name}: {text}" if several else text),
                prefix=f"{snake(each.name)}_" if several else "",
                order=order,
                rerecord=rerecord,
                **options,
            )
        except TestgenError as exc:
            each.error = str(exc)
            continue
        result.errors.extend(e for e in each.generated.errors if e not in result.errors)
    if not result.recorded:
        raise TestgenError(_none_recorded(result.programs))
    if several:
        _tidy(result.out, [p.name for p in result.recorded])
    return result


def _planned(root: Path, programs: tuple[Program, ...], out_dir: Path) -> list[ProgramTests]:
    if programs:
        names = _names(root, [p.command for p in programs], [p.name for p in programs])
        return [
            ProgramTests(name, p.command, "configured", p.benchmark)
            for name, p in zip(names, programs, strict=True)
        ]
    found = proposals.find(root, out_dir)
    if not found:
        raise TestgenError(
            f"{root}: no program to run found (no README command, no script with "
            "`if __name__ == '__main__':`); give the short command with --run or `run:`"
        )
    names = _names(root, [f.command for f in found], [f.name for f in found])
    return [
        ProgramTests(name, f.command, f.origin, tried=n < MAX_PROPOSED)
        for n, (name, f) in enumerate(zip(names, found, strict=True))
    ]


def _names(root: Path, commands: list[str], given: list[str | None]) -> list[str]:
    """Each program's name: the configured one, else its script's (`train`), made unique."""
    names: list[str] = []
    for command, name in zip(commands, given, strict=True):
        if name is None:
            entry = invocation.entry_script(root, command)
            stem = Path(entry).stem if entry else "program"
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "program"
            if name in names and entry and Path(entry).parent.name:
                name = f"{Path(entry).parent.name}_{name}"
        base, n = name, 2
        while name in names or name in given[len(names) + 1 :]:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def _rerecord(planned: list[ProgramTests], out: str) -> str:
    """The command that writes these programs' suites again."""
    runs = [f"--run {shlex.quote(f'{p.name}: {p.command}')}" for p in planned if p.tried]
    where = [] if out == DEFAULT_OUT else [f"--out {shlex.quote(out)}"]
    return " ".join(["pytpu testgen .", *runs, *where])


def _none_recorded(programs: list[ProgramTests]) -> str:
    if len(programs) == 1:
        return programs[0].error or "the program could not be recorded"
    lines = [f"none of the {len(programs)} programs could be recorded:"]
    lines += [f"- {p.name} (`{p.command}`): {p.error or 'not tried'}" for p in programs]
    return "\n".join(lines)


def _tidy(out_dir: Path, names: list[str]) -> None:
    """What an earlier generation left that is no suite of this one: a single suite's files at
    the top, the folder of a program no longer listed."""
    for path in out_dir.iterdir():
        if path.is_dir() and path.name in names:
            continue
        if path.is_dir() and not (path / "suite.json").exists() and path.name != "data":
            continue  # not PyTPU's
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name in ("suite.json", "conftest.py", "requirements.txt") or (
            path.name.startswith("test_") and path.suffix == ".py"
        ):
            path.unlink()
