"""The rewrite stage over a checkout: every file through the engine, with its guarantees.

- A file is written only if its new text parses; otherwise it stays as it was and the error
  names the rules and lines involved.
- A file that cannot be read or parsed is skipped with a clear error; the others go on.
- Writes are atomic, and a second run over the output changes nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import gc
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst
from packaging.version import Version

from pytpu.engine.rewriter import index_cache
from pytpu.engine.rewriter import kb as kb_module
from pytpu.engine.rewriter.findings import KINDS, Finding, WrittenComment
from pytpu.engine.rewriter.formatting import black_mode_for, format_changed
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.sources import SourceError, discover, read_source, write_atomically
from pytpu.engine.rewriter.transform import preferred_quote, transform_module

if TYPE_CHECKING:  # (notebooks.py imports this module; it is loaded for a notebook only)
    from pytpu.engine.rewriter.notebooks import NotebookInfo


@dataclass
class FileResult:
    path: str
    status: str = "unchanged"  # unchanged | changed | error
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    before: str | None = field(default=None, repr=False)
    after: str | None = field(default=None, repr=False)
    comments: list[WrittenComment] = field(default_factory=list)  # written into `after`
    notebook: NotebookInfo | None = field(default=None, repr=False)  # for a .ipynb file

    def label(self) -> str:
        """The file, and for a notebook the cells changed: `nb.ipynb (cells 2, 5)`."""
        if self.notebook is None or not self.notebook.cells:
            return self.path
        return f"{self.path} ({self.notebook.label()})"

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for finding in self.findings:
            out[finding.kind] += 1
        return out

    def diff(self) -> str:
        if self.before is None or self.after is None or self.before == self.after:
            return ""
        if self.notebook is not None:  # a diff of the JSON would bury the code: one per cell
            return self.notebook.diff(self.path)
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=f"a/{self.path}",
                tofile=f"b/{self.path}",
            )
        )

    def as_dict(self) -> dict[str, Any]:
        notebook = {} if self.notebook is None else self.notebook.as_dict()
        return {
            "path": self.path,
            "status": self.status,
            "error": self.error,
            "counts": self.counts(),
            "findings": [f.as_dict() for f in self.findings],
            **notebook,
        }


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
def rule_index(target: str = kb_module.DEFAULT_TARGET, version: str | None = None) -> RuleIndex:
    """The installed KB's rules for the target, indexed (kept in the user's cache)."""

    def build() -> RuleIndex:
        knowledge = kb_module.default()
        return RuleIndex(knowledge, knowledge.select(target, Version(version) if version else None))

    return index_cache.load_or_build(kb_module.kb_dir(), f"{target}=={version}", build)


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


class OutputDoesNotParse(Exception):
    pass


@dataclass
class MigratedSource:
    text: str
    findings: list[Finding]
    comments: list[WrittenComment]  # the comments written for reviewers, at their lines in text


def migrate_source(
    text: str, index: RuleIndex, path: str = "<string>", black_mode: Any = None
) -> MigratedSource:
    """New source for `text`, what was found and the comments written. Raises
    libcst.ParserSyntaxError on bad input and OutputDoesNotParse if a rule produced code that
    does not parse."""
    if not index.may_match(text):
        return MigratedSource(text, [], [])
    module = cst.parse_module(text)
    result = transform_module(module, index, preferred_quote(text), text)
    new = result.code
    if new == text:
        return MigratedSource(text, result.findings, [])
    new = _keep_final_newline(text, new)
    _check_parses(new, text, result.findings, path)
    comments = result.comments
    if black_mode is not None:
        formatted = format_changed(text, new, black_mode)
        _check_parses(formatted, text, result.findings, path)
        comments = _follow_lines(new, formatted, comments)
        new = formatted
    return MigratedSource(new, result.findings, comments)


def migrate_text(
    text: str, index: RuleIndex, path: str = "<string>", black_mode: Any = None
) -> tuple[str, list[Finding]]:
    """`migrate_source` without the comments' record: the new text and the findings."""
    migrated = migrate_source(text, index, path, black_mode)
    return migrated.text, migrated.findings


def _follow_lines(before: str, after: str, comments: list[WrittenComment]) -> list[WrittenComment]:
    """The comments at their lines once black reformatted the lines around them (a comment
    line itself is never changed; it moves with the lines before it)."""
    if before == after:
        return comments
    old, new = before.splitlines(), after.splitlines()
    blocks = difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks()
    moved = []
    for comment in comments:
        index = comment.line - 1
        line = next(
            (b + index - a + 1 for a, b, size in blocks if a <= index < a + size), comment.line
        )
        moved.append(dataclasses.replace(comment, line=line))
    return moved


def _keep_final_newline(old: str, new: str) -> str:
    """libcst drops the final newline of a file with CR-only line endings; put it back."""
    for ending in ("\r\n", "\r", "\n"):
        if old.endswith(ending):
            return new if new.endswith(ending) else new + ending
    return new


def _check_parses(new: str, old: str, findings: list[Finding], path: str) -> None:
    """The interpreter's own compiler judges the output (it parses faster than `ast.parse`, which
    builds Python objects, and also catches what only compiling finds, such as a `__future__`
    import moved down); libcst's parser, where the interpreter here could not compile the original
    either (a newer Python's syntax)."""
    try:
        try:
            _compile(new)
        except SyntaxError:
            try:
                _compile(old)
            except SyntaxError:
                cst.parse_module(new)
                return
            raise
    except (cst.ParserSyntaxError, SyntaxError) as exc:
        line = getattr(exc, "raw_line", None) or getattr(exc, "lineno", None) or "?"
        involved = ", ".join(
            sorted({f"{f.rule.id} (line {f.line})" for f in findings if f.case.changes_code})
        )
        raise OutputDoesNotParse(
            f"{path}: the rewrite by {involved or 'the engine'} does not parse at line {line}; "
            "the file was left unchanged. Please report this with the file."
        ) from None


def _compile(text: str) -> None:
    """Compile `text` to bytecode; a null byte counts as a syntax error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like are the user's own
        try:
            compile(text, "<rewritten>", "exec", dont_inherit=True)
        except ValueError as exc:  # (null bytes, before Python 3.12)
            raise SyntaxError(str(exc)) from None


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


def engine_failure(rel: str, exc: Exception, what: str) -> str:
    """The error of a file (`what`: file, notebook) the engine failed on; it costs that one."""
    if isinstance(exc, RecursionError):
        return f"{rel}: nested too deeply for the parser; skipped"
    return (
        f"{rel}: internal error while migrating ({type(exc).__name__}: {exc}); "
        f"the {what} was left unchanged. Please report this with the {what}."
    )


def rewrite_file(
    path: Path, root: Path, compiled: RuleIndex, write: bool
) -> tuple[FileResult, bool]:
    """Migrate one file. Returns its result and whether it was parsed (for the benchmark)."""
    rel = path.relative_to(root).as_posix() if root in path.parents else path.name
    if path.suffix == ".ipynb":
        from pytpu.engine.rewriter import notebooks

        return notebooks.rewrite_notebook(path, root, rel, compiled, write)
    result = FileResult(path=rel)
    try:
        source = read_source(path, root)
    except SourceError as exc:
        result.status, result.error = "error", f"{rel}: {exc}"
        return result, False
    parsed = compiled.may_match(source.text)
    if not parsed:
        return result, False  # no rule can apply: the file is not even parsed
    mode = black_mode_for(path.parent.resolve(), root.resolve())
    try:
        migrated = migrate_source(source.text, compiled, rel, black_mode=mode)
    except cst.ParserSyntaxError as exc:
        result.status, result.error = "error", f"{rel}: {_parse_error(exc, source.text)}"
        return result, parsed
    except OutputDoesNotParse as exc:
        result.status, result.error = "error", str(exc)
        return result, parsed
    except Exception as exc:  # an engine bug must cost one file, not the run
        result.status, result.error = "error", engine_failure(rel, exc, "file")
        return result, parsed
    result.findings = migrated.findings
    if migrated.text != source.text:
        result.status, result.before, result.after = "changed", source.text, migrated.text
        result.comments = migrated.comments
        if write:
            write_atomically(path, migrated.text, source.encoding)
    return result, parsed


def run(
    root: Path,
    target: str = "torch_xla",
    write: bool = False,
    progress: Callable[[Iterable[Path], int], Iterable[Path]] | None = None,
    select: Callable[[str], bool] | None = None,
) -> RunResult:
    """Rewrite (or, without `write`, only plan) every Python file and notebook under `root`;
    `select` (given the path relative to `root`) leaves out what the configuration excludes."""
    name, version = parse_target(target)
    compiled = rule_index(name, version)
    root = root.absolute()
    files, problems = discover(root, notebooks=True)
    base = root if root.is_dir() else root.parent
    if select is not None:
        files = [p for p in files if select(_rel(p, base))]
    run_result = RunResult(
        root=str(root), target=target, files=[], skipped=[(_rel(p, base), r) for p, r in problems]
    )
    for _p, reason in problems:
        run_result.files.append(
            FileResult(path=_rel(_p, base), status="error", error=f"{_rel(_p, base)}: {reason}")
        )
    iterable: Iterable[Path] = progress(files, len(files)) if progress else files
    with _few_collections():
        for path in iterable:
            result, parsed = rewrite_file(path, base, compiled, write)
            run_result.parsed += parsed
            run_result.files.append(result)
    return run_result


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
