"""The rewrite of one Python source text, the core every file format goes through: the engine's
pass, the check that its output parses, black where the repository uses it, and the comments for
reviewers kept at their lines. Other formats (a notebook's cells, `notebooks.py`) are adapters
over it, as black's `format_ipynb_string` is over `format_file_contents`; the tree walk with its
guarantees is `checkout.py`."""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import libcst as cst

from pytpu.engine.rewriter.findings import KINDS, Finding, WrittenComment
from pytpu.engine.rewriter.formatting import format_changed
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.transform import preferred_quote, transform_module
from pytpu.engine.rewriter.vocabulary.contract import NO_CHECKOUT_FACTS, CheckoutFacts


class FormatDetails(Protocol):
    """What an adapter for another file format adds to a file's result (a notebook's cells)."""

    def diff(self, path: str) -> str: ...

    def label(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Unchanged:
    """No rule changed the file (or none could apply)."""

    status: ClassVar[str] = "unchanged"


@dataclass(frozen=True)
class Changed:
    """The file's text before and after, and the comments written into `after` for reviewers."""

    before: str = field(repr=False)
    after: str = field(repr=False)
    comments: list[WrittenComment] = field(default_factory=list)
    status: ClassVar[str] = "changed"


@dataclass(frozen=True)
class Failed:
    """The file was left as it is: `error` names it, says what went wrong and what to do."""

    error: str
    status: ClassVar[str] = "error"


Outcome = Unchanged | Changed | Failed


@dataclass
class FileResult:
    """One file's migration: its outcome, what was found, and a notebook's cells."""

    path: str
    outcome: Outcome = field(default_factory=Unchanged)
    findings: list[Finding] = field(default_factory=list)
    notebook: FormatDetails | None = field(default=None, repr=False)  # for a .ipynb file

    @property
    def status(self) -> str:
        """unchanged | changed | error"""
        return self.outcome.status

    @property
    def error(self) -> str | None:
        return self.outcome.error if isinstance(self.outcome, Failed) else None

    @property
    def before(self) -> str | None:
        return self.outcome.before if isinstance(self.outcome, Changed) else None

    @property
    def after(self) -> str | None:
        return self.outcome.after if isinstance(self.outcome, Changed) else None

    @property
    def comments(self) -> list[WrittenComment]:
        return self.outcome.comments if isinstance(self.outcome, Changed) else []

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


class OutputDoesNotParse(Exception):
    pass


@dataclass
class MigratedSource:
    text: str
    findings: list[Finding]
    comments: list[WrittenComment]  # the comments written for reviewers, at their lines in text


def migrate_source(
    text: str,
    index: RuleIndex,
    path: str = "<string>",
    black_mode: Any = None,
    checkout: CheckoutFacts = NO_CHECKOUT_FACTS,
) -> MigratedSource:
    """New source for `text` (`checkout`: what the checkout's other files say about it), what
    was found and the comments written. Raises
    libcst.ParserSyntaxError on bad input and OutputDoesNotParse if a rule produced code that
    does not parse."""
    if not index.may_match(text):
        return MigratedSource(text, [], [])
    module = cst.parse_module(text)
    result = transform_module(module, index, preferred_quote(text), text, checkout)
    new = result.code
    if new == text:
        return MigratedSource(text, result.findings, [])
    new = _keep_final_newline(text, new)
    _check_parses(new, text, result.findings, path)
    comments = result.comments
    if black_mode is not None:
        formatted = format_changed(text, new, black_mode)
        _check_parses(formatted, text, result.findings, path)
        comments = follow_lines(new, formatted, comments)
        new = formatted
    return MigratedSource(new, result.findings, comments)


def migrate_text(
    text: str, index: RuleIndex, path: str = "<string>", black_mode: Any = None
) -> tuple[str, list[Finding]]:
    """`migrate_source` without the comments' record: the new text and the findings."""
    migrated = migrate_source(text, index, path, black_mode)
    return migrated.text, migrated.findings


def follow_lines(before: str, after: str, comments: list[WrittenComment]) -> list[WrittenComment]:
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


def engine_failure(rel: str, exc: Exception, what: str) -> str:
    """The error of a file (`what`: file, notebook) the engine failed on; it costs that one."""
    if isinstance(exc, RecursionError):
        return f"{rel}: nested too deeply for the parser; skipped"
    return (
        f"{rel}: internal error while migrating ({type(exc).__name__}: {exc}); "
        f"the {what} was left unchanged. Please report this with the {what}."
    )
