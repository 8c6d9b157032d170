"""What the engine found at one site, and the comment it leaves there for a reviewer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

from pytpu.engine.rewriter.kb import Rule, RuleCase

# Finding kinds, as the analyze table counts them (HIPIFY's converted / unconverted).
CONVERTED, NOTED, FLAGGED, UNKNOWN = "converted", "converted with a note", "flagged", "unknown"
KINDS = (CONVERTED, NOTED, FLAGGED, UNKNOWN)


@dataclass
class Finding:
    rule: Rule
    case: RuleCase
    kind: str
    snippet: str
    line: int = 0
    column: int = 0
    node: cst.CSTNode | None = field(default=None, repr=False)

    @property
    def code(self) -> str:
        return self.rule.diagnostic.code

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.id,
            "code": self.code,
            "kind": self.kind,
            "applicability": self.case.applicability,
            "line": self.line,
            "column": self.column,
            "snippet": self.snippet,
            "message": self.rule.diagnostic.message,
        }


@dataclass(frozen=True)
class WrittenComment:
    """A comment the rewriter wrote for a reviewer, and its line in the new source."""

    line: int
    code: str  # the finding's PYTPUnnn
    text: str
    needs_review: bool  # a `# PYTPUnnn:` comment (a note reads `# PYTPUnnn note:`)


def comment_text(finding: Finding) -> str | None:
    """The comment a finding puts above its statement (none for plain safe changes)."""
    code, diag = finding.code, finding.rule.diagnostic
    if finding.kind in (FLAGGED, UNKNOWN) or finding.case.applicability == "unsafe":
        message = diag.message.replace("{name}", finding.snippet)
        return f"# {code}: {message} (see: pytpu kb show {code})"
    if finding.kind == NOTED and finding.case.note:
        return f"# {code} note: {finding.case.note}"
    return None


def short_code(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Located(Exception):
    """Raised to stop code generation once every wanted node has been seen."""


class _LineTracker(CodegenState):
    """Code generation that notes where the wanted nodes start (line, 1-based column). Tokens
    are kept as usual and counted only when a wanted node starts: cheaper than counting each.
    (libcst's PositionProvider records every node.) With `stop`, it ends once all are seen."""

    def __init__(self, module: cst.Module, wanted: dict[int, cst.CSTNode], stop: bool):
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.wanted = wanted
        self.stop = stop
        self.found: dict[int, tuple[int, int]] = {}
        self.line, self.column = 1, 0
        self.counted = 0  # tokens already counted into line and column

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) not in self.wanted:
            return
        text = "".join(self.tokens[self.counted :])
        self.counted = len(self.tokens)
        newlines = text.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(text) - text.rfind("\n") - 1
        else:
            self.column += len(text)
        self.found[id(node)] = (self.line, self.column + 1)
        if self.stop and len(self.found) == len(self.wanted):
            raise _Located


def code_with_comment_lines(
    module: cst.Module, comments: dict[int, tuple[cst.EmptyLine, Finding]]
) -> tuple[str, list[WrittenComment]]:
    """The module's source, and the line each comment the rewriter wrote (an EmptyLine node,
    by its id) ended up on."""
    if not comments:
        return module.code, []
    tracker = _LineTracker(module, {key: line for key, (line, _) in comments.items()}, False)
    module._codegen(tracker)
    written = []
    for key, (line, finding) in comments.items():
        if key in tracker.found and line.comment is not None:
            text = line.comment.value
            written.append(
                WrittenComment(
                    line=tracker.found[key][0],
                    code=finding.code,
                    text=text,
                    needs_review=not text.startswith(f"# {finding.code} note:"),
                )
            )
    return "".join(tracker.tokens), sorted(written, key=lambda c: c.line)


def _anchor(node: cst.CSTNode) -> cst.CSTNode:
    """The node whose start is the site's line (statements start with their comments)."""
    if isinstance(node, cst.With):
        return node.items[0].item
    if isinstance(node, cst.Decorator):
        return node.decorator
    if isinstance(node, (cst.If, cst.While)):
        return node.test
    return node


def locate(module: cst.Module, findings: list[Finding]) -> None:
    """Fill in each finding's line and column (1-based) in the original `module`."""
    anchors = {id(f): _anchor(f.node) for f in findings if f.node is not None}
    if not anchors:
        return
    tracker = _LineTracker(module, {id(a): a for a in anchors.values()}, stop=True)
    try:
        module._codegen(tracker)
    except _Located:
        pass
    for finding in findings:
        anchor = anchors.get(id(finding))
        if anchor is not None and id(anchor) in tracker.found:
            finding.line, finding.column = tracker.found[id(anchor)]
        finding.node = None
