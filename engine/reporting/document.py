"""The report document: what the main job did, as data (JSON), from the stages' typed results
(`stages.Stages`); the only place that turns them into the report's dictionary.

`markdown.render` turns it into the page a reviewer reads; the bot posts that page as the pull
request's body. Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pytpu.engine.reporting import review as review_items
from pytpu.engine.rewriter import kbdocs
from pytpu.engine.rewriter.checkout import RunResult
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN
from pytpu.engine.stages import BenchmarkRun, BenchmarkRuns, Stages
from pytpu.engine.testgen import ProgramsResult, accelerator

# Where the rule pages generated from the KB are published (docs/kb.md of PyTPU's repository).
DOCS_URL = "https://github.com/pytpu/pytpu/blob/main/docs/kb.md"
# The report's three counts, as HIPIFY counts converted and unconverted: unknown sites are flagged.
COUNTED = {CONVERTED: "converted", NOTED: "noted", FLAGGED: "flagged", UNKNOWN: "flagged"}


def tool_version() -> str:
    try:
        return version("pytpu")
    except PackageNotFoundError:
        return "unknown"


def target_reason(settings: Any) -> str:
    """Why the migration goes to its target: the settings say so, or PyTPU's default."""
    if "target" in settings.given:
        return f"set by `target` in {settings.source}"
    if settings.target_source:
        return f"set by {settings.target_source} (the Action's `target` input)"
    return "PyTPU's default target, which `target` in its settings changes"


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
    migrated file (what the reviewer sees in the diff), else at the original line; in a
    notebook, with the cell that line counts in."""
    comments = _comment_lines(run)
    out = []
    for item in review_items.estimate(run).items:
        cell, line = (comments.get((item.path, item.code)) or [(item.cell, item.line)]).pop(0)
        out.append(
            {
                "code": item.code,
                "rule": item.rule,
                "file": item.path,
                **({} if cell is None else {"cell": cell}),
                "line": line,
                "message": item.message,
                "link": rule_link(item.code),
                "effort": item.effort,
            }
        )
    return out


def _comment_lines(run: RunResult) -> dict[tuple[str, str], list[tuple[int | None, int]]]:
    """(file, code) -> the (cell, line) of that code's review comments in the migrated file, in
    order, as the rewriter recorded them (the cell is None but in a notebook)."""
    found: dict[tuple[str, str], list[tuple[int | None, int]]] = {}
    for result in run.files:
        for comment in result.comments:
            if comment.needs_review:
                where = (comment.cell, comment.line)
                found.setdefault((result.path, comment.code), []).append(where)
    return found


def nothing_on_xla(section: dict[str, Any]) -> bool:
    """The XLA side of a benchmark section ran its steps but compiled no graph: the program placed
    nothing on the device, so both sides timed the host."""
    target = section["target"]
    return bool(
        target
        and target["device"] == "xla"
        and target["steps_ran"]
        and not target["compile"]["graphs"]
    )


def benchmark(run: BenchmarkRun) -> dict[str, Any]:
    """A program's benchmark section with the speedup the verdict counts, and whether nothing
    ran on XLA."""
    return {
        **run.section,
        "program": run.program,
        "speedup": run.speedup,
        "nothing_on_xla": run.nothing_on_xla,
        "on_stand_in": run.on_stand_in,
    }


def tests_generated(generated: ProgramsResult) -> dict[str, list[dict[str, Any]]]:
    """The units that have tests, and those without one and why, with the program of each."""
    units = generated.as_dict()
    return {"tested": units["tested"], "untested": units["untested"]}


def programs(generated: ProgramsResult, benchmarks: BenchmarkRuns) -> list[dict[str, Any]]:
    """Each program: how it was found, whether it was recorded (or why not), and whether its
    training step was timed (or why not)."""
    timed = {run.program for run in benchmarks.runs if not run.section.get("not_run")}
    not_timed = dict(benchmarks.not_run)
    rows = []
    for p in generated.programs:
        status = "recorded" if p.generated else ("failed" if p.tried else "not tried")
        rows.append(
            {
                "name": p.name,
                "command": p.command,
                "origin": p.origin,
                "status": status,
                "error": p.error,
                "tests": sum(len(t) for _, _, t in p.generated.tested) if p.generated else 0,
                "benchmarked": p.name in timed,
                "not_benchmarked": not_timed.get(p.name),
                "on_xla": accelerator.section(p.generated.on_cpu, p.generated.on_xla)
                if p.generated
                else None,
            }
        )
    return rows


def parity_by_program(section: dict[str, Any], generated: ProgramsResult) -> dict[str, Any]:
    """The parity section, each generated test with the program whose suite holds it."""
    folders = {generated.suite_of(p.name): p.name for p in generated.recorded}

    def program(test_id: str) -> str | None:
        return next((n for folder, n in folders.items() if test_id.startswith(folder + "/")), None)

    tests = [{**row, "program": program(row["id"])} for row in section["tests"]]
    return {**section, "tests": tests}


def build(stages: Stages) -> dict[str, Any]:
    """The report document (what `.pytpu/report.json` holds) from every stage's typed result.

    A new section: its data in a stage's result (`engine/stages.py`), its key here and in
    `report.schema.json`, and a partial in `templates/` included from `report.md.j2`."""
    start, migration = stages.start, stages.migration
    return {
        "version": 1,
        "tool": {"name": "PyTPU", "version": tool_version()},
        "repository": {"name": start.root.name, "path": str(start.root)},
        "base": {"rev": start.base.hexsha, "short": start.base.hexsha[:7], "branch": start.branch},
        "branch": stages.branch.name,
        "commits": [{"sha": c.hexsha, "message": c.summary} for c in stages.branch.commits],
        "target": start.settings.target,
        "target_reason": target_reason(start.settings),
        "devices": asdict(stages.parity.devices),
        "environment": stages.environment.as_dict(),
        "verdict": asdict(stages.verdict),
        "parity": parity_by_program(stages.parity.section, stages.tests.generated),
        "programs": programs(stages.tests.generated, stages.benchmark),
        "benchmark": benchmark(stages.benchmark.runs[0]),
        "benchmarks": [benchmark(run) for run in stages.benchmark.runs],
        "changes": changes(migration.run),
        "review": review(migration.run),
        "tests_generated": tests_generated(stages.tests.generated),
        "reproduce": stages.reproduce,
        "timings": {k: round(v, 1) for k, v in stages.timings.items()},
        "problems": stages.problems,
    }
