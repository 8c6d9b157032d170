"""The rewrite stage over a checkout: every file through the engine, with its guarantees.

- A file is written only if its new text parses; otherwise it stays as it was and the error
  names the rules and lines involved.
- A file that cannot be read or parsed is skipped with a clear error; the others go on.
- Writes are atomic, and a second run over the output changes nothing.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import libcst as cst
from packaging.version import Version

from pytpu.engine.rewriter import checkout_facts, index_cache
from pytpu.engine.rewriter import kb as kb_module
from pytpu.engine.rewriter.findings import KINDS
from pytpu.engine.rewriter.formatting import black_mode_for
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.single_file import (  # noqa: F401 (this module's API since issue 12)
    Changed,
    Failed,
    FileResult,
    MigratedSource,
    OutputDoesNotParse,
    engine_failure,
    migrate_source,
    migrate_text,
)
from pytpu.engine.rewriter.sources import SourceError, discover, read_source, write_atomically
from pytpu.engine.rewriter.vocabulary.contract import NO_CHECKOUT_FACTS, CheckoutFacts


@dataclass
class RunResult:
    root: str
    target: str
    files: list[FileResult]
    skipped: list[tuple[str, str]]
    parsed: int = 0

    @property
    def changed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "changed"]

    @property
    def errors(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "error"]

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for result in self.files:
            for kind, n in result.counts().items():
                out[kind] += n
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "target": self.target,
            "totals": self.totals(),
            "files_seen": len(self.files),
            "files_changed": len(self.changed),
            "files_with_errors": len(self.errors),
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "files": [
                f.as_dict() for f in self.files if f.findings or f.error or f.status == "changed"
            ],
        }


@cache
def rule_index(
    target: str = kb_module.DEFAULT_TARGET,
    version: str | None = None,
    settings: tuple[tuple[str, str], ...] = (),
) -> RuleIndex:
    """The installed KB's rules for the target and the migration's settings (pairs such as
    `("data_parallel", "spmd")`), indexed (kept in the user's cache)."""

    def build() -> RuleIndex:
        knowledge = kb_module.default()
        chosen = knowledge.select(target, Version(version) if version else None, dict(settings))
        return RuleIndex(knowledge, chosen)

    key = f"{target}=={version}" + "".join(f";{k}={v}" for k, v in sorted(settings))
    return index_cache.load_or_build(kb_module.kb_dir(), key, build)


def parse_target(text: str) -> tuple[str, str | None]:
    """`torch_xla` or `torch_xla==2.8` -> (target, version)."""
    name, _, version = text.partition("==")
    name = name.strip().replace("-", "_")
    if name not in kb_module.TARGET_VERSIONS:
        known = ", ".join(kb_module.TARGET_VERSIONS)
        raise ValueError(f"unknown target {text!r}; known targets: {known}")
    if version:
        Version(version)
    return name, version or None


_PYTHON2_SIGNS = (
    "Missing parentheses in call to 'print'",
    "Missing parentheses in call to 'exec'",
    "multiple exception types must be parenthesized",
    "invalid hexadecimal literal",
    "leading zeros in decimal integer literals",
)


def _parse_error(exc: cst.ParserSyntaxError, text: str) -> str:
    """Where and why a file is not Python 3, in the interpreter's words when it has them
    (libcst's line can be the one after the error, and its message lists expected tokens)."""
    line, message = exc.raw_line, exc.message.splitlines()[0]
    try:
        ast.parse(text)
    except SyntaxError as error:
        line, message = error.lineno or line, error.msg
    hint = " (Python 2 syntax?)" if any(sign in message for sign in _PYTHON2_SIGNS) else ""
    return (
        f"line {line}: not valid Python 3{hint}: {message}; "
        "the file was skipped. Fix its syntax or exclude it"
    )


def rewrite_file(
    path: Path,
    root: Path,
    compiled: RuleIndex,
    write: bool,
    facts: CheckoutFacts = NO_CHECKOUT_FACTS,
) -> tuple[FileResult, bool]:
    """Migrate one file (`facts`: what the checkout's other files say about it). Returns its
    result and whether it was parsed (for the benchmark)."""
    rel = path.relative_to(root).as_posix() if root in path.parents else path.name
    if path.suffix == ".ipynb":
        from pytpu.engine.rewriter import notebooks

        return notebooks.rewrite_notebook(path, root, rel, compiled, write)
    result = FileResult(path=rel)
    try:
        source = read_source(path, root)
    except SourceError as exc:
        result.outcome = Failed(f"{rel}: {exc}")
        return result, False
    parsed = compiled.may_match(source.text)
    if not parsed:
        return result, False  # no rule can apply: the file is not even parsed
    mode = black_mode_for(path.parent.resolve(), root.resolve())
    try:
        migrated = migrate_source(source.text, compiled, rel, black_mode=mode, checkout=facts)
    except cst.ParserSyntaxError as exc:
        result.outcome = Failed(f"{rel}: {_parse_error(exc, source.text)}")
        return result, parsed
    except OutputDoesNotParse as exc:
        result.outcome = Failed(str(exc))
        return result, parsed
    except Exception as exc:  # an engine bug must cost one file, not the run
        result.outcome = Failed(engine_failure(rel, exc, "file"))
        return result, parsed
    result.findings = migrated.findings
    if migrated.text != source.text:
        result.outcome = Changed(source.text, migrated.text, migrated.comments)
        if write:
            write_atomically(path, migrated.text, source.encoding)
    return result, parsed


def run(
    root: Path,
    target: str = "torch_xla",
    write: bool = False,
    progress: Callable[[Iterable[Path], int], Iterable[Path]] | None = None,
    select: Callable[[str], bool] | None = None,
    settings: Mapping[str, str] | None = None,
) -> RunResult:
    """Rewrite (or, without `write`, only plan) every Python file and notebook under `root`;
    `select` (given the path relative to `root`) leaves out what the configuration excludes;
    `settings` are the migration settings that choose rules (`{"data_parallel": "spmd"}`)."""
    name, version = parse_target(target)
    compiled = rule_index(name, version, tuple(sorted((settings or {}).items())))
    root = root.absolute()
    files, problems = discover(root, notebooks=True)
    base = root if root.is_dir() else root.parent
    if select is not None:
        files = [p for p in files if select(_rel(p, base))]
    run_result = RunResult(
        root=str(root), target=target, files=[], skipped=[(_rel(p, base), r) for p, r in problems]
    )
    for _p, reason in problems:
        run_result.files.append(FileResult(_rel(_p, base), Failed(f"{_rel(_p, base)}: {reason}")))
    neighbours = checkout_facts.gather(
        (p for p in files if p.suffix == ".py"), base, _text_or_none(base)
    )
    iterable: Iterable[Path] = progress(files, len(files)) if progress else files
    with _few_collections():
        for path in iterable:
            facts = neighbours.get(path, NO_CHECKOUT_FACTS)
            result, parsed = rewrite_file(path, base, compiled, write, facts)
            run_result.parsed += parsed
            run_result.files.append(result)
    return run_result


def _text_or_none(root: Path) -> Callable[[Path], str | None]:
    def read(path: Path) -> str | None:
        try:
            return read_source(path, root).text
        except SourceError:
            return None  # (the file's own run reports it)

    return read


@contextmanager
def _few_collections() -> Iterator[None]:
    """The cyclic garbage collector, seldom: a syntax tree has no cycles and goes with its last
    reference, but at the default thresholds every few hundred of its nodes start a collection,
    and each older one walks the KB and the growing results again (a sixth of the run's time;
    mypy raises the thresholds for the same reason)."""
    thresholds = gc.get_threshold()
    gc.freeze()  # what is alive now (the KB, the index) stays alive: never walk it again
    gc.set_threshold(100_000, 50, 50)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _rel(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)
