"""What the engine found at one site, and the comment it leaves there for a reviewer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from pytpu.engine.rewriter.vocabulary.contract import Case, Rule

# Finding kinds, as the analyze table counts them (HIPIFY's converted / unconverted).
CONVERTED, NOTED, FLAGGED, UNKNOWN = "converted", "converted with a note", "flagged", "unknown"
KINDS = (CONVERTED, NOTED, FLAGGED, UNKNOWN)


@dataclass
class Finding:
    rule: Rule
    case: Case
    kind: str
    snippet: str
    line: int = 0
    column: int = 0
    node: cst.CSTNode | None = field(default=None, repr=False)
    cell: int | None = None  # in a notebook: the cell (from 1) that `line` counts in

    @property
    def code(self) -> str:
        return self.rule.diagnostic.code

    def as_dict(self) -> dict[str, Any]:
        where = {} if self.cell is None else {"cell": self.cell}
        return {
            "rule": self.rule.id,
            "code": self.code,
            "kind": self.kind,
            "applicability": self.case.applicability,
            **where,
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
    cell: int | None = None  # in a notebook: the cell (from 1) that `line` counts in


# A line holding a comment `comment_text` wrote (`# PYTPU110 note: ...`), in a file's text.
OWN_COMMENT_LINE = re.compile(r"^[ \t]*#\s*PYTPU\d+\b.*$", re.MULTILINE)


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


def written_comments(
    comments: dict[int, tuple[cst.EmptyLine, Finding]], found: dict[int, tuple[int, int]]
) -> list[WrittenComment]:
    """The comment lines the rewriter wrote (EmptyLine nodes, by id), at the lines `found`."""
    written = []
    for key, (line, finding) in comments.items():
        if key in found and line.comment is not None:
            text = line.comment.value
            written.append(
                WrittenComment(
                    line=found[key][0],
                    code=finding.code,
                    text=text,
                    needs_review=not text.startswith(f"# {finding.code} note:"),
                )
            )
    return sorted(written, key=lambda c: c.line)


def anchor(node: cst.CSTNode) -> cst.CSTNode:
    """The node whose start is a site's line (statements start with their comments)."""
    if isinstance(node, cst.With):
        return node.items[0].item
    if isinstance(node, cst.Decorator):
        return node.decorator
    if isinstance(node, (cst.If, cst.While)):
        return node.test
    return node
