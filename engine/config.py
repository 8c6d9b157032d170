"""Per-repository configuration: `.github/pytpu.yml` (or `.yaml`) or `[tool.pytpu]` in
`pyproject.toml`.

Every problem is a `ConfigError` whose message names the file, the line when known, the key,
what is wrong and what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import posixpath
import re
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import pathspec
import yaml

YAML_FILES = (".github/pytpu.yml", ".github/pytpu.yaml")
TARGET_ENV = "PYTPU_TARGET"  # the target where the settings set none (the Action's `target` input)
PYPROJECT = "pyproject.toml"
TABLE = "[tool.pytpu]"
BASELINE_DEVICES = ("cpu", "cuda")

KEYS: dict[str, str] = {
    "include": "path patterns (gitignore style) the migration rewrites; default: every file",
    "exclude": "path patterns (gitignore style) never rewritten; default: none",
    "run": "shell command, run from the repository root, that test generation records; or a "
    "list of them, one per program, each a command, `name: command`, or a mapping with "
    "`name`, `command` and `benchmark`",
    "benchmark": "shell command the benchmark times; default: the `run` command (with several "
    "programs, each program's own `benchmark`)",
    "tolerance": "positive factor applied to the generated tests' dtype tolerances; default 1.0",
    "baseline_device": "where the original code runs for comparison: cpu (default) or cuda",
    "target": "what to migrate to, e.g. torch_xla or torch_xla==2.9; default torch_xla",
    "tests": "folder of the generated test suite, inside the repository; default tests/pytpu",
    "timeout": "seconds allowed for each run of the program; default 300",
    "requirements": "requirements files the program's environment installs, relative to the "
    "root; default: requirements.txt at the root and beside each program's script, and "
    "pyproject.toml's [project] dependencies",
    "setup": "shell commands run in the program's environment after its requirements, from the "
    "repository root (`pip install ...` for what no file declares); default: none",
}

_TABLE_HEADER = re.compile(r"\[\s*tool\s*\.\s*pytpu\s*\]\s*(#.*)?")
_TOML_KEY = re.compile(r"""["']?([A-Za-z0-9_-]+)["']?\s*=""")


class ConfigError(Exception):
    """A configuration that cannot be used; the message says where and what to do."""


@dataclass(frozen=True)
class Program:
    """One program of the repository: its short command, the name its tests and its rows in
    the report go by (default: its script's), and the command its benchmark times (default:
    the short command, lengthened when it runs too few steps)."""

    command: str
    name: str | None = None
    benchmark: str | None = None


@dataclass(frozen=True)
class Config:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    run: tuple[Program, ...] = ()
    benchmark: str | None = None
    tolerance: float = 1.0
    baseline_device: str = "cpu"
    target: str = "torch_xla"
    tests: str = "tests/pytpu"
    timeout: float = 300.0
    requirements: tuple[str, ...] | None = None  # None: the files found (environment.declared)
    setup: tuple[str, ...] = ()
    source: str | None = None  # the file it was read from, relative to the root
    given: tuple[str, ...] = ()  # the keys the file sets (the rest are defaults)
    # where `target` came from when the file does not set it: TARGET_ENV (the Action's input)
    target_source: str | None = None

    @property
    def benchmark_command(self) -> str | None:
        """The one program's benchmark command, the configured or else its short command."""
        single = self.run[0] if len(self.run) == 1 else None
        return self.benchmark or (single and (single.benchmark or single.command))

    def selects(self, relative_path: str) -> bool:
        """Whether the migration may rewrite `relative_path` (posix, relative to the root)."""
        if self._include is not None and not self._include.match_file(relative_path):
            return False
        return not self._exclude.match_file(relative_path)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "include": list(self.include),
            "exclude": list(self.exclude),
            "run": [asdict(program) for program in self.run],
            "requirements": None if self.requirements is None else list(self.requirements),
            "setup": list(self.setup),
            "given": list(self.given),
            "target_source": self.target_source,
        }

    # cached_property writes the instance __dict__ directly, so it works on a frozen dataclass.
    @cached_property
    def _include(self) -> pathspec.GitIgnoreSpec | None:
        return pathspec.GitIgnoreSpec.from_lines(self.include) if self.include else None

    @cached_property
    def _exclude(self) -> pathspec.GitIgnoreSpec:
        return pathspec.GitIgnoreSpec.from_lines(self.exclude)


def load(root: Path) -> Config:
    """The configuration of the repository at `root`; defaults when it has none. Where the
    repository's settings do not set `target`, TARGET_ENV (the Action's `target` input) does."""
    settings = _load_file(Path(root))
    given = os.environ.get(TARGET_ENV, "").strip()
    if not given or "target" in settings.given:
        return settings
    try:
        target = _target(given)
    except ValueError as exc:
        raise ConfigError(f"{TARGET_ENV}: `target` {exc}") from None
    return dataclasses.replace(settings, target=target, target_source=TARGET_ENV)


def _load_file(root: Path) -> Config:
    found = [name for name in YAML_FILES if (root / name).is_file()]
    table = _read_pyproject(root / PYPROJECT)
    if table is not None:
        found.append(PYPROJECT)
    if len(found) > 1:
        raise ConfigError(_both_message(found[0], found[1]))
    if table is not None:
        return _build(table, PYPROJECT)
    if found:
        return _build(_read_yaml(root / found[0], found[0]), found[0])
    return Config()


def _both_message(first: str, second: str) -> str:
    if second == PYPROJECT:
        second, drop = f"{PYPROJECT} {TABLE}", f"remove the {TABLE} table from {PYPROJECT}"
    else:
        drop = f"delete {second}"
    return (
        f"PyTPU settings are in both {first} and {second}, and only one is read: "
        f"keep one of them (delete {first}, or {drop})"
    )


def _build(entries: dict[str, tuple[Any, str]], source: str) -> Config:
    values = {}
    for key, (value, where) in entries.items():
        check = _CHECKS.get(key)
        if check is None:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(KEYS)}"
            raise ConfigError(f"{where}: unknown key `{key}`; {hint}")
        try:
            values[key] = check(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: `{key}` {exc}") from None
    if values.get("benchmark") and len(values.get("run", ())) > 1:
        raise ConfigError(
            f"{entries['benchmark'][1]}: `benchmark` is one command, but `run` lists "
            f"{len(values['run'])} programs; give each program its own `benchmark` "
            "(`- {name: train, command: ..., benchmark: ...}`)"
        )
    return Config(**values, source=source, given=tuple(values))


def _read_text(path: Path, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{name}: cannot be read ({exc}); make it a readable UTF-8 file") from exc


def _read_yaml(path: Path, name: str) -> dict[str, tuple[Any, str]]:
    """key -> (value, "file:line"); composed node by node so each key keeps its line."""
    loader = yaml.SafeLoader(_read_text(path, name))
    try:
        node = loader.get_single_node()
        if node is None:  # an empty file: defaults
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise ConfigError(
                f"{name}:{node.start_mark.line + 1}: the top level must be a mapping of settings "
                f"(`key: value` lines); known keys: {', '.join(KEYS)}"
            )
        entries: dict[str, tuple[Any, str]] = {}
        for key_node, value_node in node.value:
            where = f"{name}:{key_node.start_mark.line + 1}"
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ConfigError(
                    f"{where}: key {key!r} is not a name; use one of {', '.join(KEYS)}"
                )
            if key in entries:
                raise ConfigError(
                    f"{where}: `{key}` is set twice (also at {entries[key][1]}); keep one"
                )
            entries[key] = (loader.construct_object(value_node, deep=True), where)
        return entries
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{name}{line}: not valid YAML: {exc.problem}; fix the syntax") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {exc}; fix the syntax") from None
    finally:
        loader.dispose()


def _read_pyproject(path: Path) -> dict[str, tuple[Any, str]] | None:
    """key -> (value, where) from `[tool.pytpu]`, or None when there is no such table."""
    if not path.is_file():
        return None
    text = _read_text(path, PYPROJECT)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{PYPROJECT}: not valid TOML ({exc}); fix the syntax") from None
    tool = data.get("tool")
    table = tool.get("pytpu") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(
            f"{PYPROJECT}: `tool.pytpu` must be a table; write {TABLE} followed "
            "by `key = value` lines"
        )
    return {key: (value, _toml_where(text, key)) for key, value in table.items()}


def _toml_where(text: str, key: str) -> str:
    """`pyproject.toml:LINE [tool.pytpu]`; tomllib keeps no lines, so a plain scan finds it."""
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            in_table = _TABLE_HEADER.fullmatch(stripped) is not None
        elif in_table and (match := _TOML_KEY.match(stripped)) and match[1] == key:
            return f"{PYPROJECT}:{number} {TABLE}"
    return f"{PYPROJECT} {TABLE}"


# Each check returns the value to keep or raises ValueError("must be ..., not ...; what to do").


def _patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise ValueError(
            f"must be a list of path patterns (gitignore style), not {value!r}; "
            'e.g. ["src/", "*.py"]'
        )
    try:
        pathspec.GitIgnoreSpec.from_lines(value)
    except ValueError as exc:
        raise ValueError(f"has a pattern that is not gitignore style ({exc}); fix it") from None
    return tuple(value)


def _command(value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise ValueError(f"must be a shell command (a string), not {value!r}; e.g. python train.py")
    return value


_PROGRAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PROGRAM_KEYS = ("name", "command", "benchmark")
_NAMED_COMMAND = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*):\s+(\S.*)", re.DOTALL)


def _programs(value: Any) -> tuple[Program, ...]:
    """`run`: one command, or a list of programs."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError("is an empty list; list the programs' commands, or leave `run` out")
    programs = tuple(_program(item, n) for n, item in enumerate(items, 1))
    names = [p.name for p in programs if p.name]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} more than once; give each program its own name")
    return programs


def _program(item: Any, number: int) -> Program:
    where = f"item {number}" if number else "the command"
    if isinstance(item, str):
        return Program(_command(item))
    if isinstance(item, dict) and len(item) == 1 and not set(item) & set(_PROGRAM_KEYS):
        ((name, command),) = item.items()  # `- train: python train.py`
        item = {"name": name, "command": command}
    if not isinstance(item, dict) or "command" not in item or set(item) - set(_PROGRAM_KEYS):
        raise ValueError(
            f"{where} must be a command, `name: command`, or a mapping with `command` (and "
            f"optionally `name`, `benchmark`), not {item!r}; e.g. - train: python train.py"
        )
    name = item.get("name")
    if name is not None and not (isinstance(name, str) and _PROGRAM_NAME.fullmatch(name)):
        raise ValueError(
            f"{where}: the name {name!r} must be letters, digits, `_`, `.` or `-` (it names "
            "the program's folder of tests); e.g. train"
        )
    return Program(_command(item["command"]), name, _command(item.get("benchmark")))


def program_option(text: str) -> Program:
    """`--run 'train: python train.py'` or `--run 'python train.py'` (the command line's form)."""
    named = _NAMED_COMMAND.fullmatch(text.strip())
    if named:
        return Program(_command(named[2]), named[1])
    return Program(_command(text))


def _positive(example: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        # bool is an int in Python, but `true` is never meant as a number here
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a number greater than 0, not {value!r}; e.g. {example}")
        return float(value)

    return check


def _device(value: Any) -> str:
    if value not in BASELINE_DEVICES:
        raise ValueError(f"must be one of {', '.join(BASELINE_DEVICES)}, not {value!r}")
    return value


def _target(value: Any) -> str:
    # Imported here: the rewrite stage may itself read the configuration.
    from pytpu.engine.rewriter.checkout import parse_target

    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {value!r}; e.g. torch_xla or torch_xla==2.9")
    try:
        parse_target(value)
    except ValueError as exc:
        raise ValueError(
            f"is not a valid target ({exc}); e.g. torch_xla or torch_xla==2.9"
        ) from None
    return value


def _tests(value: Any) -> str:
    if not (isinstance(value, str) and value.strip()):
        raise ValueError(f"must be a folder path (a string), not {value!r}; e.g. tests/pytpu")
    path = posixpath.normpath(value.replace("\\", "/"))
    outside = PurePosixPath(path).is_absolute() or PureWindowsPath(value).drive
    if outside or path in (".", "..") or path.startswith("../"):
        raise ValueError(
            f"must be a folder inside the repository, relative to its root, not {value!r}; "
            "e.g. tests/pytpu"
        )
    return path


def _files(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(f, str) and f.strip() for f in value):
        raise ValueError(
            f"must be a list of file paths relative to the root, not {value!r}; "
            'e.g. ["requirements.txt", "requirements/train.txt"]'
        )
    for name in value:
        path = posixpath.normpath(name.replace("\\", "/"))
        if PurePosixPath(path).is_absolute() or path == ".." or path.startswith("../"):
            raise ValueError(f"names {name!r}, outside the repository; give a path inside it")
    return tuple(value)


def _commands(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(c, str) and c.strip() for c in items):
        raise ValueError(
            f"must be a shell command or a list of them, not {value!r}; "
            'e.g. ["pip install ./vendor/ops"]'
        )
    return tuple(items)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "include": _patterns,
    "exclude": _patterns,
    "run": _programs,
    "benchmark": _command,
    "tolerance": _positive("2.0"),
    "baseline_device": _device,
    "target": _target,
    "tests": _tests,
    "timeout": _positive("600"),
    "requirements": _files,
    "setup": _commands,
}
