"""What a run found, for people and for machines: the analyze table, the review items with their
effort estimate, and the one-line summaries the rewrite command prints.

Nothing here runs the engine; every function takes a finished `RunResult`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pytpu.engine.rewriter.checkout import KINDS, FileResult, RunResult
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN, Finding
from pytpu.engine.rewriter.kb import EFFORT_MINUTES

if TYPE_CHECKING:  # (rich is loaded for the tables only: `rewrite` prints two plain lines)
    from rich.console import Console
    from rich.table import Table

# Effort levels in the order a person reads them; "none" items still need a look, at no cost.
LEVELS = ("low", "medium", "high", "none")
LEVEL_WORDS = {"none": "trivial"}


def needs_review(finding: Finding) -> bool:
    """Flagged and unknown sites were left for a person; unsafe rewrites must be checked by one.

    Safe and safe+note conversions cost nothing: the note only explains what was done.
    """
    return finding.kind in (FLAGGED, UNKNOWN) or finding.case.applicability == "unsafe"


def finding_message(finding: Finding) -> str:
    # Namespace rules name the site they found, as the comment in the code does.
    return finding.rule.diagnostic.message.replace("{name}", finding.snippet)


@dataclass(frozen=True)
class ReviewItem:
    path: str
    line: int
    column: int
    code: str
    rule: str
    kind: str
    applicability: str
    effort: str
    minutes: int
    message: str
    cell: int | None = None  # in a notebook: the cell that `line` counts in

    def location(self) -> str:
        """`train.py:12:5`; in a notebook `nb.ipynb cell 3:2:5` (line 2 of its third cell)."""
        where = self.path if self.cell is None else f"{self.path} cell {self.cell}"
        return f"{where}:{self.line}:{self.column}"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.cell is None:  # (a .py file's items read as they always have)
            del data["cell"]
        return data


@dataclass
class Effort:
    items: list[ReviewItem] = field(default_factory=list)

    @property
    def minutes(self) -> int:
        return sum(item.minutes for item in self.items)

    def by_level(self) -> dict[str, int]:
        counts = Counter(item.effort for item in self.items)
        return {level: counts[level] for level in LEVELS if counts[level]}

    def describe(self) -> str:
        """`about 2.5 h (3 low, 1 medium, 2 high items)`."""
        if not self.items:
            return "none (no items need review)"
        levels = ", ".join(
            f"{n} {LEVEL_WORDS.get(level, level)}" for level, n in self.by_level().items()
        )
        noun = "item" if len(self.items) == 1 else "items"
        return f"{format_minutes(self.minutes, about=True)} ({levels} {noun})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "hours": round(self.minutes / 60, 2),
            "summary": self.describe(),
            "by_effort": self.by_level(),
            "minutes_per_effort": dict(EFFORT_MINUTES),
            "review_items": [item.as_dict() for item in self.items],
        }


def format_minutes(minutes: int, about: bool = False) -> str:
    if minutes == 0:
        return "none" if about else "-"
    if minutes < 60:
        text = f"{minutes} min"
    else:
        text = f"{minutes / 60:.1f}".removesuffix(".0") + " h"
    return f"about {text}" if about else text


def review_items(result: FileResult) -> list[ReviewItem]:
    items = []
    for finding in result.findings:
        if not needs_review(finding):
            continue
        effort = finding.rule.diagnostic.effort
        items.append(
            ReviewItem(
                path=result.path,
                line=finding.line,
                column=finding.column,
                code=finding.code,
                rule=finding.rule.id,
                kind=finding.kind,
                applicability=finding.case.applicability,
                effort=effort,
                minutes=EFFORT_MINUTES[effort],
                message=finding_message(finding),
                cell=finding.cell,
            )
        )
    return items


def estimate(run: RunResult) -> Effort:
    items = [item for result in run.files for item in review_items(result)]
    items.sort(key=lambda i: (i.path, i.cell or 0, i.line, i.column, i.code))
    return Effort(items)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- the rewrite command's summary ---------------------------------------------------------


def summary_line(run: RunResult, wrote: bool) -> str:
    """Like black: `2 files would be changed, 5 left unchanged, 1 skipped with errors`."""
    changed = len(run.changed)
    errors = len(run.errors)
    unchanged = len(run.files) - changed - errors
    verb = "changed" if wrote else "would be changed"
    files = "file" if changed == 1 else "files"
    return f"{changed} {files} {verb}, {unchanged} left unchanged, {errors} skipped with errors"


def counts_line(totals: dict[str, int]) -> str:
    """`Sites: 3 converted, 1 converted with a note, 2 flagged, 0 unknown`."""
    return "Sites: " + ", ".join(f"{totals.get(kind, 0)} {kind}" for kind in KINDS)


# --- the analyze report ----------------------------------------------------------------------

COLUMNS = (
    (CONVERTED, "Converted"),
    (NOTED, "With note"),
    (FLAGGED, "Flagged only"),
    (UNKNOWN, "Unknown"),
)
LEGEND = (
    "Converted: rewritten. With note: rewritten, with a review note to read. "
    "Flagged only: left as it was, with a comment. "
    "Unknown: CUDA-specific code no rule covers."
)


def analysis_table(run: RunResult) -> Table:
    """HIPIFY's converted/unconverted statistics, one row per file with findings, and a total."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"CUDA-specific sites ({run.target})", caption=LEGEND, caption_justify="left"
    )
    table.add_column("File", overflow="fold")
    for _kind, header in COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("Review", justify="right")
    rows = sorted((r for r in run.files if r.findings), key=lambda r: r.path)
    for result in rows:
        counts = result.counts()
        minutes = sum(item.minutes for item in review_items(result))
        table.add_row(
            Text(result.path), *(str(counts[kind]) for kind, _ in COLUMNS), format_minutes(minutes)
        )
    table.add_section()
    totals = run.totals()
    table.add_row(
        Text(f"Total ({_plural(len(rows), 'file')})", style="bold"),
        *(Text(str(totals[kind]), style="bold") for kind, _ in COLUMNS),
        Text(format_minutes(estimate(run).minutes), style="bold"),
    )
    return table


def scanned_line(run: RunResult) -> str:
    with_findings = sum(1 for r in run.files if r.findings)
    errors = len(run.errors)
    without = len(run.files) - with_findings - errors
    return (
        f"{_plural(len(run.files), 'file')} scanned: {with_findings} with CUDA-specific code, "
        f"{without} without, {errors} skipped with errors"
    )


def print_analysis(run: RunResult, console: Console) -> Effort:
    """The table, the effort estimate and the review items, in that order."""
    from rich.text import Text

    effort = estimate(run)
    if any(r.findings for r in run.files):
        console.print(analysis_table(run))
    else:
        console.print("No CUDA-specific code found.")
    console.print(scanned_line(run), highlight=False)
    console.print(f"Estimated review effort: {effort.describe()}", highlight=False)
    if effort.items:
        console.print()
        console.print(Text("Review items:", style="bold"))
        for item in effort.items:
            line = Text(f"{item.location()}: ")
            line.append(item.code, style="bold")
            line.append(f" {item.message} [{item.effort}]")
            console.print(line, soft_wrap=True)
    return effort


def analysis_dict(run: RunResult) -> dict[str, Any]:
    """The machine-readable report: the run itself (each file listed there with its counts) plus
    each file's review minutes and the effort estimate."""
    data = run.as_dict()
    minutes = {r.path: sum(item.minutes for item in review_items(r)) for r in run.files}
    for entry in data["files"]:
        entry["review_minutes"] = minutes.get(entry["path"], 0)
    data["files_unchanged"] = len(run.files) - len(run.changed) - len(run.errors)
    data["effort"] = estimate(run).as_dict()
    return data
