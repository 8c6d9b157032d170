"""Per-repository configuration: `.github/pytpu.yml` (or `.yaml`) or `[tool.pytpu]` in
`pyproject.toml`.

The keys, what each may hold and what each means are in `config.schema.json` (JSON Schema,
Draft 2020-12), the one description of the settings: the file is validated against it, and the
checks a schema cannot express (gitignore syntax, paths inside the repository, known targets,
unique program names, `benchmark` beside several programs) follow here. Every problem is a
`ConfigError` whose message names the file, the line when known, the key, what is wrong and what
to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
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

import jsonschema
import pathspec
import yaml
from jsonschema.exceptions import ValidationError

YAML_FILES = (".github/pytpu.yml", ".github/pytpu.yaml")
TARGET_ENV = "PYTPU_TARGET"  # the target where the settings set none (the Action's `target` input)
PYPROJECT = "pyproject.toml"
TABLE = "[tool.pytpu]"
SCHEMA_PATH = Path(__file__).with_name("config.schema.json")
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
KEYS: dict[str, str] = {key: spec["description"] for key, spec in SCHEMA["properties"].items()}
BASELINE_DEVICES = tuple(SCHEMA["properties"]["baseline_device"]["enum"])

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
    benchmark_rounds: int = 5
    virtual_devices: int = 1
    data_parallel: str = "auto"  # "spmd": the KB's data-parallel rules shard each batch
    precision: str = "fp32"  # "bf16": training steps run under bfloat16 autocast
    batch: str = "global"  # "per_device": under SPMD each device gets the program's batch
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

    @property
    def rule_settings(self) -> dict[str, str]:
        """The settings that choose KB rules (a rule's `settings`), with their values. `auto`
        data parallelism is SPMD when the migrated side may have several devices: virtual ones
        on the CPU, or a TPU runner's chips (PJRT_DEVICE=TPU; the migrated program counts them
        when it starts, and a single chip runs it as before)."""
        parallel = self.data_parallel
        if parallel == "auto":
            on_tpu = os.environ.get("PJRT_DEVICE", "").upper() == "TPU"
            parallel = "spmd" if self.virtual_devices > 1 or on_tpu else "none"
        return {"data_parallel": parallel, "precision": self.precision, "batch": self.batch}

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


@dataclass(frozen=True)
class _Settings:
    """A settings file as read: its value (a mapping when well formed), where it starts, where
    each of its keys is ("file:line"), and what the whole is called and how it is written."""

    value: Any
    where: str
    keys: dict[str, str]
    called: str  # "the top level", "`tool.pytpu`"
    form: str  # what to write instead of a value that is not a mapping


def _build(settings: _Settings, source: str) -> Config:
    problems = _schema_problems(settings)
    if None in problems:
        raise ConfigError(f"{settings.where}: {problems[None]}")
    values = {}
    for key, value in settings.value.items():  # in the file's order: the first problem is told
        where = settings.keys[key]
        if key in problems:
            raise ConfigError(f"{where}: {problems[key]}")
        try:
            values[key] = _VALUES[key](value)
        except ValueError as exc:
            raise ConfigError(f"{where}: `{key}` {exc}") from None
    # across keys: one `benchmark` cannot time several programs
    if values.get("benchmark") and len(values.get("run", ())) > 1:
        raise ConfigError(
            f"{settings.keys['benchmark']}: `benchmark` is one command, but `run` lists "
            f"{len(values['run'])} programs; give each program its own `benchmark` "
            "(`- {name: train, command: ..., benchmark: ...}`)"
        )
    return Config(**values, source=source, given=tuple(values))


def _read_text(path: Path, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{name}: cannot be read ({exc}); make it a readable UTF-8 file") from exc


def _read_yaml(path: Path, name: str) -> _Settings:
    """Composed node by node so each key keeps its line."""
    loader = yaml.SafeLoader(_read_text(path, name))
    form = f"write `key: value` lines; known keys: {', '.join(KEYS)}"
    try:
        node = loader.get_single_node()
        if node is None:  # an empty file: defaults
            return _Settings({}, name, {}, "the top level", form)
        top = f"{name}:{node.start_mark.line + 1}"
        if not isinstance(node, yaml.MappingNode):  # (the schema says what it must be)
            value = loader.construct_object(node, deep=True)
            return _Settings(value, top, {}, "the top level", form)
        # What JSON cannot hold, the schema cannot check: a key that is not a string, a key
        # set twice (the second would silently win).
        values: dict[str, Any] = {}
        keys: dict[str, str] = {}
        for key_node, value_node in node.value:
            where = f"{name}:{key_node.start_mark.line + 1}"
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ConfigError(
                    f"{where}: key {key!r} is not a name; use one of {', '.join(KEYS)}"
                )
            if key in values:
                raise ConfigError(f"{where}: `{key}` is set twice (also at {keys[key]}); keep one")
            values[key] = loader.construct_object(value_node, deep=True)
            keys[key] = where
        return _Settings(values, top, keys, "the top level", form)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{name}{line}: not valid YAML: {exc.problem}; fix the syntax") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {exc}; fix the syntax") from None
    finally:
        loader.dispose()


def _read_pyproject(path: Path) -> _Settings | None:
    """`[tool.pytpu]`, or None when there is no such table."""
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
    where = {key: _toml_where(text, key) for key in table} if isinstance(table, dict) else {}
    form = f"write {TABLE} followed by `key = value` lines"
    return _Settings(table, PYPROJECT, where, "`tool.pytpu`", form)


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


# --- the schema: what each key may hold ------------------------------------------------------


def _finite_number(checker: Any, instance: Any) -> bool:
    # JSON has no NaN or infinity, so a schema's "number" cannot exclude them; YAML's `.nan`
    # and `.inf` and TOML's `nan` and `inf` are not numbers here.
    number = jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(instance, "number")
    return number and math.isfinite(instance)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number),
)
_VALIDATOR = _Validator(SCHEMA)


def _schema_problems(settings: _Settings) -> dict[str | None, str]:
    """The first problem with each key (None: with the whole), each "SUBJECT ... what to do"."""
    problems: dict[str | None, str] = {}
    for error in _VALIDATOR.iter_errors(settings.value):
        if error.path:
            problems.setdefault(error.path[0], _message(error, settings.value))
        elif error.validator == "additionalProperties":
            for key in settings.value:
                if key not in KEYS:
                    problems.setdefault(key, _unknown(key))
        else:
            message = _message(error, settings.value, settings.called)
            problems.setdefault(None, f"{message}; {settings.form}")
    return problems


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(KEYS)}"
    return f"unknown key `{key}`; {hint}"


def _message(
    error: ValidationError, document: Any, called: str = "", root: dict[str, Any] = SCHEMA
) -> str:
    """`SUBJECT must be ..., not VALUE; e.g. EXAMPLE`: told by the innermost schema with an
    `errorMessage` on the way to the failure; of alternatives (`anyOf`), by the one the value
    fits, if it fits one."""
    error = _narrowed(error)
    schema, depth, by_name = _teller(error, root)
    path = list(error.absolute_path)[:depth]
    subject = " ".join(part for part in (called, _subject(document, path)) if part)
    if "errorMessage" not in schema:  # (each key's schema has one: tests/test_config.py)
        return f"{subject}: {error.message}"
    examples = " or ".join(_shown(example) for example in schema.get("examples", ()))
    example = f"; e.g. {examples}" if examples else ""
    if by_name:  # a mapping's key, told by `propertyNames`
        return f"{subject}: the name {error.instance!r} {schema['errorMessage']}{example}"
    value = _at(document, path)
    return f"{subject} {schema['errorMessage']}, not {value!r}{example}"


def _narrowed(error: ValidationError) -> ValidationError:
    """Into the alternative of an `anyOf` that the value fits: the only one of its type, or the
    only one whose failures are all inside the value (a named program's bad name, not a
    mapping missing `command`)."""
    while error.validator == "anyOf":
        branches: dict[int, list[ValidationError]] = {}
        for inner in error.context or ():
            branches.setdefault(inner.relative_schema_path[0], []).append(inner)

        def whole(inner: ValidationError) -> bool:  # about the value itself, not inside it
            return not inner.relative_path and "propertyNames" not in inner.relative_schema_path

        fits = [
            errors
            for errors in branches.values()
            if not any(whole(inner) and inner.validator == "type" for inner in errors)
        ]
        if len(fits) > 1:
            fits = [errors for errors in fits if not any(whole(inner) for inner in errors)]
        if len(fits) != 1:
            break
        error = fits[0][0]
    return error


def _teller(error: ValidationError, root: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
    """The innermost schema with an `errorMessage` from `root` down to the failing keyword, how
    many steps into the value it is, and whether it tells of a key (`propertyNames`)."""
    schema: Any = root
    depth, by_name = 0, False
    told = (schema, depth, by_name)
    steps = list(error.absolute_schema_path)
    index = 0
    while index < len(steps):
        key = steps[index]
        while key not in schema and "$ref" in schema:  # ($ref is not a step of the path)
            schema = _resolve(schema["$ref"])
            told = (schema, depth, by_name) if "errorMessage" in schema else told
        if index == len(steps) - 1:  # the failing keyword itself
            break
        if key in ("properties", "anyOf", "allOf", "oneOf", "prefixItems"):
            schema = schema[key][steps[index + 1]]
            depth += key in ("properties", "prefixItems")
            index += 2
        else:
            schema = schema[key]
            depth += key in ("items", "additionalProperties")
            by_name = by_name or key == "propertyNames"
            index += 1
        told = (schema, depth, by_name) if "errorMessage" in schema else told
    return told


def _resolve(reference: str) -> Any:
    """A reference within the schema (`#/$defs/NAME`)."""
    found: Any = SCHEMA
    for part in reference.removeprefix("#/").split("/"):
        found = found[part]
    return found


def _subject(document: Any, path: list[Any]) -> str:
    """The key, then the place inside its value: "`run` item 2 `name`"."""
    words, value = [], document
    for part in path:
        words.append(f"item {part + 1}" if isinstance(value, list) else f"`{part}`")
        value = value[part]
    return " ".join(words)


def _at(document: Any, path: list[Any]) -> Any:
    for part in path:
        document = document[part]
    return document


def _shown(example: Any) -> str:
    return example if isinstance(example, str) else json.dumps(example)


def _problem(value: Any, schema: dict[str, Any], called: str) -> str | None:
    """What is wrong with `value` as `schema` (a part of SCHEMA) describes it, or None."""
    for error in _VALIDATOR.evolve(schema=schema).iter_errors(value):
        return _message(error, value, called, root=schema)
    return None


# --- what a schema cannot express, and the values kept ---------------------------------------
# Each function takes a value the schema accepted, returns the value to keep, or raises
# ValueError("must be ..., not ...; what to do") for what only Python can tell.


def _patterns(value: list[str]) -> tuple[str, ...]:
    try:  # gitignore syntax is pathspec's to tell
        pathspec.GitIgnoreSpec.from_lines(value)
    except ValueError as exc:
        raise ValueError(f"has a pattern that is not gitignore style ({exc}); fix it") from None
    return tuple(value)


_PROGRAM_NAME = SCHEMA["$defs"]["program_name"]
# the keys of a program's mapping; a mapping with one other key is `name: command`
_PROGRAM_KEYS = tuple(
    next(form for form in SCHEMA["$defs"]["program"]["anyOf"] if "required" in form)["properties"]
)
_NAMED_COMMAND = re.compile(r"([^\s:]+):\s+(\S.*)", re.DOTALL)


def _programs(value: str | list[Any] | None) -> tuple[Program, ...]:
    """`run`: one command, or a list of programs."""
    if value is None:
        return ()
    programs = tuple(_program(item) for item in (value if isinstance(value, list) else [value]))
    # unique names: a comparison across the items
    names = [p.name for p in programs if p.name]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} more than once; give each program its own name")
    return programs


def _program(item: str | dict[str, Any]) -> Program:
    if isinstance(item, str):
        return Program(item)
    if len(item) == 1 and not set(item) & set(_PROGRAM_KEYS):
        ((name, command),) = item.items()  # `- train: python train.py`
        return Program(command, name)
    return Program(item["command"], item.get("name"), item.get("benchmark"))


def program_option(text: str) -> Program:
    """`--run 'train: python train.py'` or `--run 'python train.py'` (the command line's form)."""
    named = _NAMED_COMMAND.fullmatch(text.strip())
    if named and _VALIDATOR.evolve(schema=_PROGRAM_NAME).is_valid(named[1]):
        return Program(named[2], named[1])
    problem = _problem(text, SCHEMA["$defs"]["command"], "`--run`")
    if problem:
        raise ValueError(problem)
    return Program(text)


def _target(value: str) -> str:
    # Imported here: the rewrite stage may itself read the configuration.
    from pytpu.engine.rewriter.checkout import parse_target

    try:  # the known targets are the KB's
        parse_target(value)
    except ValueError as exc:
        raise ValueError(
            f"is not a valid target ({exc}); e.g. torch_xla or torch_xla==2.9"
        ) from None
    return value


def _tests(value: str) -> str:
    # inside the repository: told after normalising (`a/../../x`), and by either OS's rules
    path = posixpath.normpath(value.replace("\\", "/"))
    outside = PurePosixPath(path).is_absolute() or PureWindowsPath(value).drive
    if outside or path in (".", "..") or path.startswith("../"):
        raise ValueError(
            f"must be a folder inside the repository, relative to its root, not {value!r}; "
            "e.g. tests/pytpu"
        )
    return path


def _files(value: list[str]) -> tuple[str, ...]:
    for name in value:  # inside the repository, after normalising
        path = posixpath.normpath(name.replace("\\", "/"))
        if PurePosixPath(path).is_absolute() or path == ".." or path.startswith("../"):
            raise ValueError(f"names {name!r}, outside the repository; give a path inside it")
    return tuple(value)


def _commands(value: str | list[str]) -> tuple[str, ...]:
    return tuple(value if isinstance(value, list) else [value])


def _same(value: Any) -> Any:
    return value


# key -> the value kept, after the checks the schema cannot make
_VALUES: dict[str, Callable[[Any], Any]] = {
    "include": _patterns,
    "exclude": _patterns,
    "run": _programs,
    "benchmark": _same,
    "tolerance": float,
    "baseline_device": _same,
    "target": _target,
    "tests": _tests,
    "timeout": float,
    "benchmark_rounds": int,
    "virtual_devices": int,
    "data_parallel": _same,
    "precision": _same,
    "batch": _same,
    "requirements": _files,
    "setup": _commands,
}
