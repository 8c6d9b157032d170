"""Code generation that notes where nodes start, and reuses what did not change.

A file is generated twice around a rewrite: the original, for the line and column of each
finding, and the new module, for its text and the lines of the comments written. Only the
original's top-level statements that hold a finding or that the rewrite replaced are generated;
the text of the others is cut out of the original source between them (libcst is lossless: the
source is its statements' texts end to end). The second pass reuses that text for every
statement the rewrite left as it was (the same node), and only generates the ones that changed.
(libcst's PositionProvider would record every node of the module instead.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState


class _Tracker(CodegenState):
    """Tokens are kept as usual; the text before a wanted node is counted only when it starts
    (cheaper than counting every token)."""

    def __init__(self, module: cst.Module, wanted: Iterable[int]):
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.wanted = set(wanted)
        self.found: dict[int, tuple[int, int]] = {}  # node id -> (line, 1-based column)
        self.line, self.column = 1, 0
        self.counted = 0  # tokens already counted into line and column

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.found[id(node)] = self._position()

    def record_syntactic_position(self, node: cst.CSTNode, **_: Any) -> AbstractContextManager:
        # libcst's is a generator context manager entered for most nodes, for the position
        # provider only: a fifth of code generation's time, spent on nothing here.
        return _NOTHING

    def _position(self) -> tuple[int, int]:
        text = "".join(self.tokens[self.counted :])
        self.counted = len(self.tokens)
        newlines = text.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(text) - text.rfind("\n") - 1
        else:
            self.column += len(text)
        return self.line, self.column + 1

    def start_line(self, line: int) -> None:
        """What follows starts a line of its own, `line`, whatever came before."""
        self.line, self.column, self.counted = line, 0, len(self.tokens)

    def add_text(self, text: str) -> None:
        """Statements' text, its final newline a token of its own (the module's end may drop
        it: see `pop_trailing_newline`)."""
        newline = self.default_newline
        if text.endswith(newline):
            self.tokens.extend((text[: -len(newline)], newline))
        else:
            self.tokens.append(text)


_NOTHING = nullcontext()


@dataclass
class OriginalTexts:
    """The original text of top-level statements, by node id: of one statement (`single`), or
    of a run of consecutive ones (`runs`, under the first one's id, with all their ids)."""

    single: dict[int, str] = field(default_factory=dict)
    runs: dict[int, tuple[tuple[int, ...], str]] = field(default_factory=dict)


class _Unplaced(Exception):
    """A statement's text was not where the source says (a source libcst does not give back
    as it read it): the whole module is generated instead."""


def positions(
    module: cst.Module, wanted: Iterable[int], source: str = "", focus: frozenset[int] = frozenset()
) -> tuple[dict[int, tuple[int, int]], OriginalTexts]:
    """Where the wanted nodes (by id) start in `module`, and the original statements' texts.
    With the module's `source`, only the statements in `focus` (ids) are generated; a wanted
    node outside them makes it generate the whole module."""
    wanted = set(wanted)
    # (libcst drops the last newline of a file whose lines end with CR alone)
    carriage_only = "\r" in source and module.default_newline != "\r\n"
    if source and module.has_trailing_newline and not carriage_only:
        try:
            found, texts = _positions_in(module, wanted, source, focus)
            if len(found) == len(wanted):
                return found, texts
        except _Unplaced:
            pass
    tracker = _Tracker(module, wanted)
    texts = OriginalTexts()
    _emit(module, tracker, keep=texts.single)
    return tracker.found, texts


def _positions_in(
    module: cst.Module, wanted: set[int], source: str, focus: frozenset[int]
) -> tuple[dict[int, tuple[int, int]], OriginalTexts]:
    tracker = _Tracker(module, wanted)
    for line in module.header:
        line._codegen(tracker)
    cursor = len("".join(tracker.tokens))
    footer = CodegenState(module.default_indent, module.default_newline)
    for line in module.footer:
        line._codegen(footer)
    end = len(source) - len("".join(footer.tokens))
    if not source.startswith("".join(tracker.tokens)) or end < cursor:
        raise _Unplaced
    texts = OriginalTexts()
    pending: list[cst.BaseStatement] = []  # statements since the cursor, not generated
    for statement in module.body:
        if id(statement) not in focus:
            pending.append(statement)
            continue
        start = len(tracker.tokens)
        tracker.start_line(-1)  # (corrected below, once the statement's place is known)
        first = dict.fromkeys(wanted - tracker.found.keys())
        statement._codegen(tracker)
        text = "".join(tracker.tokens[start:])
        place = source.find(text, cursor, end)
        if pending:
            if place < 0 or source.find(text, place + 1, end) >= 0:
                raise _Unplaced  # (not found, or found twice: where it is is not known)
            _run(texts, pending, source[cursor:place])
            pending = []
        elif place != cursor:
            raise _Unplaced
        line = source.count("\n", 0, place) + 1
        for node in first:
            if node in tracker.found:  # counted from line -1: move to where it really is
                found_line, column = tracker.found[node]
                tracker.found[node] = (found_line + line + 1, column)
        texts.single[id(statement)] = text
        cursor = place + len(text)
    if pending:
        _run(texts, pending, source[cursor:end])
    elif cursor != end:
        raise _Unplaced
    return tracker.found, texts


def _run(texts: OriginalTexts, statements: Sequence[cst.BaseStatement], text: str) -> None:
    if not text:
        raise _Unplaced
    if len(statements) == 1:
        texts.single[id(statements[0])] = text
    else:
        texts.runs[id(statements[0])] = (tuple(id(s) for s in statements), text)


def generate(
    module: cst.Module, wanted: Iterable[int], reuse: OriginalTexts
) -> tuple[str, dict[int, tuple[int, int]]]:
    """`module`'s source (as `module.code`), reusing the original text of unchanged top-level
    statements, and where the wanted nodes start in it."""
    tracker = _Tracker(module, wanted)
    _emit(module, tracker, reuse=reuse)
    return "".join(tracker.tokens), tracker.found


def _emit(
    module: cst.Module,
    tracker: _Tracker,
    reuse: OriginalTexts | None = None,
    keep: dict[int, str] | None = None,
) -> None:
    """libcst's Module._codegen_impl, statement by statement: a statement (or a run of them)
    whose text `reuse` has is not generated again; `keep` gets the text of each statement
    generated."""
    for line in module.header:
        line._codegen(tracker)
    runs = dict(reuse.runs) if reuse else {}
    body = module.body
    index = 0
    while index < len(body):
        statement = body[index]
        run = runs.pop(id(statement), None)
        if run is not None:
            ids, text = run
            if tuple(id(s) for s in body[index : index + len(ids)]) == ids:
                tracker.add_text(text)
                index += len(ids)
                continue
            index += _split_run(body, index, run, tracker, runs)
            continue
        text = reuse.single.get(id(statement)) if reuse else None
        if text is not None:
            tracker.add_text(text)
        else:
            start = len(tracker.tokens)
            statement._codegen(tracker)
            if keep is not None:
                keep[id(statement)] = "".join(tracker.tokens[start:])
        index += 1
    for line in module.footer:
        line._codegen(tracker)
    if module.has_trailing_newline:
        if not tracker.tokens:
            tracker.add_token(tracker.default_newline)
    else:
        tracker.pop_trailing_newline()


def _split_run(
    body: Sequence[cst.BaseStatement],
    index: int,
    run: tuple[tuple[int, ...], str],
    tracker: _Tracker,
    runs: dict[int, tuple[tuple[int, ...], str]],
) -> int:
    """A run the rewrite broke (a statement put between two of its statements): generate the
    part that is still in one piece here (returns how many statements); the rest keeps the
    remaining text, for later."""
    ids, text = run
    start = len(tracker.tokens)
    count = 0
    while count < len(ids) and index + count < len(body) and id(body[index + count]) == ids[count]:
        body[index + count]._codegen(tracker)
        count += 1
    if count < len(ids):
        runs[ids[count]] = (ids[count:], text[len("".join(tracker.tokens[start:])) :])
    return count
