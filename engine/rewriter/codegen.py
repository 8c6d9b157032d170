"""Code generation that notes where nodes start, and reuses what did not change.

A file is generated twice around a rewrite: the original, for the line and column of each
finding, and the new module, for its text and the lines of the comments written. The first pass
keeps the text of each top-level statement; the second reuses it for every statement the rewrite
left as it was (the same node), and only generates the statements that changed.
(libcst's PositionProvider would record every node of the module instead.)
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst._nodes.internal import CodegenState

# the text of an original top-level statement, by the id of its node
StatementTexts = dict[int, str]


class _Tracker(CodegenState):
    """Tokens are kept as usual; the text before a wanted node is counted only when it starts
    (cheaper than counting every token). The text of each top-level statement is kept too."""

    def __init__(self, module: cst.Module, wanted: Iterable[int], keep_statements: bool):
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.wanted = set(wanted)
        self.found: dict[int, tuple[int, int]] = {}  # node id -> (line, 1-based column)
        self.line, self.column = 1, 0
        self.counted = 0  # tokens already counted into line and column
        self.statements = {id(s) for s in module.body} if keep_statements else set()
        self.texts: StatementTexts = {}
        self._starts: dict[int, int] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key in self.statements:
            self._starts[key] = len(self.tokens)
        if key in self.wanted:
            self.found[key] = self._position()

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop(id(node), None)
        if start is not None:
            self.texts[id(node)] = "".join(self.tokens[start:])

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


def positions(
    module: cst.Module, wanted: Iterable[int]
) -> tuple[dict[int, tuple[int, int]], StatementTexts]:
    """Where the wanted nodes (by id) start in `module`, and each top-level statement's text."""
    tracker = _Tracker(module, wanted, keep_statements=True)
    module._codegen(tracker)
    return tracker.found, tracker.texts


def generate(
    module: cst.Module, wanted: Iterable[int], reuse: StatementTexts
) -> tuple[str, dict[int, tuple[int, int]]]:
    """`module`'s source (as `module.code`), reusing the kept text of unchanged top-level
    statements, and where the wanted nodes start in it."""
    tracker = _Tracker(module, wanted, keep_statements=False)
    # (libcst's Module._codegen_impl, with the reuse)
    for line in module.header:
        line._codegen(tracker)
    for statement in module.body:
        text = reuse.get(id(statement))
        if text is None:
            statement._codegen(tracker)
        else:
            tracker.add_text(text)
    for line in module.footer:
        line._codegen(tracker)
    if module.has_trailing_newline:
        if not tracker.tokens:
            tracker.add_token(tracker.default_newline)
    else:
        tracker.pop_trailing_newline()
    return "".join(tracker.tokens), tracker.found
