"""Code generation that notes where nodes start, and reuses what did not change.

A file is generated twice around a rewrite: the original, for the line and column of each
finding, and the new module, for its text and the lines of the comments written. The first pass
keeps the text of each top-level statement; the second reuses it for every statement the rewrite
left as it was (the same node), and only generates the statements that changed.
(libcst's PositionProvider would record every node of the module instead.)
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

# the text of an original top-level statement, by the id of its node
StatementTexts = dict[int, str]


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

    def add_text(self, text: str) -> None:
        """A statement's text, its final newline a token of its own (the module's end may drop
        it: see `pop_trailing_newline`)."""
        newline = self.default_newline
        if text.endswith(newline):
            self.tokens.extend((text[: -len(newline)], newline))
        else:
            self.tokens.append(text)


_NOTHING = nullcontext()


def positions(
    module: cst.Module, wanted: Iterable[int]
) -> tuple[dict[int, tuple[int, int]], StatementTexts]:
    """Where the wanted nodes (by id) start in `module`, and each top-level statement's text."""
    tracker = _Tracker(module, wanted)
    texts: StatementTexts = {}
    _emit(module, tracker, keep=texts)
    return tracker.found, texts


def generate(
    module: cst.Module, wanted: Iterable[int], reuse: StatementTexts
) -> tuple[str, dict[int, tuple[int, int]]]:
    """`module`'s source (as `module.code`), reusing the kept text of unchanged top-level
    statements, and where the wanted nodes start in it."""
    tracker = _Tracker(module, wanted)
    _emit(module, tracker, reuse=reuse)
    return "".join(tracker.tokens), tracker.found


def _emit(
    module: cst.Module,
    tracker: _Tracker,
    reuse: StatementTexts | None = None,
    keep: StatementTexts | None = None,
) -> None:
    """libcst's Module._codegen_impl, statement by statement: a statement whose text `reuse`
    has is not generated again; `keep` gets the text of each statement generated."""
    for line in module.header:
        line._codegen(tracker)
    for statement in module.body:
        text = reuse.get(id(statement)) if reuse else None
        if text is not None:
            tracker.add_text(text)
            continue
        start = len(tracker.tokens)
        statement._codegen(tracker)
        if keep is not None:
            keep[id(statement)] = "".join(tracker.tokens[start:])
    for line in module.footer:
        line._codegen(tracker)
    if module.has_trailing_newline:
        if not tracker.tokens:
            tracker.add_token(tracker.default_newline)
    else:
        tracker.pop_trailing_newline()
