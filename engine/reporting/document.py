"""The report document: what the main job did, as data (JSON), from the stages' results.

`markdown.render` turns it into the page a reviewer reads; the bot posts that page as the pull
request's body. Nothing here runs anything.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pytpu.engine.reporting import review as review_items
from pytpu.engine.rewriter import kbdocs
from pytpu.engine.rewriter.checkout import RunResult
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN

# Where the rule pages generated from the KB are published (docs/kb.md of PyTPU's repository).
DOCS_URL = "https://github.com/pytpu/pytpu/blob/main/docs/kb.md"
# `# PYTPU703: ...` (a review comment; notes read `# PYTPU703 note:` and need no review)
_REVIEW_COMMENT = re.compile(r"\s*# (PYTPU\d+): ")
# The report's three counts, as HIPIFY counts converted and unconverted: unknown sites are flagged.
COUNTED = {CONVERTED: "converted", NOTED: "noted", FLAGGED: "flagged", UNKNOWN: "flagged"}


def tool_version() -> str:
    try:
        return version("pytpu")
    except PackageNotFoundError:
        return "unknown"


def rule_link(code: str) -> str:
    return f"{DOCS_URL}#{kbdocs.anchor(code)}"


def changes(run: RunResult) -> dict[str, Any]:
    """Every change grouped by file, with its rule IDs and counts."""
    out = []
    totals = dict.fromkeys(("converted", "noted", "flagged"), 0)
    for result in sorted(run.files, key=lambda r: r.path):
        if not result.findings:
            continue
        rules: dict[str, dict[str, Any]] = {}
        for finding in result.findings:
            entry = rules.setdefault(
                finding.rule.id,
                {
                    "id": finding.rule.id,
                    "code": finding.code,
                    "converted": 0,
                    "noted": 0,
                    "flagged": 0,
                },
            )
            entry[COUNTED[finding.kind]] += 1
        counts = {key: sum(r[key] for r in rules.values()) for key in totals}
        for key, n in counts.items():
            totals[key] += n
        out.append(
            {"path": result.path, "rules": sorted(rules.values(), key=lambda r: r["id"]), **counts}
        )
    return {"files": out, "totals": totals}


def review(run: RunResult) -> list[dict[str, Any]]:
    """The items a person must look at, at the line of their `# PYTPUnnn:` comment in the
    migrated file (what the reviewer sees in the diff), else at the original line."""
    comments = _comment_lines(run)
    return [
        {
            "code": item.code,
            "rule": item.rule,
            "file": item.path,
            "line": (comments.get((item.path, item.code)) or [item.line]).pop(0),
            "message": item.message,
            "link": rule_link(item.code),
            "effort": item.effort,
        }
        for item in review_items.estimate(run).items
    ]


def _comment_lines(run: RunResult) -> dict[tuple[str, str], list[int]]:
    """(file, code) -> the lines of that code's review comments in the migrated file, in order."""
    found: dict[tuple[str, str], list[int]] = {}
    for result in run.files:
        for number, line in enumerate((result.after or "").splitlines(), start=1):
            match = _REVIEW_COMMENT.match(line)
            if match:
                found.setdefault((result.path, match.group(1)), []).append(number)
    return found


def build(
    *,
    repository: dict[str, str],
    base: dict[str, Any],
    branch: str,
    commits: list[dict[str, str]],
    target: str,
    devices: dict[str, str],
    verdict: dict[str, Any],
    parity: dict[str, Any],
    benchmark: dict[str, Any],
    run: RunResult,
    testgen: dict[str, Any],
    reproduce: list[str],
    timings: dict[str, float],
    problems: list[str],
) -> dict[str, Any]:
    return {
        "version": 1,
        "tool": {"name": "PyTPU", "version": tool_version()},
        "repository": repository,
        "base": base,
        "branch": branch,
        "commits": commits,
        "target": target,
        "devices": devices,
        "verdict": {**verdict, "speedup": benchmark.get("speedup")},
        "parity": parity,
        "benchmark": benchmark,
        "changes": changes(run),
        "review": review(run),
        "tests_generated": {
            "tested": testgen.get("tested", []),
            "untested": testgen.get("untested", []),
        },
        "reproduce": reproduce,
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "problems": problems,
    }
